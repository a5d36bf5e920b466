"""nunspark 0.13.0 judged on its streaming engine's speculative loops and tree rule (`peers.nunspark_spec`).

make install-peers PEER=nunspark && make verify-peers PEERS=nunspark
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import (
    Decoding,
    assert_first_tokens_follow_the_law,
    assert_greedy_equals_plain,
    first_difference,
    first_tokens_law,
    tempered,
)

from ncm_verify.peers import nunspark_spec as peer

EXACT_LAW = 1e-6
"""TV admitted between the rule's law and p: the rule computes its ratios and residuals in float32."""
GREEDY_CASES = [
    (kind, loop, variant)
    for kind in peer.TARGET_KINDS
    for loop in peer.LOOPS
    for variant in ("own", "planted")
    if not (kind == "sliding-window" and loop == "tree" and variant == "planted")  # its own run raises already
]


@st.composite
def cases(draw, kind: str, loop: str):
    vocab = draw(st.sampled_from([4, 6]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=7), label="prompt")
    max_tokens = draw(st.integers(8, 16), label="max_tokens")  # rounds enough for a rejection to tell
    options = (
        {"draft_tokens": draw(st.integers(1, 4), label="num_draft_tokens")}
        if loop == "linear"
        else {"shape": draw(st.sampled_from(peer.SHAPES), label="tree shape")}
    )
    target, drafter = peer.make_target(kind, seed, vocab), peer.make_drafter(seed + 1, vocab)
    call = (
        f"target = make_target({kind!r}, {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); "
        f"generate(engine(target), drafter, {prompt}, {max_tokens}, {loop!r}, **{options})"
    )
    note(f"from ncm_verify.peers.nunspark_spec import *; {call}")
    return Decoding(target, drafter, options, prompt, max_tokens, call)


@pytest.mark.peer_property(1, 5)
@pytest.mark.parametrize(("kind", "loop", "variant"), GREEDY_CASES)
@settings(max_examples=6)
@given(data=st.data())
def test_greedy_speculative_decoding_emits_plain_greedy_decoding(kind, loop, variant, data):
    """Linear (`speculative_generate`, accept_top_k=1: "LOSSLESS") and tree (`tree_speculative_generate`, temp 0)
    speculative decoding on the streaming engine emit its own plain `generate` tokens, each the argmax of one
    uncached forward pass; on a sliding-window target (a ring of 4) the accepted rows must be committed through
    the ring as if fed one by one (`commit_verified`, `commit_path`: rollback by never committing)."""
    target, drafter, options, prompt, max_tokens, call = data.draw(cases(kind, loop))
    streaming = peer.engine(target)
    if variant == "planted":
        with peer.planted():
            spec = peer.generate(streaming, drafter, prompt, max_tokens, loop, **options)
    else:
        spec = peer.generate(streaming, drafter, prompt, max_tokens, loop, **options)
    plain = peer.plain(peer.engine(target), prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"{loop} ({call})")


@pytest.mark.peer_property(1)
@settings(max_examples=3)
@given(data=st.data())
def test_the_documented_lossy_fast_mode_reports_each_deviation(data):
    """`accept_top_k > 1` is documented lossy ("FAST MODE ... trading exactness"; `stats.deviation_rate` "reports
    the measured lossiness"): judged by its docs, a deviation from plain decoding is no finding, but each run that
    deviates must count accepted off-argmax drafts (`SpecStats.accepted_offpath`)."""
    from nunspark.generate import SpecStats

    target, drafter, options, prompt, max_tokens, call = data.draw(cases("attention", "linear"))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    top_k = data.draw(st.sampled_from([vocab, 2, 3]), label="accept_top_k")  # vocab: every draft accepted
    stats = SpecStats()
    spec = peer.generate(peer.engine(target), drafter, prompt, max_tokens, "linear", accept_top_k=top_k, stats=stats,
                         **options)  # fmt: skip
    plain = peer.plain(peer.engine(target), prompt, max_tokens)
    note(f"accept_top_k={top_k}: {spec} vs plain {plain}; accepted_offpath {stats.accepted_offpath}")
    if spec != plain:
        assert stats.accepted_offpath > 0, (
            f"accept_top_k={top_k}: output deviates ({first_difference(spec, plain)}) but no off-argmax acceptance "
            f"was counted\n  {call}"
        )


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", ["own", "planted"])
@settings(max_examples=4)
@given(data=st.data())
def test_the_tree_rule_emits_exactly_the_target_law_for_children_drawn_from_q(variant, data):
    """`sample_accepted_path` (SpecInfer multi-candidate rejection) on a one-level tree whose children are i.i.d.
    draws from the draft's tempered q, as `build_draft_tree` draws them: the emitted token's exact law (each tuple
    of children, each coin's acceptance probability read from the rule's own ``min(1, ratio)``, the correction's
    law) is the target's tempered p."""
    vocab = 4
    children = data.draw(st.integers(1, 3), label="children")
    temp = data.draw(st.sampled_from([1.0, 0.7]), label="temperature")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1), label="rows seed"))
    p_logits = data.draw(st.sampled_from([0.5, 2.0, 4.0]), label="logit scale") * rng.normal(size=vocab)
    q_logits = p_logits + data.draw(st.sampled_from([0.3, 2.0]), label="draft noise") * rng.normal(size=vocab)
    if variant == "planted":
        with peer.planted_rule():
            law = peer.rule_law(p_logits, q_logits, children, temp)
    else:
        law = peer.rule_law(p_logits, q_logits, children, temp)
    want = tempered(p_logits, temp)
    tv = 0.5 * float(np.abs(law - want).sum())
    assert tv <= EXACT_LAW, f"{children} children, T={temp}: law {law.round(5)} vs p {want.round(5)}, TV {tv:.3g}"


@pytest.mark.peer_property(3, 4)
@pytest.mark.parametrize("what", ["batch", "sampling options"])
def test_what_the_speculative_loops_do_not_offer(what):
    pytest.skip(
        "not applicable: both speculative loops serve one sequence (generate_batch is plain decoding) and take "
        "no sampling option beyond the tree loop's temperature (judged through its rule)"
    )


@pytest.mark.peer_property(6)
def test_a_served_request_s_temperature_reaches_the_speculative_loop():
    """With a draft model loaded, nunspark's server (`server.stream_chat_completion`, called by `_events` with the
    request's temperature) must hand the temperature to the speculative loop or refuse it."""
    from nunspark import generate

    kwargs = peer.served_speculative_call(0.8)
    handed = {k: v for k, v in kwargs.items() if k in ("temp", "temperature")}
    accepted = sorted(inspect.signature(generate.speculative_generate).parameters)
    assert handed.get("temp", handed.get("temperature")) == 0.8, (
        f"a request at temperature 0.8 served with a draft model: speculative_generate was called with "
        f"{sorted(kwargs)} (it takes {accepted}: greedy only); the temperature is dropped without an error"
    )


@pytest.mark.peer_property(1, 6)
@pytest.mark.parametrize("loop", peer.LOOPS)
@settings(max_examples=3)
@given(data=st.data())
def test_an_end_of_sequence_id_ends_speculative_decoding_as_plain_decoding_and_the_tally_counts_it(loop, data):
    """`eos_id` (drawn from plain decoding's tokens so that it occurs, drafted or as a bonus) and a `SpecStats`
    tally: the loop emits plain greedy decoding up to and including the first `eos_id`, nothing after, and the
    tally's `tokens_emitted` is the number of tokens it yielded."""
    from nunspark.generate import SpecStats

    target, drafter, options, prompt, max_tokens, call = data.draw(cases("attention", loop))
    plain = peer.plain(peer.engine(target), prompt, max_tokens)
    eos = data.draw(st.sampled_from(plain), label="eos_id")
    stats = SpecStats()
    spec = peer.generate(peer.engine(target), drafter, prompt, max_tokens, loop, stats=stats, eos_id=eos, **options)
    want = plain[: plain.index(eos) + 1]
    assert spec == want, f"eos_id {eos}: {spec}, plain up to it {want}: {first_difference(spec, want)}\n  {call}"
    assert stats.tokens_emitted == len(spec), f"tally {stats.tokens_emitted} tokens, yielded {len(spec)}: {call}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("loop", peer.LOOPS)
@settings(max_examples=2)
@given(data=st.data())
def test_with_its_default_prefetch_speculative_decoding_still_emits_plain_greedy_decoding(loop, data):
    """nunspark prefetches the next layers' weights and prefix KV while a layer runs (its default; the other
    properties run without): greedy linear and tree decoding with it on emit plain greedy decoding."""
    target, drafter, options, prompt, max_tokens, call = data.draw(cases("attention", loop))
    spec = peer.generate(
        peer.engine(target, prefetch=True), drafter, prompt, max_tokens, loop, prefetch=True, **options
    )
    plain = peer.plain(peer.engine(target), prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda t: peer.conditional(target, t), prompt, f"prefetch on ({call})")


@pytest.mark.peer_law
@pytest.mark.peer_property(2)
@settings(max_examples=1)
@given(data=st.data())
def test_the_tree_loop_s_first_sampled_tokens_follow_the_target_s_law(data):
    """Temperature > 0, the tree loop end to end (children drawn i.i.d. from the drafter's tempered law, SpecInfer
    acceptance over the tree: the rule judged exactly above, here the loop around it): its first two tokens
    follow the target's exact tempered joint law, enumerated in float64 from uncached passes, under the
    statistical policy (chi-square at TV 0.2, power 0.99; V = 4)."""
    from ncm_verify.harness import strategies

    vocab, weights = 4, data.draw(st.integers(0, 2**16), label="weights seed")
    target, drafter = peer.make_target("attention", weights, vocab), peer.make_drafter(weights + 1, vocab)
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=6), label="prompt")
    shape = data.draw(st.sampled_from(peer.SHAPES), label="tree shape")
    temperature = data.draw(st.sampled_from([1.5, 1.0]), label="temp")
    seed = data.draw(strategies.seeds, label="mx.random.seed")
    law = first_tokens_law(lambda t: tempered(peer.conditional(target, t), temperature), prompt, 2)
    streaming = peer.engine(target)

    def decode() -> list[int]:
        return peer.generate(streaming, drafter, prompt, 2, "tree", shape=shape, temp=temperature)

    call = (
        f"mx.random.seed({seed}); generate(engine(make_target('attention', {weights}, 4)), make_drafter("
        f"{weights + 1}, 4), {prompt}, 2, 'tree', shape={shape}, temp={temperature})"
    )
    assert_first_tokens_follow_the_law(law, decode, vocab, seed=seed, call=call)


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("bits", [4, 8])
@settings(max_examples=2)
@given(data=st.data())
def test_with_quantized_kv_greedy_speculative_decoding_emits_quantized_plain_decoding(bits, data):
    """`kv_quant` (nunspark's `KVQuant`: KV entries quantized, groups of 32): its linear loop commits the accepted
    rows "bit-identically to having fed the accepted tokens directly" (`commit_verified`), so greedy speculative
    decoding emits its plain `generate` with the same quantization, token for token. (Its tree loop takes no
    `kv_quant`.) A target with heads 32 wide: MLX cannot quantize the tiny targets' heads of 16."""
    from nunspark.archspec import KVQuant

    vocab = data.draw(st.sampled_from([4, 6]), label="vocab")
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=7), label="prompt")
    drafts = data.draw(st.integers(1, 4), label="num_draft_tokens")
    target, drafter = peer.make_quantizable_target(seed, vocab), peer.make_drafter(seed + 1, vocab)
    quant = KVQuant(bits, 32)
    spec = peer.generate(peer.engine(target), drafter, prompt, 12, draft_tokens=drafts, kv_quant=quant)
    plain = peer.plain(peer.engine(target), prompt, 12, kv_quant=quant)
    assert spec == plain, (
        f"KVQuant({bits}, 32): speculative {spec} != plain {plain}: {first_difference(spec, plain)}\n  target = "
        f"make_quantizable_target({seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); generate(engine("
        f"target), drafter, {prompt}, 12, draft_tokens={drafts}, kv_quant=KVQuant({bits}, 32))"
    )
