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
