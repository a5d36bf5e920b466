"""mlx-vlm 0.7.10's speculative decoding judged on its own `generate_step` and drafters (`peers.mlx_vlm_spec`).

make install-peers PEER=mlx-vlm && make verify-peers PEERS=mlx-vlm
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import example, given, note, settings
from hypothesis import strategies as st
from peer_checks import (
    Decoding,
    RecordingSampler,
    assert_each_token_is_a_sampler_output_on_its_conditional,
    assert_first_tokens_follow_the_law,
    first_difference,
    first_tokens_law,
    run_variant,
    tempered,
)

from ncm_verify.harness import strategies
from ncm_verify.peers import mlx_vlm_spec as peer
from ncm_verify.tolerances import RECURRENT_LOGPROBS, TOLERANCES

CASES = peer.CASES
VARIANTS = ("own", "planted")


@st.composite
def decodings(draw, target_kind: str, draft_kind: str, min_tokens: int = 2, vocabs=(4, 6, peer.VOCAB)):
    """A target, its drafter, a prompt and a budget: small vocabularies so that drafts are accepted as often as not."""
    vocab = draw(st.sampled_from(vocabs), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    max_tokens = draw(st.integers(min_tokens, 20), label="max_tokens")
    block = draw(st.integers(2, 5), label="block_size")
    target = peer.make_target(target_kind, seed, vocab)
    drafter = peer.make_drafter(draft_kind, target, seed + 1, block_size=block)
    call = (
        f"target = make_target({target_kind!r}, {seed}, {vocab}); "
        f"drafter = make_drafter({draft_kind!r}, target, {seed + 1}, block_size={block}); "
        f"generate(target, {prompt}, {max_tokens}, drafter, {draft_kind!r}, ...)"
    )
    note(f"from ncm_verify.peers.mlx_vlm_spec import *; {call}")
    return Decoding(target, drafter, prompt, max_tokens)


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("target_kind, draft_kind", CASES + peer.MORE_CASES)
@given(data=st.data())
def test_greedy_speculative_decoding_emits_plain_greedy_decoding(target_kind, draft_kind, variant, data):
    """Temperature 0: the speculative loop emits generate_step's own greedy tokens, token for token, on a hybrid
    GatedDeltaNet target, an attention target and a sliding-window target whose ring wraps inside a verify pass."""
    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    plain = peer.generate(target, prompt, max_tokens, temperature=0.0)
    spec = run_variant(peer, variant, target, prompt, max_tokens, drafter, draft_kind, temperature=0.0)
    note(f"accepted per round: {drafter.accept_lens}")
    assert spec == plain, f"speculative {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(2, 6)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("target_kind, draft_kind", CASES)
@given(data=st.data())
def test_every_sampled_token_is_the_seeded_target_draw_on_the_uncached_conditional(
    target_kind, draft_kind, variant, data
):
    """Temperature > 0 with a seed: every emitted token is mlx-vlm's own positioned target draw (its rule: the
    target's draw at that position, whatever the draft) on one uncached forward pass over the prompt and the
    tokens emitted before it; so the speculative output is plain seeded decoding's, token for token. (Property 6
    too: a seed the speculative path ignored would break this.)"""
    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    temperature = data.draw(st.sampled_from([0.6, 1.0, 1.5]), label="temperature")
    top_p = data.draw(st.sampled_from([1.0, 0.9]), label="top_p")
    top_k = data.draw(st.sampled_from([0, 3]), label="top_k")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    options = dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    spec = run_variant(peer, variant, target, prompt, max_tokens, drafter, draft_kind, **options)
    note(f"options {options}; emitted {spec}; accepted per round {drafter.accept_lens}")
    for position, token in enumerate(spec):
        logprobs = peer.conditional(target, prompt + spec[:position])
        expected = peer.positioned_draw(logprobs, seed, position, temperature, top_p, top_k)
        assert token == expected, f"token {position}: emitted {token}, the target's draw there is {expected}"
    assert spec == peer.generate(target, prompt, max_tokens, **options), "plain seeded decoding differs"


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("target_kind, draft_kind", CASES + peer.MORE_CASES)
@given(data=st.data())
def test_unseeded_sampling_emits_each_token_from_a_target_call_on_its_uncached_conditional(
    target_kind, draft_kind, data
):
    """Without a seed (or with min-p) mlx-vlm samples through one RNG stream: every emitted token must be the output
    of a target-sampler call, in order, handed the target's uncached conditional of the tokens before it."""
    from mlx_vlm.sample_utils import make_sampler

    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    min_p = data.draw(st.sampled_from([0.0, 0.05]), label="min_p")
    seed = data.draw(st.integers(0, 2**31 - 1), label="mx.random.seed")
    sampler = RecordingSampler(make_sampler(temp=1.0, min_p=min_p))
    mx.random.seed(seed)
    spec = peer.generate(target, prompt, max_tokens, drafter, draft_kind, sampler=sampler)
    assert_each_token_is_a_sampler_output_on_its_conditional(
        spec, sampler.rows(), lambda tokens: peer.conditional(target, tokens), prompt
    )


LAW_CASES = [(*case, "own") for case in CASES] + [("attention", "mtp", "planted"), ("hybrid", "mtp", "planted")]
"""Every drafter case on mlx-vlm's own code; the planted walk on two MTP ones (each law test takes 10-25 s). Not on
DFlash: unseeded, its sampled walk is written inline in `_sample_dflash_target_walk`, which the planted walk
(`_speculative_walk_batch`) does not reach; DFlash's plant is caught through its seeded path (properties 1, 2)."""


@pytest.mark.peer_law
@pytest.mark.peer_property(2)
@pytest.mark.parametrize("target_kind, draft_kind, variant", LAW_CASES)
@settings(max_examples=1)
@given(data=st.data())
def test_the_first_sampled_tokens_follow_the_targets_law(target_kind, draft_kind, variant, data):
    """Temperature > 0 (one RNG stream, `make_sampler`): the first two tokens of generate_step with a drafter (the
    prefill's draw, then the first round's) follow the target's exact joint law, enumerated in float64 from
    uncached forward passes, under the statistical policy (a chi-square at TV 0.2, power 0.99; V = 4)."""
    from mlx_vlm.sample_utils import make_sampler

    target, drafter, prompt, _ = data.draw(decodings(target_kind, draft_kind, vocabs=(4,)))
    temperature = data.draw(st.sampled_from([1.5, 1.0]), label="temperature")  # flat first: drafts miss
    seed = data.draw(strategies.seeds, label="mx.random.seed")
    law = first_tokens_law(lambda tokens: tempered(peer.conditional(target, tokens), temperature), prompt, 2)
    sampler = make_sampler(temp=temperature)

    def decode() -> list[int]:
        if variant == "planted":
            with peer.planted():
                return peer.generate(target, prompt, 2, drafter, draft_kind, sampler=sampler)
        return peer.generate(target, prompt, 2, drafter, draft_kind, sampler=sampler)

    call = (
        f"mx.random.seed({seed}); generate(target, {prompt}, 2, drafter, {draft_kind!r}, make_sampler({temperature}))"
    )
    assert_first_tokens_follow_the_law(law, decode, 4, seed=seed, call=call)


@pytest.mark.peer_property(3)
@pytest.mark.parametrize("target_kind, draft_kind", CASES)
@given(data=st.data())
def test_a_batch_of_greedy_requests_gets_what_each_gets_alone(target_kind, draft_kind, data):
    """Two prompts of one length decoded together emit, row by row, what each emits alone at temperature 0."""
    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    vocab = target.config.vocab_size
    other = data.draw(st.lists(st.integers(0, vocab - 1), min_size=len(prompt), max_size=len(prompt)), label="other")
    from mlx_vlm.generate.ar import generate_step

    steps = generate_step(
        mx.array([prompt, other]),
        target,
        None,
        None,
        max_tokens=max_tokens,
        temperature=0.0,
        draft_model=drafter,
        draft_kind=draft_kind,
    )
    emitted = [[], []]
    for tokens, _ in steps:
        for row, token in enumerate(np.array(tokens).reshape(-1).tolist()[:2]):
            emitted[row].append(int(token))
    for row, alone_prompt in enumerate((prompt, other)):
        alone = peer.generate(target, alone_prompt, max_tokens, temperature=0.0)
        got = emitted[row][: len(alone)]
        assert got == alone, f"row {row}: batched {got} != alone {alone}: {first_difference(got, alone)}"


@pytest.mark.peer_property(3)
@pytest.mark.parametrize("target_kind, draft_kind", [case for case in CASES if case[0] != "hybrid"])
@given(data=st.data())
def test_requests_served_together_get_what_each_gets_alone(target_kind, draft_kind, data):
    """The server engine with a drafter (`BatchGenerator` -> `SpeculativeGenerationBatch`) decoding two seeded
    sampled requests of different lengths together emits, per request, what `generate_step` emits for it alone:
    its positioned draws are keyed by position, not by batch slot. (The hybrid target's cases: the two tests
    below, whose checks do not hang on a draw's flip.)"""
    from mlx_vlm.generate.ar import _PositionedTargetSampler

    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    longer = st.lists(st.integers(0, target.config.vocab_size - 1), min_size=len(prompt) + 2, max_size=len(prompt) + 4)
    other = data.draw(longer, label="other prompt")  # the engine left-pads the shorter row
    temperature = data.draw(st.sampled_from([0.7, 1.0]), label="temperature")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    sampler = _PositionedTargetSampler(temperature=temperature, top_p=1.0, top_k=0, seed=seed)
    served = peer.serve(target, [prompt, other], max_tokens, drafter, draft_kind, sampler=sampler)
    for row, alone_prompt in enumerate((prompt, other)):
        alone = peer.generate(target, alone_prompt, max_tokens, temperature=temperature, seed=seed)
        assert served[row] == alone, (
            f"row {row} (prompt {alone_prompt}): served {served[row]} != alone {alone}: "
            f"{first_difference(served[row], alone)}"
        )


@pytest.mark.peer_property(3)
@pytest.mark.parametrize("target_kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_the_server_engine_hands_each_row_its_exact_conditional(target_kind, data):
    """The plain server engine batching a short and a longer request (left padding): the log-probability it
    reports for each token equals one uncached forward pass over that request's prompt and tokens alone. The
    speculative batch builds on this engine's prefill and caches."""
    target = peer.make_target(target_kind, data.draw(st.integers(0, 2**16), label="weights seed"))
    vocab = peer.VOCAB
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=5), label="prompt")
    other = data.draw(st.lists(st.integers(0, vocab - 1), min_size=len(prompt) + 2, max_size=len(prompt) + 4))
    reported: list = []
    served = peer.serve(target, [prompt, other], 6, logprobs=reported)
    tol = TOLERANCES[mx.float32]
    for row, alone_prompt in enumerate((prompt, other)):
        wants = [float(peer.conditional(target, alone_prompt + served[row][:i])[t]) for i, t in enumerate(served[row])]
        errors = [abs(lp - want) for lp, want in zip(reported[row], wants)]
        bad = [e > tol.atol + tol.rtol * abs(want) for e, want in zip(errors, wants)]
        assert not any(bad), (
            f"row {row} (prompt {alone_prompt}, batched with a prompt of {len((prompt, other)[1 - row])} tokens): "
            f"reported log-probabilities off the uncached conditional by up to {max(errors):.3g} nats; per token "
            f"{[round(e, 4) for e in errors]}"
        )


@pytest.mark.peer_property(3)
@pytest.mark.parametrize("draft_kind", ["dflash", "mtp"])
def test_a_short_request_served_beside_a_longer_one_on_a_hybrid_target(draft_kind):
    """One case of the speculative batch property on the hybrid target (seeded, so the draws are fixed)."""
    from mlx_vlm.generate.ar import _PositionedTargetSampler

    target = peer.make_target("hybrid", 1, 12)
    drafter = peer.make_drafter(draft_kind, target, 2)
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]
    sampler = _PositionedTargetSampler(temperature=1.0, top_p=1.0, top_k=0, seed=7)
    served = peer.serve(target, prompts, 12, drafter, draft_kind, sampler=sampler)
    alone = [peer.generate(target, p, 12, temperature=1.0, seed=7) for p in prompts]
    assert served == alone, f"served {served} != alone {alone}: row 0 {first_difference(served[0], alone[0])}"


OPTIONS = {
    "logit_bias": lambda vocab: {"logit_bias": {vocab - 2: 20.0}},
    "repetition_penalty": lambda vocab: {"repetition_penalty": 8.0},
    "presence_penalty": lambda vocab: {"presence_penalty": 20.0},
    "frequency_penalty": lambda vocab: {"frequency_penalty": 20.0},
}


@pytest.mark.peer_property(4, 6)
@pytest.mark.parametrize("target_kind, draft_kind", CASES)
@pytest.mark.parametrize("option", sorted(OPTIONS))
@given(data=st.data())
def test_sampling_options_act_on_the_speculative_path_as_on_plain_decoding(option, target_kind, draft_kind, data):
    """A request option generate_step accepts (logit bias, penalties) must shape every speculative token as it
    shapes plain decoding: at temperature 0 the two emit the same tokens. Ignoring it is property 6's finding."""
    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind, min_tokens=8))
    options = OPTIONS[option](target.config.vocab_size)
    plain = peer.generate(target, prompt, max_tokens, temperature=0.0, **options)
    spec = peer.generate(target, prompt, max_tokens, drafter, draft_kind, temperature=0.0, **options)
    assert spec == plain, f"with {options}: speculative {spec} != plain {plain}: {first_difference(spec, plain)}"


ROUND_CASES = tuple(case for case in CASES + peer.MORE_CASES if case != ("sliding-window", "dflash"))
"""Not Gemma 4 DFlash on the sliding-window target: its rounds reserve ring room for a block
(`_reserve_dflash_target_cache`), and a one-token probe of that enlarged ring attends past the window (3.09 nats
off a rebuilt cache at round 0 while greedy decoding equals plain for 30 tokens): the probe, not the engine, errs."""


def cache_tolerance(target_kind: str):
    """Cached against rebuilt log-probabilities: float32's, or on the hybrid target `RECURRENT_LOGPROBS`: plain
    cached decoding itself (mlx-vlm's cache, any chunking) is off an uncached pass by up to 1.8e-5 nats there
    (weights 199, vocabulary 6, 22 tokens), the GatedDeltaNet state carrying every step's roundoff."""
    return RECURRENT_LOGPROBS if target_kind == "hybrid" else TOLERANCES[mx.float32]


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("target_kind, draft_kind", CASES)
@given(data=st.data())
def test_the_cache_after_speculative_decoding_attends_as_one_rebuilt_from_the_emitted_tokens(
    target_kind, draft_kind, data
):
    """After the loop, the target's own cache (KV and GatedDeltaNet state, rolled back after every rejection)
    must give the last emitted token the logits an uncached pass over prompt + emitted tokens gives it."""
    from mlx_vlm.models import cache as vlm_cache

    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    cache = vlm_cache.make_prompt_cache(target.language_model)
    spec = peer.generate(target, prompt, max_tokens, drafter, draft_kind, temperature=0.0, prompt_cache=cache)
    emitted = prompt + spec
    offsets = {int(c.offset) for c in cache if hasattr(c, "offset")}
    # the last token is in the cache only when it was an accepted draft the budget cut the round at
    assert len(offsets) == 1 and offsets <= {len(emitted) - 1, len(emitted)}, f"offsets {offsets} for {len(emitted)}"
    fed = emitted if offsets == {len(emitted) - 1} else emitted + [0]
    cached = peer.log_softmax(target.language_model(mx.array([fed[-1:]]), cache=cache).logits[0, -1])
    rebuilt = peer.conditional(target, fed)
    tol = cache_tolerance(target_kind)
    worst = float(mx.abs(cached - rebuilt).max())
    assert np.allclose(np.array(cached), np.array(rebuilt), atol=tol.atol, rtol=tol.rtol), (
        f"after {spec} (cache offset {offsets}): cached and rebuilt log-probabilities differ by up to {worst:.3g}"
    )


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("target_kind, draft_kind", ROUND_CASES)
@given(data=st.data())
def test_after_every_round_the_committed_cache_attends_as_one_rebuilt_from_the_accepted_tokens(
    target_kind, draft_kind, variant, data
):
    """After each round's commit (`commit_speculative_round`: trim, recurrent-state rollback, ring transaction),
    a copy of the target's cache fed one probe token gives the log-probabilities one uncached pass over the tokens
    the cache claims (its attention offset) and the probe gives: KV, rotating ring and GatedDeltaNet state alike."""
    import contextlib
    import copy
    from unittest import mock

    from mlx_vlm.speculative import dflash, eagle3, mtp

    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    probe = data.draw(st.integers(0, target.config.vocab_size - 1 if hasattr(target.config, "vocab_size") else 3))
    rounds: list[tuple[int, np.ndarray]] = []
    planted = peer.planted_rollback() if variant == "planted" else contextlib.nullcontext()

    def commit(model, caches, state, accepted, block_size):
        result = own(model, caches, state, accepted, block_size)
        held = max(int(c.offset) for c in caches if hasattr(c, "offset") and not isinstance(c.offset, mx.array))
        copied = copy.deepcopy(caches)
        logits = target.language_model(mx.array([[probe]]), cache=copied).logits[0, -1]
        rounds.append((held, np.array(peer.log_softmax(logits))))
        return result

    with planted, contextlib.ExitStack() as stack:
        own = dflash.commit_speculative_round  # the planted one, under the planted variant
        for module in (dflash, mtp, eagle3):
            stack.enter_context(mock.patch.object(module, "commit_speculative_round", commit))
        spec = peer.generate(target, prompt, max_tokens, drafter, draft_kind, temperature=0.0)
    tokens = prompt + spec
    tol = cache_tolerance(target_kind)
    assert rounds or len(spec) <= 1, f"{len(spec)} tokens emitted and no round committed: nothing was judged"
    note(f"emitted {spec}; {len(rounds)} commits holding {[held for held, _ in rounds]} tokens")
    for number, (held, cached) in enumerate(rounds):
        assert held <= len(tokens), f"round {number}: the cache claims {held} tokens, {len(tokens)} exist"
        rebuilt = np.array(peer.conditional(target, tokens[:held] + [probe]))
        assert np.allclose(cached, rebuilt, atol=tol.atol, rtol=tol.rtol), (
            f"round {number}: the committed cache (holding {tokens[:held]}) differs from one rebuilt from them "
            f"by up to {np.abs(cached - rebuilt).max():.3g} nats after probe {probe}"
        )


SAMPLER_VALUES = {
    "temperature": [0.7, 1.3],
    "top_p": [0.9, 0.6],
    "min_p": [0.05, 0.2],
    "top_k": [2, 3],
    "top_n_sigma": [1.0, 2.0],
    "p_less": [True],
    "typical_p": [0.9, 0.5],
}
"""A non-default value per sampler option; the options themselves are read from `generate_step`'s signature."""


def sampler_options() -> list[str]:
    """`generate_step`'s parameters that its sampler (`make_sampler`, temperature as ``temp``) consumes."""
    import inspect

    from mlx_vlm.generate.ar import generate_step
    from mlx_vlm.sample_utils import make_sampler

    consumed = set(inspect.signature(make_sampler).parameters) | {"temperature"}
    return [name for name in inspect.signature(generate_step).parameters if name in consumed]


def test_every_sampler_option_generate_step_accepts_has_a_drawn_value():
    """The option property below draws every sampler option `generate_step` accepts: a new one fails here."""
    assert set(sampler_options()) <= set(SAMPLER_VALUES), (
        f"options without a value: {set(sampler_options()) - set(SAMPLER_VALUES)}"
    )


@pytest.mark.peer_property(2, 4)
@pytest.mark.parametrize("target_kind, draft_kind", CASES)
@settings(max_examples=2)  # 10-20 s a case on 2 shared cores
@given(data=st.data())
def test_every_sampler_option_hands_each_token_its_exact_conditional(target_kind, draft_kind, data):
    """Every sampler option `generate_step` accepts (read from its signature), drawn with temperature > 0 and no
    seed (mlx-vlm's `make_sampler` path): each emitted token is the output of a call of the sampler plain decoding
    builds with those options, handed the target's uncached conditional of the tokens before it (call by call)."""
    import sys
    from unittest import mock

    from mlx_vlm.sample_utils import make_sampler

    generate_module = sys.modules["mlx_vlm.generate"]  # the module `generate_step` reads overrides from

    target, drafter, prompt, max_tokens = data.draw(decodings(target_kind, draft_kind))
    names = data.draw(st.sets(st.sampled_from(sampler_options()), min_size=1, max_size=3), label="options")
    options = {name: data.draw(st.sampled_from(SAMPLER_VALUES[name]), label=name) for name in sorted(names)}
    options.setdefault("temperature", 1.0)
    recorders: list[RecordingSampler] = []

    def recording(**kwargs):
        recorders.append(RecordingSampler(make_sampler(**kwargs)))
        return recorders[-1]

    mx.random.seed(data.draw(st.integers(0, 2**31 - 1), label="mx.random.seed"))
    with mock.patch.object(generate_module, "make_sampler", recording, create=True):
        spec = peer.generate(target, prompt, max_tokens, drafter, draft_kind, **options)
    note(f"options {options}; emitted {spec}; accepted per round {drafter.accept_lens}")
    assert len(recorders) == 1, f"{len(recorders)} samplers built for {options}: expected make_sampler once"
    assert_each_token_is_a_sampler_output_on_its_conditional(
        spec, recorders[0].rows(), lambda tokens: peer.conditional(target, tokens), prompt
    )


DRAFT_VOCAB_CASES = [
    ("attention", "greedy"),
    ("attention", "sampled"),
    ("sliding-window", "greedy"),
    ("sliding-window", "sampled"),
    ("hybrid", "greedy"),
]
"""Not sampled on the hybrid Qwen 3.5 target: it has no `logits_from_hidden`, so EAGLE-3 verifies over the full
vocabulary there, and its sampled rows carry finding 13's epsilon (up to 1.6e-5 nats, past float32's tolerance)."""


@pytest.mark.peer_property(1, 2)
@pytest.mark.parametrize("target_kind, mode", DRAFT_VOCAB_CASES)
@example(seed=5, prompt=[1, 3, 5], max_tokens=12, draft_vocab=6, temperature=1.2, stream=0)
@given(
    seed=st.integers(0, 2**16),
    prompt=st.lists(st.integers(0, peer.VOCAB - 1), min_size=1, max_size=6),
    max_tokens=st.integers(8, 16),
    draft_vocab=st.integers(2, peer.VOCAB // 2),
    temperature=st.sampled_from([0.8, 1.2]),
    stream=st.integers(0, 2**31 - 1),
)
def test_a_draft_vocabulary_smaller_than_the_targets_leaves_every_token_the_targets(
    target_kind, mode, seed, prompt, max_tokens, draft_vocab, temperature, stream
):
    """An EAGLE-3 drafter whose vocabulary is a subset of the target's (``draft_vocab_size`` < the target's, its
    ``d2t`` map to the target's even ids): greedy, the loop emits plain greedy decoding; sampled (mlx-vlm's
    `make_sampler` at `temperature`, ``mx.random.seed(stream)``), each emitted token is a target-sampler output on
    its uncached conditional. A target token outside the draft vocabulary must stay reachable."""
    from mlx_vlm.sample_utils import make_sampler

    target = peer.make_target(target_kind, seed, peer.VOCAB)
    drafter = peer.make_drafter("eagle3", target, seed + 1, block_size=3, draft_vocab=draft_vocab)
    note(
        f"target = make_target({target_kind!r}, {seed}); drafter = make_drafter('eagle3', target, {seed + 1}, "
        f"block_size=3, draft_vocab={draft_vocab}); generate(target, {prompt}, {max_tokens}, drafter, 'eagle3', ...)"
    )
    if mode == "greedy":
        plain = peer.generate(target, prompt, max_tokens, temperature=0.0)
        spec = peer.generate(target, prompt, max_tokens, drafter, "eagle3", temperature=0.0)
        assert spec == plain, f"speculative {spec} != plain {plain}: {first_difference(spec, plain)}"
        return
    sampler = RecordingSampler(make_sampler(temp=temperature))
    mx.random.seed(stream)
    spec = peer.generate(target, prompt, max_tokens, drafter, "eagle3", sampler=sampler)
    assert_each_token_is_a_sampler_output_on_its_conditional(
        spec, sampler.rows(), lambda tokens: peer.conditional(target, tokens), prompt
    )
