"""yunshu 0.1.5 judged on its own `SpeculativeDecoder` (`peers.yunshu_spec`): loop, rule, batch verify, rollback.

make install-peers PEER=yunshu && make verify-peers PEERS=yunshu     (needs a Python >= 3.13 on the machine)
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st
from peer_checks import (
    Decoding,
    assert_cache_attends_as_uncached,
    assert_greedy_equals_plain,
    first_difference,
    run_variant,
    tempered,
)

from ncm_verify.peers import yunshu_spec as peer
from ncm_verify.peers.mlx_tiny import WINDOW
from ncm_verify.tolerances import RECURRENT_LOGPROBS, TOLERANCES

VARIANTS = ("own", "planted")
MORE = settings(max_examples=6)
"""A planted rollback shows only after a round rejects a draft with room left (most rounds here): 6 examples."""
EXACT_LAW = 1e-5
"""TV admitted between the rule's law and p: both come from float32 rows (the model's and the rule's ratios)."""


@st.composite
def cases(draw, kind: str = "attention"):
    vocab = draw(st.sampled_from([4, 6]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    shortest = WINDOW if kind == "sliding-window" else 1  # the ring is full from the first round
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=shortest, max_size=6), label="prompt")
    max_tokens = draw(st.integers(6, 16), label="max_tokens")
    draft_length = draw(st.integers(1, 4), label="draft_length")
    target, drafter = peer.make_target(kind, seed, vocab), peer.make_drafter(seed + 1, vocab)
    call = (
        f"target = make_target({kind!r}, {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); "
        f"generate(target, drafter, {prompt}, {max_tokens}, {draft_length})"
    )
    note(f"from ncm_verify.peers.yunshu_spec import *; {call}")
    return Decoding(target, drafter, draft_length, prompt, max_tokens, call)


@st.composite
def batch_requests(draw, vocab: int):
    """Two requests for batch verification: weights seed, contexts, drafts, target, drafter, and each draft's
    log-probability under the draft model (what `generate` hands the rule)."""
    seed = draw(st.integers(0, 2**16), label="weights seed")
    contexts = [draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="context") for _ in "ab"]
    drafts = [draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=4), label="drafts") for _ in "ab"]
    target, drafter = peer.make_target("attention", seed, vocab), peer.make_drafter(seed + 1, vocab)
    logprobs = [
        [float(peer.conditional(drafter, c + d[:i])[t]) for i, t in enumerate(d)] for c, d in zip(contexts, drafts)
    ]
    return seed, contexts, drafts, target, drafter, logprobs


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@MORE
@given(data=st.data())
def test_greedy_speculative_decoding_emits_plain_greedy_decoding(kind, variant, data):
    """Temperature 0: `SpeculativeDecoder.generate` emits mlx-lm's plain greedy tokens, each the argmax of one
    uncached forward pass, on attention, hybrid (GatedDeltaNet) and sliding-window (a ring of 4) targets."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases(kind))
    mx.random.seed(0)  # the draft model samples its drafts at its draft_temperature (1.0) from MLX's generator
    spec = run_variant(peer, variant, target, drafter, prompt, max_tokens, draft_length)
    plain = peer.plain(target, prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"greedy ({call})")


@pytest.mark.peer_property(1)
@settings(max_examples=4)
@given(data=st.data())
def test_greedy_speculative_decoding_stops_at_the_end_of_sequence_token_as_plain_decoding(data):
    """With a tokenizer's `eos_token_id`, greedy `generate` emits plain greedy decoding up to and including the
    first end-of-sequence token and nothing after it (the token drawn from the plain output, so that it occurs)."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases())
    plain = peer.plain(target, prompt, max_tokens)
    eos = data.draw(st.sampled_from(plain), label="eos token")
    want = plain[: plain.index(eos) + 1]
    mx.random.seed(0)
    spec = [
        int(t)
        for t in peer.decoder(target, drafter, draft_length, eos=eos).generate(mx.array([prompt]), max_tokens, 0.0)
    ]
    assert spec == want, (
        f"EOS {eos}: speculative {spec}, plain up to EOS {want}: {first_difference(spec, want)}\n  {call}"
    )


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("draft_temperature", [1.0, 0.0], ids=["default draft", "engine's greedy draft"])
@settings(max_examples=3)
@given(data=st.data())
def test_the_rule_emits_exactly_the_target_law(draft_temperature, variant, data):
    """One `verify_draft` round, its draft x drawn as `generate` draws it (the draft model at `draft_temperature`:
    1.0 by default, 0.0 in the batched engine's external drafter) and handed with its log-probability: the emitted
    token's exact law (per x, the acceptance ratio the rule computes and the law its correction sampler is
    handed, read call by call) is the target's tempered conditional."""
    vocab = data.draw(st.sampled_from([4, 6]), label="vocab")
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    context = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="context")
    temperature = data.draw(st.sampled_from([1.0, 0.7]), label="temperature")
    target, drafter = peer.make_target("attention", seed, vocab), peer.make_drafter(seed + 1, vocab)
    spec = peer.decoder(target, drafter, draft_length=1, draft_temperature=draft_temperature)
    draft_logprobs = np.array(peer.conditional(drafter, context), dtype=np.float64)
    draft_law = (
        tempered(draft_logprobs, draft_temperature) if draft_temperature else np.eye(vocab)[draft_logprobs.argmax()]
    )
    if variant == "planted":
        with peer.planted():
            law = peer.round_law(spec, target, context, draft_logprobs, draft_law, temperature)
    else:
        law = peer.round_law(spec, target, context, draft_logprobs, draft_law, temperature)
    want = tempered(peer.conditional(target, context), temperature)
    tv = 0.5 * float(np.abs(law - want).sum())
    worst = np.argsort(-np.abs(law - want))[:3]
    assert tv <= EXACT_LAW, (
        f"the round's law differs from the target's (T={temperature}) by TV {tv:.3g}; tokens {worst.tolist()}: "
        f"law {law[worst].round(4).tolist()} vs p {want[worst].round(4).tolist()}\n  call: target = make_target("
        f"'attention', {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); context {context}"
    )


@pytest.mark.peer_property(3)
@settings(max_examples=6)
@given(data=st.data())
def test_batch_verification_gives_each_request_what_verifying_it_alone_gives(data):
    """Temperature 0: `batch_verify_drafts` over two requests (each its own cache) returns, per request, what
    `verify_draft` returns for it alone: accepted drafts and bonus token (drafts drawn from the draft model)."""
    vocab = data.draw(st.sampled_from([4, 6]), label="vocab")
    seed, contexts, drafts, target, drafter, logprobs = data.draw(batch_requests(vocab))
    spec = peer.decoder(target, drafter)
    batched, alone = peer.verify_rows(spec, target, contexts, drafts, logprobs, 0.0, rng_seed=seed)
    for row, (b, a) in enumerate(zip(batched, alone)):
        assert (b.accepted_ids, b.bonus_token_id) == (a.accepted_ids, a.bonus_token_id), (
            f"request {row} (context {contexts[row]}, drafts {drafts[row]}): batch verify accepted {b.accepted_ids} "
            f"+ bonus {b.bonus_token_id}, alone {a.accepted_ids} + bonus {a.bonus_token_id}\n  call: target = "
            f"make_target('attention', {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab})"
        )


@pytest.mark.peer_property(4)
@settings(max_examples=3)
@given(data=st.data())
def test_logit_bias_acts_on_the_speculative_path_as_on_plain_decoding(data):
    """Temperature 0 with a `logit_bias` (`generate`'s own parameter, served from requests): the speculative tokens
    equal plain greedy decoding with the same bias (mlx-lm's `make_logits_processors`)."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases())
    vocab = int(peer.conditional(target, prompt).shape[-1])
    bias = {data.draw(st.integers(0, vocab - 1), label="biased token"): data.draw(st.sampled_from([3.0, 10.0]))}
    mx.random.seed(0)
    spec = peer.generate(target, drafter, prompt, max_tokens, draft_length, logit_bias=bias)
    plain = peer.plain(target, prompt, max_tokens, logit_bias=bias)
    assert spec == plain, f"logit_bias {bias}: speculative {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@settings(max_examples=4)
@given(data=st.data())
def test_at_every_round_the_target_cache_attends_as_the_tokens_it_holds_uncached(kind, data):
    """At each round's entry (`verify_draft`), after the previous round's rollback, a copy of the target cache fed
    the next held token gives the log-probabilities one uncached pass over those tokens gives (float32 tolerance;
    `tolerances.RECURRENT_LOGPROBS` on the hybrid target)."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases(kind))
    spec = peer.decoder(target, drafter, draft_length)
    rounds = peer.caches_at_rounds(spec)  # copied at each round's entry
    mx.random.seed(0)
    tokens = prompt + [int(t) for t in spec.generate(mx.array([prompt]), max_tokens, 0.0)]
    note(f"emitted {tokens[len(prompt) :]}; {len(rounds)} rounds")
    tolerance = RECURRENT_LOGPROBS if kind == "hybrid" else TOLERANCES[mx.float32]
    for number, (held, cache) in enumerate(rounds):
        if held < len(tokens):
            assert_cache_attends_as_uncached(target, cache, tokens, held, tolerance, f"round {number} ({call})")


@pytest.mark.peer_property(6)
@settings(max_examples=2)
@given(data=st.data())
def test_a_seeded_request_decodes_the_same_tokens_each_time(data):
    """yunshu's engine serves a request's `seed` by ``mx.random.seed(seed)`` before `decoder.generate`
    (`engine_speculative._run_spec`); at temperature 1 such runs must emit the same tokens (four runs of 16 tokens,
    so that different generators rarely agree by chance)."""
    target, drafter, draft_length, prompt, _, call = data.draw(cases())
    seed = data.draw(st.integers(0, 2**16), label="request seed")
    runs = []
    for _ in range(4):
        spec = peer.decoder(target, drafter, draft_length, rng_seed=None)  # the generator yunshu gives it
        mx.random.seed(seed)
        runs.append([int(t) for t in spec.generate(mx.array([prompt]), 16, 1.0)])
    differing = next((run for run in runs if run != runs[0]), runs[0])
    assert differing == runs[0], (
        f"seed {seed}: {runs[0]}, then {differing}: {first_difference(runs[0], differing)}\n  {call}"
    )


@pytest.mark.peer_property(4)
@pytest.mark.parametrize("response_format", ["choice", "json schema"])
@settings(max_examples=4)
@given(data=st.data())
def test_grammar_constrained_speculative_decoding_emits_constrained_plain_decoding(response_format, data):
    """Temperature 0 with a response format (the constraint yunshu's engine builds and wires into the decoder: a
    choice list, a JSON schema): every emitted token is one the grammar allows there, and the tokens equal plain
    constrained greedy decoding (each the argmax over the allowed tokens of one uncached pass)."""
    vocab = len(peer.RESPONSE_FORMATS[response_format][1]) + 1
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
    draft_length = data.draw(st.integers(1, 4), label="draft_length")
    target, drafter = peer.make_target("attention", seed, vocab), peer.make_drafter(seed + 1, vocab)
    mx.random.seed(0)
    spec = peer.constrained_decoder(target, drafter, draft_length, response_format)
    emitted = [int(t) for t in spec.generate(mx.array([prompt]), 10, 0.0)]
    plain = peer.plain_constrained(target, prompt, 10, response_format)
    call = (
        f"target = make_target('attention', {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); "
        f"constrained_decoder(target, drafter, {draft_length}, {response_format!r}).generate(mx.array([{prompt}]), "
        "10, 0.0)"
    )
    violation = peer.grammar_violation(emitted, response_format)
    assert violation is None, f"{response_format}: speculative {emitted} leaves the grammar: {violation}\n  {call}"
    assert emitted == plain, f"constrained {emitted} != plain {plain}: {first_difference(emitted, plain)}\n  {call}"


@pytest.mark.peer_property(4)
@settings(max_examples=4)
@given(data=st.data())
def test_a_grammar_that_allows_every_string_leaves_greedy_decoding_unchanged(data):
    """Temperature 0 with a regular-expression response format that allows every token everywhere ("[a-e]*"):
    the constraint's bookkeeping (checkpoint before drafting, rollback after a rejection, advance by the accepted
    tokens, masks on drafts and bonus) must not change greedy decoding: plain greedy tokens up to the first EOS. A
    first token that is the EOS is finding S13's and left out."""
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    prompt = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=5), label="prompt")
    draft_length = data.draw(st.integers(1, 4), label="draft_length")
    target, drafter = peer.make_target("attention", seed, 6), peer.make_drafter(seed + 1, 6)
    plain = peer.plain(target, prompt, 12)
    assume(plain[0] != 5)
    want = plain[: plain.index(5) + 1] if 5 in plain else plain
    mx.random.seed(0)
    spec = peer.constrained_decoder(target, drafter, draft_length, "any string")
    emitted = [int(t) for t in spec.generate(mx.array([prompt]), 12, 0.0)]
    assert emitted == want, (
        f"'[a-e]*': {emitted} != plain {want}: {first_difference(emitted, want)}\n  target = make_target("
        f"'attention', {seed}, 6); drafter = make_drafter({seed + 1}, 6); constrained_decoder(target, drafter, "
        f"{draft_length}, 'any string').generate(mx.array([{prompt}]), 12, 0.0)"
    )


@pytest.mark.peer_property(6)
@settings(max_examples=3)
@given(data=st.data(), queries=st.integers(1, 6))
def test_a_cancelled_request_returns_a_prefix_of_what_it_would_have_decoded(data, queries):
    """`generate`'s `cancel_event` turned set at its n-th query (between rounds, inside the draft loop or before
    verification): greedy `generate` returns at once a prefix of plain greedy decoding, never a token past it."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases())
    plain = peer.plain(target, prompt, max_tokens)
    mx.random.seed(0)
    cancel = peer.CancelAfter(queries)
    spec = [
        int(t)
        for t in peer.decoder(target, drafter, draft_length).generate(
            mx.array([prompt]), max_tokens, 0.0, cancel_event=cancel
        )
    ]
    assert spec == plain[: len(spec)], (
        f"cancelled at query {queries}: {spec} is not a prefix of plain {plain}: {first_difference(spec, plain)}"
        f"\n  {call}"
    )
    assert len(spec) < max_tokens, f"cancelled at query {queries} yet {len(spec)} tokens (all): {call}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("shape", ["list", "none"])
@settings(max_examples=2)
@given(data=st.data())
def test_an_end_of_sequence_list_stops_greedy_decoding_as_plain_decoding(shape, data):
    """A tokenizer whose `eos_token_id` is a list (as several checkpoints ship), or None: greedy `generate` emits
    plain greedy decoding up to and including the first token of the list it reaches, whether drafted or not (all
    of it with None)."""
    target, drafter, draft_length, prompt, max_tokens, call = data.draw(cases())
    plain = peer.plain(target, prompt, max_tokens)
    later = [t for t in plain[1:] if t != plain[0]]  # a first-token EOS is finding S13's
    first = data.draw(st.sampled_from(later), label="eos token") if later else -1
    eos = [first, 1000] if shape == "list" else None  # 1000 never occurs
    first = first if eos else -1
    want = plain[: plain.index(first) + 1] if first in plain else plain
    mx.random.seed(0)
    spec = peer.decoder(target, drafter, draft_length)
    spec.tokenizer = peer.EosTokenizer(eos)
    emitted = [int(t) for t in spec.generate(mx.array([prompt]), max_tokens, 0.0)]
    assert emitted == want, f"EOS {eos}: {emitted}, plain up to EOS {want}: {first_difference(emitted, want)}\n {call}"


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("draft_kind", ["hybrid", "sliding-window"])
@settings(max_examples=3)
@given(data=st.data())
def test_at_every_round_the_draft_cache_attends_as_the_tokens_it_holds_uncached(draft_kind, data):
    """A draft model with recurrent (GatedDeltaNet `ArraysCache`) or sliding-window (`RotatingKVCache`) layers:
    at each round's start, after the previous round's snapshot restore and re-feed, a copy of the draft cache fed
    the next committed token gives one uncached pass's log-probabilities (the draft's output is not otherwise
    visible: greedy target verification hides a wrong draft)."""
    target, _, draft_length, prompt, max_tokens, call = data.draw(cases())
    drafter_seed = data.draw(st.integers(0, 2**16), label="drafter seed")
    vocab = int(peer.conditional(target, prompt).shape[-1])
    drafter = peer.make_target(draft_kind, drafter_seed, vocab)
    spec = peer.decoder(target, drafter, draft_length)
    rounds = peer.draft_caches_at_rounds(spec, drafter)
    mx.random.seed(0)
    tokens = prompt + [int(t) for t in spec.generate(mx.array([prompt]), max_tokens, 0.0)]
    assert tokens[len(prompt) :] == peer.plain(target, prompt, max_tokens), f"greedy output left plain: {call}"
    tolerance = RECURRENT_LOGPROBS if draft_kind == "hybrid" else TOLERANCES[mx.float32]
    label = f"drafter make_target({draft_kind!r}, {drafter_seed}, {vocab}); {call}"
    for number, (held, cache) in enumerate(rounds):
        assert_cache_attends_as_uncached(drafter, cache, tokens, held, tolerance, f"round {number}: {label}")


@pytest.mark.peer_property(3)
@pytest.mark.parametrize("response_format", [None, "any string", "json schema"])
@settings(max_examples=5)
@given(data=st.data())
def test_sampled_batch_verification_gives_each_request_the_coins_and_law_of_verifying_it_alone(response_format, data):
    """Temperature 0.8: `batch_verify_drafts` over two requests with the coins `verify_draft` gets alone accepts
    the same drafts per request and hands its correction sampler the same law (softmax of the row, recorded);
    also under a response format (a regular expression allowing every string, a JSON schema), its constraint fresh
    for the batch and for each request alone: each request's bonus is masked by its own grammar state."""
    vocab = (
        len(peer.RESPONSE_FORMATS[response_format][1]) + 1
        if response_format
        else data.draw(st.sampled_from([4, 6]), label="vocab")
    )
    seed, contexts, drafts, target, drafter, logprobs = data.draw(batch_requests(vocab))
    spec = peer.decoder(target, drafter)
    batched, alone = peer.verify_rows(
        spec, target, contexts, drafts, logprobs, 0.8, rng_seed=seed, record=True, response_format=response_format
    )
    call = (
        f"target = make_target('attention', {seed}, {vocab}); drafter = make_drafter({seed + 1}, {vocab}); "
        f"response format {response_format}"
    )
    for row, ((b, b_law), (a, a_law)) in enumerate(zip(batched, alone)):
        assert b.accepted_ids == a.accepted_ids, (
            f"request {row} (context {contexts[row]}, drafts {drafts[row]}): batch accepted {b.accepted_ids}, "
            f"alone {a.accepted_ids} (same coins)\n  call: {call}"
        )
        assert np.allclose(b_law, a_law, atol=EXACT_LAW), (
            f"request {row}: batch correction law {b_law.round(4).tolist()}, alone {a_law.round(4).tolist()}\n  "
            f"call: {call}"
        )


@pytest.mark.peer_property(6)
def test_verifying_no_drafts_returns_no_tokens_and_leaves_the_cache_alone():
    """`verify_draft` with no drafts, and `batch_verify_drafts` with no requests or a request without drafts:
    empty results (no bonus: -1) and the request's cache untouched (no forward pass, no trim)."""
    from yunshu_engine.speculative_decoder import DraftResult

    target, drafter = peer.make_target("attention", 3, 6), peer.make_drafter(4, 6)
    spec, empty = peer.decoder(target, drafter), DraftResult(token_ids=[], logprobs=[])
    cache = peer.prefilled(target, [1, 2, 3])
    alone = spec.verify_draft(empty, mx.array([[3]]), cache, 0.0)
    batched = spec.batch_verify_drafts([(empty, mx.array([[3]]), cache)], 0.0)
    assert (alone.accepted_ids, alone.bonus_token_id) == ([], -1), f"verify_draft with no drafts: {alone}"
    assert [(r.accepted_ids, r.bonus_token_id) for r in batched] == [([], -1)], f"batch, no drafts: {batched}"
    assert spec.batch_verify_drafts([], 0.0) == [], "batch_verify_drafts([]) is not []"
    assert [c.offset for c in cache] == [3] * len(cache), (
        f"offsets after verifying nothing: {[c.offset for c in cache]}"
    )
