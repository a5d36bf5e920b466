"""dspark-mlx 0.1.0 judged on its own loops, host adapter and rule (`peers.dspark_mlx_spec`).

make install-peers PEER=dspark-mlx && make verify-peers PEERS=dspark-mlx
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import Decoding, assert_cache_attends_as_uncached, assert_greedy_equals_plain

from ncm_verify.peers import dspark_mlx_spec as peer
from ncm_verify.tolerances import TOLERANCES

VARIANTS = ("own", "planted")
MORE = settings(max_examples=6)
EXACT_LAW = 1e-12
"""TV admitted between two float64 laws computed from the same float64 p and q: rounding only."""


@st.composite
def cases(draw):
    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=6), label="prompt")
    max_tokens = draw(st.integers(4, 20), label="max_tokens")
    block = draw(st.integers(2, 5), label="block_size")
    target, drafter = peer.make_target("attention", seed, vocab), peer.make_drafter(seed + 1, vocab, block)
    call = (
        f"target = make_target('attention', {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}, {block}); "
        f"generate(target, drafter, {prompt}, {max_tokens}, loop)"
    )
    note(f"from ncm_verify.peers.dspark_mlx_spec import *; {call}")
    return Decoding(target, drafter, prompt, max_tokens, call)


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("loop", peer.LOOPS)
@MORE
@given(data=st.data())
def test_greedy_speculative_decoding_emits_plain_greedy_decoding(loop, variant, data):
    """Both loops emit the package's own plain greedy decoding (`cli._base_greedy`) token for token, and each token
    is the argmax of one uncached forward pass ("output is identical to base greedy", its docstrings say); the
    eager loop with and without its confidence gate."""
    target, drafter, prompt, max_tokens, call = data.draw(cases())
    gate = data.draw(st.sampled_from([0.0, 0.5]), label="confidence_threshold") if loop == "eager" else 0.0
    if variant == "planted":
        with peer.planted():
            spec = peer.generate(target, drafter, prompt, max_tokens, loop, confidence_threshold=gate)
    else:
        spec = peer.generate(target, drafter, prompt, max_tokens, loop, confidence_threshold=gate)
    plain = peer.plain(target, prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"{loop} ({call})")


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("kind", ["hybrid", "sliding-window"])
def test_the_host_adapter_on_hybrid_and_sliding_window_targets(kind):
    pytest.skip(
        f"not applicable: the mlx-lm host adapter (hosts/mlx_lm.py) runs layer(h, mask, cache) with one mask from "
        f"create_attention_mask(h, cache[0]); a {kind} target raises TypeError before any token (qwen3_next: "
        f"ArraysCache.make_mask; gemma4_text: its layers take other arguments): loud, not a wrong output"
    )


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", VARIANTS)
@settings(max_examples=30)
@given(data=st.data())
def test_the_sampled_rule_emits_exactly_the_target_law_for_drafts_from_q(variant, data):
    """`speculative_sample_accept` ("lossless speculative sampling"), its draft drawn from q: the emitted token's
    exact law (per draft, its acceptance probability found on a scripted generator and the law it hands
    `choice` on rejection) is p. Peaked and flat rows, drafts near and far from the target."""
    vocab = data.draw(st.sampled_from([4, 8, 64]), label="vocab")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="rows seed"))
    scale = data.draw(st.sampled_from([0.5, 2.0, 6.0]), label="logit scale")
    noise = data.draw(st.sampled_from([1e-3, 0.3, 2.0]), label="draft noise")
    logits = scale * rng.normal(size=vocab)
    p, q = (np.exp(x - x.max()) / np.exp(x - x.max()).sum() for x in (logits, logits + noise * rng.normal(size=vocab)))
    if variant == "planted":
        with peer.planted_rule():
            law = peer.rule_law(p, q)
    else:
        law = peer.rule_law(p, q)
    tv = 0.5 * float(np.abs(law - p).sum())
    assert tv <= EXACT_LAW, f"emitted law differs from p by TV {tv:.3g}: law {law.round(4)} vs p {p.round(4)}"


@pytest.mark.peer_property(2, 3, 4, 6)
@pytest.mark.parametrize("what", ["sampled loop", "batch", "sampling options", "request parameters"])
def test_what_the_loops_do_not_offer(what):
    pytest.skip(
        "not applicable: both loops (generate, generate_eager) are greedy, batch 1, and take only max_new_tokens "
        "and eos_id; speculative_sample_accept is exported but no loop in 0.1.0 calls it (judged as a rule above)"
    )


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("loop", peer.LOOPS)
@MORE
@given(data=st.data())
def test_after_every_rollback_the_base_cache_attends_as_the_tokens_it_keeps_uncached(loop, data):
    """Each `kv_rollback(n_keep)` leaves the host's KV cache holding the first n_keep committed tokens: a copy fed
    the next committed token gives one uncached pass's log-probabilities (float32 tolerance)."""
    import copy

    target, drafter, prompt, max_tokens, call = data.draw(cases())
    host, rounds = peer.adapter(target), []
    own = host.kv_rollback

    def rollback(n_keep):
        own(n_keep)
        rounds.append((n_keep, copy.deepcopy(host._cache)))

    host.kv_rollback = rollback
    tokens = prompt + peer.generate(target, drafter, prompt, max_tokens, loop, host=host)
    note(f"{len(rounds)} rollbacks")
    for number, (held, cache) in enumerate(rounds):
        if held < len(tokens):
            label = f"{loop} rollback {number} ({call})"
            assert_cache_attends_as_uncached(target, cache, tokens, held, TOLERANCES[mx.float32], label)


@pytest.mark.peer_property(6)
def test_the_rules_and_the_host_refuse_shapes_they_cannot_judge():
    """dspark-mlx's checks: a greedy or sampled acceptance handed base rows for other than K + 1 positions, and a
    host adapter asked for target layers its model has not, each raise ValueError (not a wrong acceptance)."""
    from dspark_mlx.hosts.mlx_lm import MlxLmHostAdapter
    from dspark_mlx.verify import greedy_accept, speculative_sample_accept

    drafts, rows = np.array([1, 2]), np.full((2, 4), 0.25)  # K = 2 drafts, 2 rows (3 needed)
    with pytest.raises(ValueError, match="K\\+1"):
        greedy_accept(drafts, rows)
    with pytest.raises(ValueError, match="K\\+1"):
        speculative_sample_accept(drafts, np.full((2, 4), 0.25), rows, np.random.default_rng(0))
    with pytest.raises(ValueError, match="out of range"):
        MlxLmHostAdapter(peer.make_target("attention", 1, 6), (1, 9))


@pytest.mark.peer_property(6)
@pytest.mark.parametrize("loop", peer.LOOPS)
def test_a_budget_of_no_tokens_decodes_none(loop):
    """`max_new_tokens=0`: both loops emit no token, their loop never entered."""
    tokens = peer.generate(peer.make_target("attention", 2, 6), peer.make_drafter(3, 6), [1, 2, 3], 0, loop)
    assert tokens == [], f"{loop}: max_new_tokens=0 emitted {tokens}"
