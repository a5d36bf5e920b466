"""The text drafters' face (issue 24) and the shipped trained models against their record."""

import itertools
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
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter, ConceptDrafterConfig, TokenHistory
from ncm_verify.reference.drafting.models import ARDrafter, llama_args, make_llama, parameter_count, rows_at_temperature
from ncm_verify.reference.drafting.text import encode
from ncm_verify.reference.drafting.trained import DRAFTING_FIXTURES, file_sha256, load_record, load_trained
from ncm_verify.reference.ncm.codec import codec_decode
from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.reference.ncm.generator import level_logits
from ncm_verify.train.plan import NCM_BASE, NCM_FEATURES, PARAMETER_SLACK

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


def concept(vocab: int = V, feature_dim: int = 0, block: int = 6, seed: int = 1) -> ConceptBlockDrafter:
    config = ConceptConfig(
        vocab_size=vocab,
        sequence_length=block,
        level_lengths=(1, 2),
        codebook_sizes=(3, 2),
        prefix_length=5,
        codec_dim=8,
        d_model=16,
        num_heads=2,
        num_layers=2,
        seed=seed,
        codec_seed=seed + 1,
    )
    return ConceptBlockDrafter(ConceptDrafterConfig(config, context=5, feature_dim=feature_dim))


@pytest.fixture(scope="module")
def tiny_ncm():
    return concept()


def test_ncm_drafter_rows_are_the_codec_s_decode_of_the_codes_it_drew_not_the_latent_marginal(tiny_ncm):
    cache = tiny_ncm.make_cache()
    context = mx.array([[1, 2, 3], [4, 5, 6]])
    block = tiny_ncm.propose(cache, context, 4, mx.random.key(7), temperature=0.7)
    assert block.tokens.shape == (2, 4) and block.probs.shape == (2, 4, V) and block.codes.shape == (2, 3)
    levels = [block.codes[:, :1], block.codes[:, 1:]]
    want = mx.softmax(codec_decode(tiny_ncm.ncm, levels)[:, :4] / 0.7, axis=-1)
    np.testing.assert_allclose(np.array(block.probs), np.array(want), atol=1e-6)
    again = tiny_ncm.block_probs(context, block.tokens, block.codes, temperature=0.7)
    assert np.array_equal(np.array(again), np.array(block.probs)), "block_probs must recompute propose's rows"
    drawn = mx.take_along_axis(block.probs, block.tokens[..., None], axis=-1)
    assert mx.all(drawn > 0).item()
    marginal = tiny_ncm.marginal_probs(context, 4, temperature=0.7)
    assert not np.allclose(np.array(marginal), np.array(block.probs), atol=1e-3)


def test_ncm_drafter_cache_is_the_context_then_its_drafts_and_rolls_back(tiny_ncm):
    cache = tiny_ncm.make_cache()
    assert isinstance(cache[0], TokenHistory) and cache[0].offset == 0
    context = mx.array([[1, 2, 3]])
    block = tiny_ncm.propose(cache, context, 4, mx.random.key(3))
    assert cache[0].offset == 3 + 4, "the drafts are left past the context for the loop to trim"
    assert trim_prompt_cache(cache, 4) == 4 and cache[0].tokens.tolist() == [[1, 2, 3]]
    # reading on from a rolled-back cache is proposing from the whole context: same key, same block
    later = tiny_ncm.propose(cache, mx.array([[4, 5]]), 4, mx.random.key(9))
    fresh = tiny_ncm.propose(tiny_ncm.make_cache(), mx.array([[1, 2, 3, 4, 5]]), 4, mx.random.key(9))
    assert later.tokens.tolist() == fresh.tokens.tolist() and later.codes.tolist() == fresh.codes.tolist()
    assert block.codes.shape == (1, 3)


def test_ncm_drafter_computes_the_prefix_once_per_proposal_and_serves_it_to_every_level():
    for reader in (False, True):
        drafter = concept(feature_dim=5 if reader else 0)
        features = mx.ones((2, 5)) if reader else None
        drafter.ncm.reset_counts()
        drafter.propose(
            drafter.make_cache(), mx.array([[1, 2, 3, 4], [4, 3, 2, 1]]), 3, mx.random.key(0), features=features
        )
        # per layer: the 4 prefix positions once, then level 0's one row and level 1's two, for 2 rows of batch
        assert drafter.ncm.position_counts() == [2 * (4 + 1 + 2)] * 2


def test_ncm_block_law_is_the_generator_s_level_by_level_law_and_sums_to_one_over_blocks():
    vocab, k = 4, 3
    for reader in (False, True):
        drafter = concept(vocab=vocab, feature_dim=5 if reader else 0, block=4, seed=5)
        context = mx.array([[1, 2, 3, 0, 1, 2, 3], [0, 0, 1, 1, 2, 3, 3]])
        features = mx.array(np.random.default_rng(0).normal(size=(2, 5)), dtype=mx.float32) if reader else None
        log_prior, log_rows = drafter.block_law(context, k, features=features)
        assert log_prior.shape == (2, drafter.num_codes) and log_rows.shape == (2, drafter.num_codes, k, vocab)
        # each z's weight, level by level from the generator itself (its prefix recomputed, no PC-1)
        prefix, _ = drafter.prefix(context, features)
        codes = drafter.all_codes()
        for z in (0, 4, drafter.num_codes - 1):
            zz = mx.broadcast_to(codes[z : z + 1], (2, 3))
            levels = drafter.split_codes(zz)
            if reader:  # the feature column's K/V come from the features: PC-1 is the only route
                kv = drafter.prefix(context, features)[1]
                lp = [nn_log_softmax(drafter.level_logits(prefix, kv, levels[:level], level)) for level in (0, 1)]
            else:
                lp = [nn_log_softmax(level_logits(drafter.ncm, prefix, levels[:level], level)) for level in (0, 1)]
            want = lp[0][:, 0, int(codes[z, 0])] + lp[1][:, 0, int(codes[z, 1])] + lp[1][:, 1, int(codes[z, 2])]
            np.testing.assert_allclose(np.array(log_prior[:, z]), np.array(want), atol=1e-5)
            np.testing.assert_allclose(
                np.array(mx.exp(log_rows[:, z])),
                np.array(drafter.block_probs(context, zz[:, :k], zz, features=features)),
                atol=1e-6,
            )
        blocks = mx.array(list(itertools.product(range(vocab), repeat=k)), dtype=mx.int32)
        for b in range(2):
            many = mx.repeat(context[b : b + 1], blocks.shape[0], axis=0)
            reads = None if features is None else mx.repeat(features[b : b + 1], blocks.shape[0], axis=0)
            total = float(mx.exp(drafter.block_log_likelihood(many, blocks, features=reads)).sum())
            assert total == pytest.approx(1.0, abs=1e-5)


def nn_log_softmax(logits):
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def test_ncm_block_log_likelihood_is_the_enumerated_mixture(tiny_ncm):
    context = mx.array([[1, 2, 3]])
    block = mx.array([[2, 0, 7]])
    log_prior, log_rows = tiny_ncm.block_law(context, 3)
    want = np.log(
        sum(
            np.exp(float(log_prior[0, z]))
            * np.prod([np.exp(float(log_rows[0, z, i, int(block[0, i])])) for i in range(3)])
            for z in range(log_prior.shape[1])
        )
    )
    assert float(tiny_ncm.block_log_likelihood(context, block)[0]) == pytest.approx(want, rel=1e-5)


def test_a_feature_reading_ncm_drafter_reads_its_features_through_the_code_law_alone():
    drafter = concept(feature_dim=5)
    context = mx.array([[1, 2, 3, 4]])
    one, other = mx.zeros((1, 5)), mx.ones((1, 5))
    prior_one, rows_one = drafter.block_law(context, 2, features=one)
    prior_other, rows_other = drafter.block_law(context, 2, features=other)
    assert not np.allclose(np.array(prior_one), np.array(prior_other), atol=1e-4)
    assert np.array_equal(np.array(rows_one), np.array(rows_other))


def test_ncm_drafter_refuses_bad_blocks_codes_contexts_and_missing_features(tiny_ncm):
    cache = tiny_ncm.make_cache()
    for k in (0, 7, True, 2.0):
        with pytest.raises(ValueError, match="^k:"):
            tiny_ncm.propose(cache, mx.array([[1]]), k, mx.random.key(0))
    context, tokens = mx.array([[1, 2]]), mx.array([[1, 2]])
    for codes in (
        None,
        mx.array([[0, 1]]),
        mx.array([[0, 1, 1], [0, 0, 0]]),
        mx.array([[3, 0, 0]]),
        mx.array([[0, 2, 0]]),
    ):
        with pytest.raises(ValueError, match="^codes:"):
            tiny_ncm.block_probs(context, tokens, codes)
    with pytest.raises(ValueError, match="^context:"):
        tiny_ncm.block_law(mx.array([[V]]), 2)
    with pytest.raises(ValueError, match="^new_tokens:"):
        tiny_ncm.propose(tiny_ncm.make_cache(), mx.array([1, 2]), 2, mx.random.key(0))
    reader = concept(feature_dim=5)
    with pytest.raises(ValueError, match="^features:"):
        reader.propose(reader.make_cache(), mx.array([[1]]), 2, mx.random.key(0))
    with pytest.raises(ValueError, match="^features:"):
        reader.block_law(mx.array([[1]]), 2, features=mx.ones((1, 4)))


def test_the_ncm_drafters_hold_the_ar_draft_s_parameter_count_within_the_plan_s_slack():
    record = load_record()["models"]
    ar = record["ar_draft"]["parameters"]
    for config in (NCM_BASE, NCM_FEATURES):
        count = parameter_count(ConceptBlockDrafter(config))
        assert abs(count - ar) <= PARAMETER_SLACK * ar, (config, count, ar)


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
    ar = record["models"]["ar_draft"]["parameters"]
    ncm = {n: record["models"][n]["parameters"] for n in ("ncm_data", "ncm_distilled", "ncm_features")}
    assert ncm["ncm_data"] == ncm["ncm_distilled"], ncm
    assert all(abs(count - ar) <= PARAMETER_SLACK * ar for count in ncm.values()), (ncm, ar)
    for name in ncm:
        assert record["models"][name]["kind"] == "concept_ncm" and "objective" in record["models"][name], name


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
        assert block.tokens.shape == (1, 8) and block.codes.shape == (1, drafter.code_positions), name
        np.testing.assert_allclose(np.array(block.probs.sum(axis=-1)), 1.0, atol=1e-5)
