"""The peers: adapters take the protocol's arrays and uniforms to the peer's own code; the comparison decides the
peers run (a real peer's failure is a finding; the planted one must fail) and renders it."""

import json

import mlx.core as mx
import numpy as np
import pytest
from synthetic import chi_square_record, node

from ncm_verify.peers import edge_cases, numpy_chain
from ncm_verify.reference import speculative
from ncm_verify.report import peers as comparison


def chain_inputs(seed: int, batch: int = 16, drafts: int = 3, vocab: int = 6):
    """Random rows, drafts sampled from q, mixed draft lengths and the reference's uniforms."""
    rng = np.random.default_rng(seed)
    target = rng.dirichlet(np.ones(vocab) * 0.5, (batch, drafts + 1)).astype(np.float32)
    draft = rng.dirichlet(np.ones(vocab) * 0.5, (batch, drafts)).astype(np.float32)
    tokens = np.array([[rng.choice(vocab, p=row / row.sum()) for row in rows] for rows in draft.astype(np.float64)])
    num_draft = rng.integers(0, drafts + 1, batch)
    uniforms = speculative.draw_uniforms(mx.random.key(seed), batch, (2, drafts + 1))
    arrays = mx.array(target), mx.array(draft), mx.array(tokens, dtype=mx.int32), mx.array(num_draft, dtype=mx.int32)
    return arrays, uniforms


def outcome_lists(outcome) -> tuple[list, list]:
    return np.array(outcome.tokens).tolist(), np.array(outcome.num_accepted).tolist()


def transformers_peers():
    for package in ("torch", "transformers"):  # mlx-lm brings transformers; torch only the peers extra
        pytest.importorskip(package, reason="the peers extra is not installed (make install-peers)")
    from ncm_verify.peers import transformers_pre28508, transformers_step

    return transformers_step, transformers_pre28508


@pytest.mark.parametrize("seed", range(4))
def test_the_numpy_peer_takes_the_reference_steps_decisions_at_the_same_uniforms(seed):
    arrays, uniforms = chain_inputs(seed)
    assert outcome_lists(numpy_chain.apply_chain(*arrays, uniforms)) == outcome_lists(
        speculative.apply_chain(*arrays, uniforms)
    )


def test_the_numpy_peers_verify_is_its_apply_at_the_uniforms_it_draws():
    arrays, _ = chain_inputs(5)
    key = mx.random.key(9)
    drawn = numpy_chain.draw_uniforms(key, 16, (2, 4))
    verified = numpy_chain.verify_chain(*arrays[:3], key=key, num_draft=arrays[3])
    assert outcome_lists(verified) == outcome_lists(numpy_chain.apply_chain(*arrays, drawn))


@pytest.mark.parametrize("seed", range(4))
def test_transformers_step_at_fed_uniforms_takes_the_reference_steps_decisions(seed):
    transformers_step, _ = transformers_peers()
    arrays, uniforms = chain_inputs(seed)
    assert outcome_lists(transformers_step.apply_chain(*arrays, uniforms)) == outcome_lists(
        speculative.apply_chain(*arrays, uniforms)
    )


def test_feeding_uniforms_patches_torch_only_during_the_call():
    transformers_step, _ = transformers_peers()
    module = transformers_step.transformers_module()
    before = module.torch
    arrays, uniforms = chain_inputs(1)
    transformers_step.apply_chain(*arrays, uniforms)
    assert module.torch is before and module.torch.rand_like is before.rand_like


def test_transformers_verify_repeats_under_the_same_key_and_batches_rows_alike():
    transformers_step, _ = transformers_peers()
    arrays, _ = chain_inputs(2, batch=6)
    keys = mx.random.split(mx.random.key(4), 6)
    first = transformers_step.verify_chain(*arrays[:3], key=keys, num_draft=arrays[3])
    assert outcome_lists(first) == outcome_lists(
        transformers_step.verify_chain(*arrays[:3], key=keys, num_draft=arrays[3])
    )
    alone = transformers_step.verify_chain(*(a[2:3] for a in arrays[:3]), key=keys[2:3], num_draft=arrays[3][2:3])
    assert np.array(alone.tokens).tolist()[0] == np.array(first.tokens).tolist()[2]


def test_the_planted_peer_differs_from_transformers_only_in_its_correction():
    transformers_step, planted = transformers_peers()
    arrays, uniforms = chain_inputs(3, batch=64)
    fixed, old = transformers_step.apply_chain(*arrays, uniforms), planted.apply_chain(*arrays, uniforms)
    assert np.array_equal(np.array(fixed.num_accepted), np.array(old.num_accepted)), "acceptance is the same code"
    assert not np.array_equal(np.array(fixed.tokens), np.array(old.tokens)), "the softmaxed residual draws elsewhere"


def test_each_edge_case_of_the_numpy_peer_is_judged_from_its_own_reproduction():
    results = {r["case"]: r for r in edge_cases.probe_peer("ncm_verify.peers.numpy_chain")}
    assert set(results) == set(edge_cases.CASES)
    assert results["p(x) = 0 at u = 0"]["verdict"] == edge_cases.HANDLED
    assert results["out-of-range ids"]["verdict"] == edge_cases.MISHANDLED, results["out-of-range ids"]
    assert "numpy_chain_step" in results["NaN rows"]["reproduction"]


def write_peer(root, name: str, nodes: list[dict], **facts) -> None:
    folder = root / comparison.PEERS_DIR / name
    folder.mkdir(parents=True)
    (folder / comparison.PEER_FILE).write_text(json.dumps({"name": name, "exit_status": 1, **facts}))
    (folder / "evidence.json").write_text(json.dumps({"properties": nodes}))


def failed(nodeid: str) -> dict:
    return node(nodeid, ["C5"], outcome="failed", failure={"message": "chi-square rejects\nworst bin"})


def test_a_real_peers_failure_is_a_finding_and_the_planted_peer_failing_passes_the_run(tmp_path):
    sampled = node("properties/test_chain.py::test_sampled", ["C5"], stats=[chi_square_record("t", 0.4)])
    write_peer(tmp_path, "real", [sampled, failed("properties/test_numerics.py::test_x")], versions="peer 1.0")
    write_peer(tmp_path, "planted", [failed("properties/test_chain.py::test_sampled")], planted="old correction")
    result = comparison.write_comparison(tmp_path)
    assert result["verdict"] == "passed", result["reasons"]
    real = next(p for p in result["peers"] if p["name"] == "real")
    assert real["findings"] == 1 and real["sample_sizes"]["n_min"] == 8192
    text = (tmp_path / comparison.COMPARISON_MD).read_text()
    assert "| real | peer 1.0 |" in text and "chi-square rejects" in text


def test_a_planted_peer_that_no_property_fails_fails_the_run(tmp_path):
    write_peer(tmp_path, "planted", [node("properties/test_chain.py::test_sampled", ["C5"])], planted="old correction")
    result = comparison.make_comparison(tmp_path)
    assert result["exit_status"] == 1
    assert any("was not caught" in reason for reason in result["reasons"]), result["reasons"]


def test_a_peer_whose_run_broke_or_a_run_without_a_planted_peer_fails(tmp_path):
    write_peer(tmp_path, "real", [], exit_status=4)
    result = comparison.make_comparison(tmp_path)
    assert any("exited 4" in reason for reason in result["reasons"])
    assert any("no planted peer" in reason for reason in result["reasons"])


def test_ncm_verify_peers_rebuild_rewrites_the_comparison_and_exits_with_its_verdict(tmp_path):
    from ncm_verify.cli import main

    write_peer(tmp_path, "planted", [node("properties/test_chain.py::test_sampled", ["C5"])], planted="old correction")
    assert main(["peers", "--rebuild", "--reports", str(tmp_path)]) == 1
    assert "was not caught" in (tmp_path / comparison.COMPARISON_MD).read_text()
