"""mtplx 2.12.2 judged on its rule, target distributions and rollback helpers (`peers.mtplx_spec`).

    make install-peers PEER=mtplx && make verify-peers PEERS=mtplx

Its loop (`generation.py`) loads a macOS system library at import; the properties that need it say so.
"""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncm_verify.peers import mtplx_spec as peer
from ncm_verify.tolerances import NORMALISATION, TOLERANCES

LOOP = (
    "not applicable: mtplx/generation.py (its loop, server and batched engine) loads /usr/lib/libSystem.B.dylib "
    "at import and cannot run on Linux; its rule, distributions and cache helpers are judged directly"
)
CHEAP = settings(max_examples=40)
"""The rule and distribution properties take milliseconds an example: more examples than the profile's default."""
EXACT_LAW = 1e-12
"""Total variation admitted between two float64 laws computed from the same float64 p and q: rounding only."""


@st.composite
def logit_rows(draw, vocab: int, related: bool):
    """A target logit row and a draft row: peaked or flat, the draft nearly equal to the target when `related`."""
    scale = draw(st.sampled_from([0.5, 2.0, 6.0]), label="logit scale")
    seed = draw(st.integers(0, 2**31 - 1), label="logits seed")
    rng = np.random.default_rng(seed)
    target = scale * rng.normal(size=vocab)
    noise = draw(st.sampled_from([1e-3, 0.3, 2.0]), label="draft noise") if related else scale
    return target, target + noise * rng.normal(size=vocab)


def configs():
    return st.tuples(
        st.sampled_from([0.3, 0.7, 1.0, 1.6]), st.sampled_from([1.0, 0.95, 0.6]), st.sampled_from([0, 3, 20])
    )


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", ["own", "planted"])
@pytest.mark.parametrize("where", ["host", "device"])
@CHEAP
@given(data=st.data())
def test_the_rule_emits_exactly_the_target_law_for_drafts_from_q(where, variant, data):
    """mtplx's `verify_one_token`, with its draft drawn from q, emits a token whose exact law (its own acceptance
    probability, branch and correction law, read call by call through a scripted generator) is p, on the target
    distributions it builds: host dense (`distribution_from_logits`) or device sparse (top-k support)."""
    vocab = data.draw(st.sampled_from([8, 64, 1000]), label="vocab")
    target_logits, draft_logits = data.draw(logit_rows(vocab, related=True))
    temperature, top_p, top_k = data.draw(configs(), label="(temperature, top_p, top_k)")
    if where == "device" and top_k == 0:
        top_k = 20  # the device path exists for top-k supports only
    p_host, p_device = peer.distributions(target_logits, temperature, top_p, top_k)
    q_host, q_device = peer.distributions(draft_logits, temperature, top_p, top_k)
    p, q = (p_host, q_host) if where == "host" else (p_device, q_device)
    if variant == "planted":
        with peer.planted():
            law, problems = peer.rule_law(p, q, vocab)
    else:
        law, problems = peer.rule_law(p, q, vocab)
    assert not problems, "; ".join(problems)
    want = peer.dense(p, vocab)
    tv = 0.5 * float(np.abs(law - want).sum())
    worst = np.argsort(-np.abs(law - want))[:3]
    assert tv <= EXACT_LAW, (
        f"emitted law differs from p by TV {tv:.3g}; worst tokens {worst.tolist()}: "
        f"law {law[worst].round(6).tolist()} vs p {want[worst].round(6).tolist()}"
    )


@pytest.mark.peer_law
@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", ["own", "planted"])
@settings(max_examples=1)
@given(data=st.data())
def test_sampled_tokens_of_the_rule_follow_the_target_law(variant, data):
    """mtplx's own randomness, end to end: a draft drawn by `sample_from_distribution(q, rng)`, then
    `verify_one_token(p, q, draft, rng)` (one numpy Generator, seeded from the example); the emitted tokens' law
    fits p under the statistical policy (a chi-square at TV 0.02, power 0.99; V = 8, host distributions)."""
    from mtplx.sampling import sample_from_distribution, verify_one_token

    from ncm_verify.harness import stats, strategies
    from ncm_verify.harness.checks import assert_joint_sample_fits

    rows = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="logits seed")).normal(size=(2, 8))
    temperature = data.draw(st.sampled_from([1.0, 0.7]), label="temperature")
    seed = data.draw(strategies.seeds, label="rng seed")
    (p, _), (q, _) = (peer.distributions(2.0 * row, temperature, 1.0, 0) for row in rows)  # unrelated: drafts miss

    def sample(n: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        draws = [verify_one_token(p, q, sample_from_distribution(q, rng), rng).token_id for _ in range(n)]
        return {"emitted token": np.array(draws)}

    call = f"rng = np.random.default_rng({seed}); verify_one_token(p, q, sample_from_distribution(q, rng), rng)"
    with peer.planted() if variant == "planted" else contextlib.nullcontext():
        assert_joint_sample_fits(
            {"emitted token": peer.dense(p, 8)}, sample, target_tv=stats.TARGET_TV, seed=seed, call=call
        )


@pytest.mark.peer_property(4)
@CHEAP
@given(data=st.data())
def test_the_device_target_distribution_equals_the_host_one_under_every_option(data):
    """The sparse device distribution the speculative rule uses for top-k supports equals the host reference
    (`distribution_from_logits`: penalties on raw logits, temperature, top-p, then top-k) to float32 precision."""
    vocab = data.draw(st.sampled_from([8, 64, 1000]), label="vocab")
    logits, _ = data.draw(logit_rows(vocab, related=False))
    temperature, top_p, top_k = data.draw(configs(), label="(temperature, top_p, top_k)")
    top_k = top_k or 20
    counts = data.draw(st.dictionaries(st.integers(0, vocab - 1), st.integers(1, 4), max_size=6), label="counts")
    presence = data.draw(st.sampled_from([0.0, 0.5, 1.5]), label="presence_penalty")
    frequency = data.draw(st.sampled_from([0.0, 0.4]), label="frequency_penalty")
    host, device = peer.distributions(logits, temperature, top_p, top_k, counts, presence, frequency)
    assert device is not None, "the device path declined a top-k configuration"
    host, device = peer.dense(host, vocab), peer.dense(device, vocab)
    tol = TOLERANCES[mx.float32]
    assert abs(device.sum() - 1) <= NORMALISATION[mx.float32], f"device law sums to {device.sum()}"
    assert set(np.flatnonzero(host)) == set(np.flatnonzero(device)), (
        f"supports differ: host {np.flatnonzero(host).tolist()}, device {np.flatnonzero(device).tolist()}"
    )
    assert np.allclose(device, host, atol=tol.atol, rtol=tol.rtol), f"worst |diff| {np.abs(device - host).max():.3g}"


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_rollback_after_a_rejected_verify_pass_equals_caches_rebuilt_from_the_accepted_tokens(kind, data):
    """mtplx's `snapshot_untrimmable_cache` before a verify pass, `rollback_after_verify` after it and a re-forward
    of the accepted tokens (generation.py's order) leave every mlx-lm cache as attended (KV, rotating ring
    wrapped inside the verify pass, GatedDeltaNet conv and recurrent state) equal to caches rebuilt from the
    prompt and the accepted tokens."""
    from ncm_verify.mlx_lm_real.cache_views import assert_caches_equal_rebuilt

    vocab = data.draw(st.sampled_from([8, 32]), label="vocab")
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=9), label="prompt")
    verified = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=7), label="verified")
    accepted = data.draw(st.integers(0, len(verified)), label="accepted")
    target = peer.make_target(kind, seed, vocab)
    cache = peer.verify_then_rollback(target, prompt, verified, accepted)
    call = f"verify_then_rollback(make_target({kind!r}, {seed}, {vocab}), {prompt}, {verified}, {accepted})"
    assert_caches_equal_rebuilt(target, cache, [prompt + verified[:accepted]], label=kind, call=call)


@pytest.mark.peer_property(1, 3, 6)
@pytest.mark.parametrize("what", ["greedy equals plain", "batch equals rows", "request parameters"])
def test_the_loop_properties_need_the_loop(what):
    pytest.skip(LOOP)


@pytest.mark.peer_property(2)
def test_drafts_are_drawn_from_the_q_the_rule_uses():
    pytest.skip(LOOP + " (the drafts are drawn in generation.py)")


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("drafter, variant", [("sampled", "own"), ("deterministic", "own"), ("sampled", "planted")])
@settings(max_examples=1)
@given(seed=st.integers(0, 2**16))
def test_block_verification_emits_exactly_the_target_law(drafter, variant, seed):
    """mtplx's block verification (`qwen4_block_verify`, the stock lane's Sun et al. law with its water-fill
    look-ahead), read through its own ladder and correction, gives the first g + 1 tokens of repeated rounds the
    target's exact joint law (float64 enumeration, `peers.block_judgement`): blocks of 1-3 drafts, vocabularies 2-4,
    12 seeded fixtures each, drafts sampled from q or one-hot (a greedy or n-gram drafter). The planted control
    corrects with the chain's (p - q)+ at every depth (with one-hot drafts the ladder never drops below 1 and the
    two corrections coincide, the module's c = 1 identity: planted on sampled drafts only)."""
    from ncm_verify.peers.block_judgement import judge

    rule = peer.BlockRule(peer.chain_residual if variant == "planted" else None)
    found = judge("mtplx block verification", rule, "Sun et al.", drafter, seed=seed)
    assert found.exact, (
        f"block verification off the target law by TV {found.largest_tv:.3g} at {found.drafts} drafts, vocabulary "
        f"{found.vocab} (seed {seed}, {drafter} drafts): target rows {np.round(found.target, 4).tolist()}, draft rows "
        f"{np.round(found.draft, 4).tolist()}; judge('mtplx', peer.BlockRule(), 'Sun et al.', {drafter!r}, seed={seed})"
    )


BOUNDARIES = {
    "inside the window": (1, 2),
    "ending on the window's edge": (2, 2),
    "starting inside, ending past it": (3, 3),
    "starting wrapped": (6, 2),
}
"""(prompt length, verify length) against the sliding window (`mlx_tiny.WINDOW` = 4)."""


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_the_trim_path_either_leaves_caches_rebuilt_from_the_kept_tokens_or_declines_untouched(kind, boundary, data):
    """mtplx's other rollback path (`trim_verified_window_to_prefix`, with a snapshot or without), at each boundary
    of a sliding window (verify pass inside it, ending on its edge, crossing it, starting wrapped) and with 0, some
    or all verified tokens kept: when it reports success, every cache as attended equals caches rebuilt from the
    prompt and the kept tokens; when it declines (recurrent state, a wrapped ring), it leaves the caches as they
    were, for `rollback_after_verify` to restore."""
    from ncm_verify.mlx_lm_real.cache_views import assert_caches_equal_rebuilt

    prompt_length, verify_length = BOUNDARIES[boundary]
    vocab = 8
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    tokens = st.integers(0, vocab - 1)
    prompt = data.draw(st.lists(tokens, min_size=prompt_length, max_size=prompt_length), label="prompt")
    verified = data.draw(st.lists(tokens, min_size=verify_length, max_size=verify_length), label="verified")
    keep = data.draw(st.sampled_from(sorted({0, verify_length // 2, verify_length})), label="keep")
    snapshot = data.draw(st.booleans(), label="snapshot")
    target = peer.make_target(kind, seed, vocab)
    cache, done, before = peer.verify_then_trim(target, prompt, verified, keep, snapshot)
    call = f"verify_then_trim(make_target({kind!r}, {seed}, {vocab}), {prompt}, {verified}, {keep}, {snapshot})"
    if done:
        assert_caches_equal_rebuilt(target, cache, [prompt + verified[:keep]], label=kind, call=call)
        return
    for layer, (was, now) in enumerate(zip(before, [c.state for c in cache])):
        for a, b in zip(
            was if isinstance(was, (list, tuple)) else [was], now if isinstance(now, (list, tuple)) else [now]
        ):
            assert (a is None and b is None) or np.array_equal(np.array(a), np.array(b)), (
                f"layer {layer}: mtplx declined the trim but changed the cache; {call}"
            )


def as_sparse(distribution: np.ndarray):
    """A dense mtplx distribution as its `SparseDistribution` over the positive entries (the device path's form)."""
    from mtplx.sampling import SparseDistribution

    ids = np.flatnonzero(distribution > 0)
    return SparseDistribution(ids, distribution[ids], int(distribution.shape[0]))


FORMS = ("sparse p, dense q", "dense p, sparse q", "sparse p and q")


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("forms", FORMS)
@CHEAP
@given(data=st.data())
def test_the_rule_emits_exactly_p_whatever_form_each_distribution_takes(forms, data):
    """`verify_one_token` mixes the forms its callers hand it (the device lane's sparse rows beside the host's dense
    ones): with p and q each dense or sparse, and with q = p exactly (no residual mass: its fallback), the emitted
    token's exact law, read call by call, is p; and mtplx's own marginal helper (`speculative_output_marginal`)
    says so too."""
    from mtplx.sampling import speculative_output_marginal

    vocab = data.draw(st.sampled_from([4, 8, 64]), label="vocab")
    target_logits, draft_logits = data.draw(logit_rows(vocab, related=True))
    temperature, top_p, top_k = data.draw(configs(), label="(temperature, top_p, top_k)")
    p, _ = peer.distributions(target_logits, temperature, top_p, top_k)
    same = data.draw(st.booleans(), label="q = p")
    q = p.copy() if same else peer.distributions(draft_logits, temperature, top_p, top_k)[0]
    sparse_p, sparse_q = forms != "dense p, sparse q", forms != "sparse p, dense q"
    law, problems = peer.rule_law(as_sparse(p) if sparse_p else p, as_sparse(q) if sparse_q else q, vocab)
    assert not problems, "; ".join(problems)
    tv = 0.5 * float(np.abs(law - p).sum())
    assert tv <= EXACT_LAW, f"{forms}{' (q = p)' if same else ''}: emitted law off p by TV {tv:.3g}"
    marginal = speculative_output_marginal(p, q)
    assert 0.5 * float(np.abs(marginal - p).sum()) <= EXACT_LAW, f"mtplx's own marginal off p: {marginal} vs {p}"


@pytest.mark.peer_property(4)
@pytest.mark.parametrize(
    "row, error",
    [
        ("two-dimensional ids", ValueError),
        ("ids and probabilities of different lengths", ValueError),
        ("no entry", ValueError),
        ("a negative probability", ValueError),
        ("no finite positive mass", RuntimeError),
    ],
)
def test_a_malformed_sparse_row_is_refused_with_an_error_naming_it(row, error):
    """A sparse row the rule cannot sample from is refused at construction (never sampled as token 0): each malformed
    form raises, the non-finite one `NonFiniteLogitsError` with its NaN/inf census and vocabulary in the message."""
    from mtplx.sampling import NonFiniteLogitsError, SparseDistribution

    rows = {
        "two-dimensional ids": ([[0, 1]], [0.5, 0.5]),
        "ids and probabilities of different lengths": ([0, 1], [1.0]),
        "no entry": ([], []),
        "a negative probability": ([0, 1], [1.5, -0.5]),
        "no finite positive mass": ([0, 1, 2], [np.nan, np.inf, 0.0]),
    }
    ids, probs = rows[row]
    with pytest.raises(error) as raised:
        SparseDistribution(np.array(ids), np.array(probs), 8)
    if row == "no finite positive mass":
        assert isinstance(raised.value, NonFiniteLogitsError), f"{type(raised.value).__name__}: {raised.value}"
        assert "nan=1" in str(raised.value) and "inf=1" in str(raised.value) and "vocab=3" in str(raised.value), (
            f"the error does not name the row's census: {raised.value}"
        )


def test_rows_the_distribution_helpers_cannot_use_are_refused():
    """The host helpers refuse what they cannot turn into a distribution: a softmax of a row without finite mass
    (`NonFiniteLogitsError`, its message bare when no census is given), and two-dimensional rows for top-k and
    top-p; a row that top-p and top-k leave empty falls back to its argmax's point mass."""
    from mtplx.sampling import NonFiniteLogitsError, apply_top_p_top_k, deterministic_top_k_order, softmax

    with pytest.raises(NonFiniteLogitsError, match="nan=0, inf=2, vocab=2"):
        softmax(np.array([np.inf, np.inf]))
    assert str(NonFiniteLogitsError("non-finite logits")) == "non-finite logits", "a census appeared from nowhere"
    with pytest.raises(ValueError):
        deterministic_top_k_order(np.zeros((2, 3)), 1)
    with pytest.raises(ValueError):
        apply_top_p_top_k(np.full((2, 3), 1 / 3), top_p=0.5)
    fallback = apply_top_p_top_k(np.array([0.0, 0.0, 0.0]), top_p=0.5, top_k=1)
    assert fallback.tolist() == [1.0, 0.0, 0.0], f"an empty row: {fallback.tolist()}"


@pytest.mark.peer_property(4)
@CHEAP
@given(data=st.data())
def test_greedy_and_penalty_overlay_distributions_are_what_the_options_say(data):
    """`distribution_from_logits` at temperature 0 is the argmax's point mass; the Loop Guard's `penalty_overlay`
    subtracts exactly its values from the raw logits (the host and device paths agree on it); top-k 0 and the
    top-k order's ties by id are the documented ones."""
    from mtplx.fast_sampling import sparse_distribution_from_mlx_logits
    from mtplx.sampling import SamplerConfig, deterministic_top_k_order, distribution_from_logits, softmax

    vocab = data.draw(st.sampled_from([8, 64]), label="vocab")
    logits, _ = data.draw(logit_rows(vocab, related=False))
    greedy = distribution_from_logits(logits, SamplerConfig(temperature=0.0, top_p=1.0, top_k=0))
    assert greedy[int(np.argmax(logits))] == 1.0 and greedy.sum() == 1.0, f"temperature 0: {greedy}"
    overlay = data.draw(st.dictionaries(st.integers(0, vocab - 1), st.sampled_from([0.5, 3.0]), min_size=1, max_size=4))
    config = SamplerConfig(temperature=1.0, top_p=1.0, top_k=0)
    host = distribution_from_logits(logits, config, penalty_overlay=overlay)
    shifted = np.array(logits, dtype=np.float64)
    for token, value in overlay.items():
        shifted[token] -= value
    assert np.allclose(host, softmax(shifted), rtol=1e-12, atol=1e-15), f"overlay {overlay} not subtracted"
    device = sparse_distribution_from_mlx_logits(
        mx.array(logits, dtype=mx.float32), SamplerConfig(temperature=1.0, top_p=1.0, top_k=vocab),
        penalty_overlay=overlay,
    )  # fmt: skip
    assert device is not None, "the device path declined a top-k configuration with an overlay"
    tol = TOLERANCES[mx.float32]
    assert np.allclose(peer.dense(device, vocab), host, atol=tol.atol, rtol=tol.rtol), "device overlay differs"
    assert deterministic_top_k_order(logits, 0).size == 0, "top-k 0 keeps tokens"
    ties = deterministic_top_k_order(np.zeros(vocab), 3)
    assert ties.tolist() == [0, 1, 2], f"ties not broken by id: {ties.tolist()}"


@pytest.mark.peer_property(2)
@CHEAP
@given(data=st.data())
def test_block_verification_armed_from_a_batch_of_target_rows_equals_it_armed_from_a_list(data):
    """`build_verifier` takes the target rows as a batch (`target_batch`: the lane's `[D, K]` sparse rows, zero
    padded) or a list: the ladder (accept coins, budgets) and every depth's correction are the same; and it
    declines (None, the shipped chain law then) when a row is missing or has no mass."""
    from types import SimpleNamespace

    from mtplx.qwen4_block_verify import build_verifier

    vocab = data.draw(st.sampled_from([3, 6]), label="vocab")
    depth = data.draw(st.integers(1, 3), label="drafts")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="rows seed"))
    target = rng.dirichlet(np.full(vocab, 0.7), size=depth)
    draft = rng.dirichlet(np.full(vocab, 0.7), size=depth)
    drafts = [int(rng.choice(vocab, p=row)) for row in draft]
    from_list = build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=list(target), vocab_size=vocab)
    batch = SimpleNamespace(token_ids=np.tile(np.arange(vocab), (depth, 1)), probs=target, vocab_size=vocab)
    from_batch = build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_batch=batch)
    assert from_list is not None and from_batch is not None, "a complete window was not armed"
    assert from_batch.accept_probability == from_list.accept_probability, "accept coins differ"
    for d in range(depth):
        assert np.array_equal(
            peer.dense(from_batch.scaled_residual(d), vocab), peer.dense(from_list.scaled_residual(d), vocab)
        )
    short = SimpleNamespace(token_ids=batch.token_ids[: depth - 1], probs=target[: depth - 1], vocab_size=vocab)
    empty = np.zeros_like(target)
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_batch=short) is None, "short batch"
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=list(target)[:-1]) is None
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=list(empty)) is None, "no mass"
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft)) is None, "no target rows"
    assert build_verifier(draft_tokens=[], draft_probs=[]) is None, "no drafts"
    missing = build_verifier(draft_tokens=drafts, draft_probs=list(draft)[:-1], target_list=list(target))
    assert missing is None, "a missing draft row"
    torn = SimpleNamespace(token_ids=np.arange(vocab), probs=np.ones(vocab - 1) / (vocab - 1))
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=[torn] * depth) is None, "torn"
    assert build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=[None] * depth) is None, "none"
    for other in (
        build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_batch=batch, vocab_size=vocab),
        build_verifier(draft_tokens=drafts, draft_probs=list(draft), target_list=list(target)),  # vocabulary inferred
    ):
        assert other is not None and other.accept_probability == from_list.accept_probability, "coins differ"
    with pytest.raises(ValueError):
        type(from_list)(draft_tokens=drafts, draft_rows=from_list.draft, target_rows=[], vocab_size=vocab)


MALFORMED = {"negative keep": (-1, 2), "keep more than verified": (3, 2), "trim past the cache": (0, 40)}
"""(keep, verified tokens claimed) that `trim_verified_window_to_prefix` must decline."""


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_trim_path_declines_malformed_counts_and_empty_caches_without_touching_them(case):
    """Counts the trim path cannot honour (a negative keep, more kept than verified, more to trim than the cache
    holds) and an empty cache list are declined (False), the caches left as they were."""
    from mlx_lm.models.cache import make_prompt_cache
    from mtplx.cache_state import (
        snapshot_untrimmable_cache,
        trim_verified_window_to_prefix,
        trim_verified_window_without_snapshot,
    )

    keep, verified = MALFORMED[case]
    target = peer.make_target("attention", 5, 8)
    cache = make_prompt_cache(target)
    target(mx.array([[1, 2, 3, 4, 5]]), cache=cache)
    snapshot = snapshot_untrimmable_cache(cache)
    offsets = [int(c.offset) for c in cache]
    done = trim_verified_window_to_prefix(cache, snapshot, verified_tokens=verified, keep_tokens=keep)
    assert done is False, f"{case}: trim_verified_window_to_prefix said it trimmed"
    assert [int(c.offset) for c in cache] == offsets, f"{case}: declined but moved offsets {offsets}"
    assert trim_verified_window_without_snapshot([], verified_tokens=2, keep_tokens=1) is False, "an empty cache list"
    assert trim_verified_window_to_prefix([], type(snapshot)((), ()), verified_tokens=2, keep_tokens=1) is False
