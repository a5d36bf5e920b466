"""mlx-flash 0.9.2 judged on its DFlash and EAGLE-3 engines (`peers.mlx_flash_spec`).

make install-peers PEER=mlx-flash && make verify-peers PEERS=mlx-flash
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import Decoding, assert_greedy_equals_plain, tempered

from ncm_verify.peers import mlx_flash_spec as peer

EXACT_LAW = 1e-6
"""TV admitted between a law handed to MLX's sampler and the target's: float32 rows."""


@st.composite
def cases(draw, kind: str, temperature: float = 0.0):
    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    max_tokens = draw(st.integers(2, 14), label="max_tokens")
    drafts = draw(st.integers(1, 5), label="draft tokens")
    target = peer.make_target(seed, vocab)
    engine = peer.make_engine(kind, target, seed + 1, drafts, temperature)
    call = (
        f"target = make_target({seed}, {vocab}); engine = make_engine({kind!r}, target, {seed + 1}, {drafts}, "
        f"{temperature}); generate(engine, {prompt}, {max_tokens})"
    )
    note(f"from ncm_verify.peers.mlx_flash_spec import *; {call}")
    return Decoding(target, engine, prompt, max_tokens, call)


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", ["own", "planted"])
@pytest.mark.parametrize("kind", peer.ENGINES)
@settings(max_examples=5)
@given(data=st.data())
def test_greedy_speculative_decoding_emits_plain_greedy_decoding(kind, variant, data):
    """Temperature 0: the engine's first max_tokens tokens are its own plain decoding's (`DFlashEngine` without a
    drafter), each the argmax of one uncached forward pass. (How many it returns is property 6.)"""
    target, engine, prompt, max_tokens, call = data.draw(cases(kind))
    if variant == "planted":
        with peer.planted():
            spec = peer.generate(engine, prompt, max_tokens)[:max_tokens]
    else:
        spec = peer.generate(engine, prompt, max_tokens)[:max_tokens]
    plain = peer.plain(target, prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"{kind} ({call})")


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("kind", peer.ENGINES)
@settings(max_examples=3)
@given(data=st.data())
def test_at_a_rejected_draft_the_engine_draws_from_the_target_s_tempered_conditional(kind, data):
    """Temperature > 0 (`DFlashConfig.temperature`, `EAGLE3Config.temperature`): the token the verify pass emits at
    a draft the target rejects is a draw from the target's tempered conditional there. Read by recording what MLX's
    `random.categorical` is handed (it draws from the softmax of its argument) in one verify call."""
    temperature = data.draw(st.sampled_from([1.0, 0.7]), label="temperature")
    target, engine, prompt, _, call = data.draw(cases(kind, temperature))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    want = tempered(peer.conditional(target, prompt), temperature)
    drafts = mx.array([int(np.argmin(want))] * 2)  # the least likely token: a draw will mostly reject it
    verify = engine.verify_tokens if kind == "dflash" else engine.verify
    ids = mx.array(prompt) if kind == "dflash" else mx.array([prompt])
    (accepted, _), laws = peer.sampled_laws(lambda: verify(ids, drafts if kind == "dflash" else drafts[None]))
    rows = [law.reshape(-1, vocab)[0] for law in laws]
    note(f"verify emitted {np.array(accepted).tolist()}; sampler handed {len(rows)} calls")
    assert rows, f"{kind}: at T={temperature} verify drew no target token: it emits the argmax\n  {call}"
    tv = 0.5 * float(np.abs(rows[0] - want).sum())
    assert tv <= EXACT_LAW, (
        f"{kind}: the target token at the first draft is drawn from {rows[0].round(3).tolist()}, the target's "
        f"tempered conditional is {want.round(3).tolist()} (TV {tv:.3g}, T={temperature})\n  {call}"
    )


@pytest.mark.peer_property(6)
@pytest.mark.parametrize("kind", peer.ENGINES)
@settings(max_examples=5)
@given(data=st.data())
def test_the_engine_returns_max_tokens_tokens(kind, data):
    """`generate(prompt, max_tokens)` returns max_tokens new tokens (no tokenizer, so no EOS), as its plain
    decoding does, whatever the draft length."""
    target, engine, prompt, max_tokens, call = data.draw(cases(kind))
    spec = peer.generate(engine, prompt, max_tokens)
    assert len(peer.plain(target, prompt, max_tokens)) == max_tokens
    assert len(spec) == max_tokens, f"{kind}: max_tokens={max_tokens}, {len(spec)} returned: {spec}\n  {call}"


ACCEPTING = {"dflash": (5, 6, 4, [1, 2, 3], 10), "eagle3": (0, 4, 3, [0, 1], 3)}
"""(weights seed, vocab, draft tokens, prompt, max_tokens) of a case whose last round accepts drafts."""


@pytest.mark.peer_property(6)
@pytest.mark.parametrize("kind", peer.ENGINES)
def test_the_engine_returns_max_tokens_tokens_when_a_block_is_accepted_near_the_end(kind):
    """One case of the property above whose last round accepts drafts (the drawn cases rarely accept one: the
    drafters are random): `generate(prompt, max_tokens)` must still return max_tokens new tokens."""
    seed, vocab, drafts, prompt, max_tokens = ACCEPTING[kind]
    target = peer.make_target(seed, vocab)
    spec = peer.generate(peer.make_engine(kind, target, seed + 1, drafts), prompt, max_tokens)
    plain = peer.plain(target, prompt, max_tokens)
    assert len(spec) == max_tokens, f"{kind}: max_tokens={max_tokens}, {len(spec)} returned: {spec} (plain {plain})"


@pytest.mark.peer_property(3, 4, 5)
@pytest.mark.parametrize("what", ["batch", "sampling options", "rollback"])
def test_what_the_engines_do_not_have(what):
    pytest.skip(
        "not applicable: both engines decode one sequence, take no sampling option beyond temperature, and keep no "
        "cache: each round recomputes the whole sequence uncached, so there is nothing to roll back"
    )


@pytest.mark.peer_property(6)
@pytest.mark.parametrize("kind", peer.ENGINES)
@settings(max_examples=3)
@given(data=st.data())
def test_the_callback_is_handed_each_round_s_tokens_and_a_batch_shaped_prompt_decodes_alike(kind, data):
    """`generate`'s `callback`, one call per round: the token lists it is handed are, in order, exactly the tokens
    returned; EAGLE-3 given the prompt as a batch of one (``[1, L]``, which it reshapes to) returns the same."""
    target, engine, prompt, max_tokens, call = data.draw(cases(kind))
    tokens, rounds = peer.generate_with(engine, prompt, max_tokens)
    assert [t for r in rounds for t in r] == tokens, f"{kind}: callback rounds {rounds}, returned {tokens}\n  {call}"
    if kind == "eagle3":
        batched, _ = peer.generate_with(engine, mx.array([prompt]), max_tokens)
        assert batched == tokens, f"prompt [1, L]: {batched}, 1-D: {tokens}\n  {call}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("kind", peer.ENGINES)
@settings(max_examples=8)
@given(data=st.data())
def test_an_end_of_sequence_token_ends_decoding_as_plain_decoding(kind, data):
    """A tokenizer whose `eos_token_id` is drawn from plain decoding's tokens (so that it occurs): the engine
    returns plain greedy decoding up to and including the first EOS, nothing after it."""
    target, engine, prompt, max_tokens, call = data.draw(cases(kind))
    plain = peer.plain(target, prompt, max_tokens)
    eos = data.draw(st.sampled_from(plain), label="eos_token_id")
    tokens, rounds = peer.generate_with(engine, prompt, max_tokens, eos=eos)
    want = plain[: plain.index(eos) + 1]
    assert tokens == want, f"{kind}, EOS {eos}: {tokens} (rounds {rounds}), plain up to EOS {want}\n  {call}"
