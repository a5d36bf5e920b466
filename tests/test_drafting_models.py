"""The text drafters' face (issue 24) and the shipped trained models against their record."""

import json
import shutil
import subprocess

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import trim_prompt_cache

from ncm_verify.environment import suite_root
from ncm_verify.harness import drafting_acceptance as c10
from ncm_verify.harness.drafting_acceptance import prefix_rows
from ncm_verify.reference.drafting.models import (
    ARDrafter,
    NCMBlockDrafter,
    NCMDrafterConfig,
    llama_args,
    make_llama,
    rows_at_temperature,
)
from ncm_verify.reference.drafting.text import encode
from ncm_verify.reference.drafting.trained import DRAFTING_FIXTURES, file_sha256, load_record, load_trained

V = 11


@pytest.fixture(scope="module")
def tiny_llama():
    mx.random.seed(0)
    return make_llama(llama_args(V, hidden=16, layers=2, intermediate=24, heads=2))


def test_prefix_rows_from_the_stored_context_equal_a_full_forward(tiny_llama):
    contexts = mx.array(np.random.default_rng(0).integers(0, V, size=(3, 7)), dtype=mx.int32)
    keys = [(0, ()), (1, (4,)), (2, (3, 5)), (0, (1, 2, 3)), (2, (6,))]
    got = prefix_rows(tiny_llama, contexts)(keys)
    for row, (c, prefix) in zip(got, keys):
        full = mx.concatenate([contexts[c], mx.array(prefix, dtype=mx.int32)])[None]
        want = np.array(mx.softmax(tiny_llama(full)[0, -1], axis=-1), dtype=np.float64)
        np.testing.assert_allclose(row, want, atol=1e-5)


def test_ar_drafter_returns_the_rows_its_tokens_were_drawn_from_and_its_cache_rolls_back(tiny_llama):
    drafter = ARDrafter(tiny_llama)
    cache = drafter.make_cache()
    context = mx.array([[1, 2, 3, 4]])
    block = drafter.propose(cache, context, 5, mx.random.key(3))
    assert block.tokens.shape == (1, 5) and block.probs.shape == (1, 5, V) and block.codes is None
    drawn = mx.take_along_axis(block.probs, block.tokens[..., None], axis=-1)
    assert mx.all(drawn > 0).item()
    # Row i is the model's row after the context and the drafted tokens before i.
    seq = mx.concatenate([context, block.tokens[:, :-1]], axis=1)
    want = mx.softmax(tiny_llama(seq)[:, 3:], axis=-1)
    np.testing.assert_allclose(np.array(block.probs), np.array(want), atol=1e-5)
    assert cache[0].offset == 4 + 4
    trim_prompt_cache(cache, 4)
    assert cache[0].offset == 4


def test_greedy_rows_are_the_one_hot_rows_of_the_argmax():
    logits = mx.array([[0.1, 2.0, -1.0], [3.0, 0.0, 3.5]])
    assert rows_at_temperature(logits, 0).tolist() == [[0, 1, 0], [0, 0, 1]]


@pytest.fixture(scope="module")
def tiny_ncm():
    mx.random.seed(1)
    return NCMBlockDrafter(NCMDrafterConfig(vocab_size=V, hidden=16, layers=1, intermediate=24, heads=2, max_block=6))


def test_ncm_drafter_rows_are_q_given_the_codes_it_drew_not_the_latent_marginal(tiny_ncm):
    cache = tiny_ncm.make_cache()
    context = mx.array([[1, 2, 3], [4, 5, 6]])
    block = tiny_ncm.propose(cache, context, 4, mx.random.key(7))
    assert block.codes.shape == (2, tiny_ncm.config.levels)
    h = tiny_ncm.context_state(context)[:, -1]
    _, u = tiny_ncm.code_logprobs(h, block.codes)
    want = mx.softmax(tiny_ncm.decode_logits(u, 4), axis=-1)
    np.testing.assert_allclose(np.array(block.probs), np.array(want), atol=1e-6)
    assert cache[0].offset == 3, "drafting a block must not write the drafted tokens into the context cache"


def test_ncm_block_log_likelihood_is_the_enumerated_mixture(tiny_ncm):
    h = tiny_ncm.context_state(mx.array([[1, 2, 3]]))[:, -1]
    block = mx.array([[2, 0, 7]])
    log_prior, log_rows = tiny_ncm.block_law(h, 3)
    want = np.log(
        sum(
            np.exp(float(log_prior[0, z]))
            * np.prod([np.exp(float(log_rows[0, z, i, int(block[0, i])])) for i in range(3)])
            for z in range(log_prior.shape[1])
        )
    )
    assert float(tiny_ncm.block_log_likelihood(h, block)[0]) == pytest.approx(want, rel=1e-5)


def test_ncm_drafter_refuses_a_block_longer_than_it_decodes_and_missing_features(tiny_ncm):
    with pytest.raises(ValueError, match="k"):
        tiny_ncm.propose(tiny_ncm.make_cache(), mx.array([[1]]), 7, mx.random.key(0))
    reader = NCMBlockDrafter(
        NCMDrafterConfig(vocab_size=V, hidden=16, layers=1, intermediate=24, heads=2, feature_dim=5)
    )
    with pytest.raises(ValueError, match="features"):
        reader.propose(reader.make_cache(), mx.array([[1]]), 2, mx.random.key(0))


# --- the shipped models ---


def test_every_shipped_model_matches_its_record_and_loads():
    record = load_record()
    for name, entry in record["models"].items():
        path = DRAFTING_FIXTURES / entry["file"]
        assert file_sha256(path) == entry["sha256"], name
        tensors = mx.load(str(path))
        assert {k: list(v.shape) for k, v in tensors.items()} == entry["shapes"], name
        assert sum(int(np.prod(s)) for s in entry["shapes"].values()) == entry["parameters"], name
        for field in ("data", "seed", "steps", "wall_seconds", "held_out_loss"):
            assert field in entry, (name, field)
        load_trained(name)
    assert sum((DRAFTING_FIXTURES / e["file"]).stat().st_size for e in record["models"].values()) < 4_000_000
    drafters = {record["models"][n]["parameters"] for n in ("ncm_data", "ncm_distilled", "ncm_features", "ar_draft")}
    assert len(drafters) == 1, f"the drafters' parameter counts differ: {drafters}"


def test_a_corrupted_model_file_is_refused(tmp_path):
    directory = tmp_path / "drafting"
    shutil.copytree(DRAFTING_FIXTURES, directory)
    entry = json.loads((directory / "record.json").read_text())["models"]["target"]
    data = bytearray((directory / entry["file"]).read_bytes())
    data[-5] ^= 0xFF
    (directory / entry["file"]).write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        load_trained("target", directory)


def test_make_test_never_trains():
    dry = subprocess.run(["make", "-n", "test"], cwd=suite_root(), capture_output=True, text=True, check=True)
    assert "ncm_verify.train" not in dry.stdout and "make train" not in dry.stdout


def test_c10_s_paired_test_has_teeth_on_the_shipped_drafters():
    # The AR draft accepts far longer blocks than the NCM drafter (a check with power), and a drafter is
    # never shown better than itself (a check that can fail).
    _, results = c10.c10(contexts=16, directions=("ar_draft", "ncm_data"), baseline="ncm_data")
    verdicts = {r.direction: r.shown for r in results}
    assert verdicts == {"ar_draft": True, "ncm_data": False}, results


def test_mlx_lm_s_own_loops_run_the_shipped_target_and_ar_draft_unchanged():
    from mlx_lm.generate import generate_step, speculative_generate_step

    target, draft = load_trained("target"), load_trained("ar_draft")
    prompt = mx.array(encode("The return statement"), dtype=mx.int32)
    greedy = [int(t) for t, _ in generate_step(prompt, target, max_tokens=12)]
    drafted = speculative_generate_step(prompt, target, draft, num_draft_tokens=3, max_tokens=12)
    speculative = [int(t) for t, _, _ in drafted]
    assert speculative == greedy


def test_shipped_ncm_drafters_propose_blocks_given_the_target_s_features_where_they_read_them():
    from ncm_verify.reference.drafting.models import target_features

    target = load_trained("target")
    context = mx.array(encode("The return statement")[None], dtype=mx.int32)
    features = target_features(target, context)[:, -1]
    for name in ("ncm_data", "ncm_distilled", "ncm_features"):
        drafter = load_trained(name)
        block = drafter.propose(drafter.make_cache(), context, 8, mx.random.key(0), features=features)
        assert block.tokens.shape == (1, 8) and block.codes.shape == (1, drafter.config.levels), name
        np.testing.assert_allclose(np.array(block.probs.sum(axis=-1)), 1.0, atol=1e-5)
