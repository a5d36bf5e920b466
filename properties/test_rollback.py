"""C18: speculative decoding over hybrid and sliding-window mlx-lm models rolls back to the cache it would have
built from the accepted tokens alone, and decodes as if no draft had been made.

The models are mlx-lm's own classes (qwen3_next, lfm2, mamba2: `ArraysCache`
convolution and recurrent state; gemma4_text and llama: `RotatingKVCache`
rings that wrap inside a verify pass), tiny and seeded, with mlx-lm's own
caches (`make_hybrid_cache`). Caches are read as the model attends to them
(`cache_views`), the one reading every loop of the ecosystem is judged by.
The loop judged is the implementation's `speculative_generate_step` (the
`SpeculativeRollback` family; the reference's undoes a round by snapshot and
replay), with its own rollback; the batched property judges the suite's own
snapshot and replay. mlx-lm's own loop refuses such targets, and that is a
property too.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

from ncm_verify.evidence.thresholds import MIN_DISTINCT_EXAMPLES
from ncm_verify.harness import strategies
from ncm_verify.harness.checks import as_numpy, assert_close, assert_decodings_equal, top_two_gap
from ncm_verify.mlx_lm_real.cache_views import assert_caches_equal_rebuilt
from ncm_verify.mlx_lm_real.decoders import load_decoder
from ncm_verify.mlx_lm_real.hybrid_models import DRAWN, HybridSpec, make_hybrid_cache, make_hybrid_model
from ncm_verify.mlx_lm_real.recording import a_target_call_followed_a_rejection, check_speculative_sampler_calls
from ncm_verify.reference import speculative
from ncm_verify.tolerances import RECURRENT_LOGPROBS

DECODER = "exact verifier"
"""The suite's own rollback functions the batched property judges; a planted decoder replaces it in the self-tests."""
EXACT_RULE_LABEL = "the implementation's speculative_generate_step"
RECURRENT = {kind: drawn for kind, drawn in DRAWN.items() if set(drawn[0]) & set("RH")}
"""The kinds whose caches include an `ArraysCache` (in a `CacheList` too): the targets mlx-lm's loop refuses."""
LOOP_EXAMPLES = max(min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2), settings.default.max_examples // 5)
"""A decoding with a rollback and a rebuilt cache per round costs 0.1-0.3 s here: under `ci` the distinct examples a
claim's property must show and two more (12), under `thorough` a fifth of its examples (60)."""
FAMILIES = {
    "all": (DRAWN, None),
    "recurrent": (RECURRENT, None),
    "rings": ({kind: drawn for kind, drawn in DRAWN.items() if "S" in drawn[0]}, None),
    "keep rings": ({"llama": DRAWN["llama"]}, lambda spec: spec.keep > 0),
}
"""Family -> (the kinds drawn, a condition on the spec or None). Properties run on "all"; a planted bug's
self-test may aim one at the family where it shows (a keep prefix only exists in "keep rings")."""


@functools.lru_cache(maxsize=64)
def hybrid_model(spec: HybridSpec):
    """Models are pure functions of their spec (caches live outside), so examples share them."""
    return make_hybrid_model(spec)


def draw_hybrid_spec(data, family: str, *, keep: bool = False, label: str = "target") -> HybridSpec:
    """A spec of `family` (see `FAMILIES`); a keep prefix only where `keep`."""
    kinds, condition = FAMILIES[family]
    specs = strategies.hybrid_specs(HybridSpec, kinds, keep=keep or condition is not None)
    return data.draw(specs if condition is None else specs.filter(condition), label=label)


def draw_decoding(data, spec: HybridSpec, draft_spec: HybridSpec):
    """A prompt, a budget and a draft length for `spec` and `draft_spec`, and the call (without its closing `)`)."""
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    max_tokens = data.draw(st.integers(1, 10), label="max_tokens")
    num_draft = data.draw(strategies.rollback_draft_lengths, label="num_draft_tokens")
    call = (
        f"speculative_generate_step(mx.array({prompt}), make_hybrid_model({spec}), "
        f"make_hybrid_model({draft_spec}), num_draft_tokens={num_draft}, max_tokens={max_tokens}, "
        "prompt_cache=make_hybrid_cache(...) for both"
    )
    return prompt, max_tokens, num_draft, call


def draw_hybrid_decoding(data, family: str = "all", *, keep: bool = False):
    """A target spec, a draft of the same architecture (same or other weights), a prompt, budget, draft length."""
    spec = draw_hybrid_spec(data, family, keep=keep)
    relation = data.draw(st.sampled_from(["other weights", "same weights"]), label="draft relation")
    draft_spec = spec if relation == "same weights" else spec.with_seed(spec.seed + 1)
    prompt, max_tokens, num_draft, call = draw_decoding(data, spec, draft_spec)
    event(f"{spec.kind} {spec.layers}" + (f" keep {spec.keep}" if spec.keep else ""))
    return spec, draft_spec, prompt, max_tokens, num_draft, call


class RecordedKernels:
    """`speculative`'s verifiers with each round's outcome recorded: (drafts verified, accepted, tokens)."""

    def __init__(self):
        self.rounds: list[tuple[int, int, list[int]]] = []

    def _record(self, outcome, drafts):
        accepted = int(outcome.num_accepted[0].item())
        self.rounds.append((drafts.shape[1], accepted, outcome.tokens[0, : accepted + 1].tolist()))
        return outcome

    def verify_greedy(self, logits, drafts, **options):
        return self._record(speculative.verify_greedy(logits, drafts, **options), drafts)

    def verify_chain(self, target_probs, draft_probs, drafts, **options):
        return self._record(speculative.verify_chain(target_probs, draft_probs, drafts, **options), drafts)


@pytest.mark.claim("C18")
@pytest.mark.parametrize("family", ["all"])
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_after_every_speculative_round_each_layer_as_attended_equals_the_cache_rebuilt_from_the_accepted_tokens(
    impl, family, data
):
    decoder = impl
    spec, draft_spec, prompt, max_tokens, num_draft, call = draw_hybrid_decoding(data, family, keep=True)
    seed = data.draw(st.none() | strategies.seeds, label="sampler seed (None: greedy)")
    call = f"mx.random.seed({seed}); {call}, sampler=make_sampler({0.0 if seed is None else 1.0}))"
    note(call)
    target, draft = hybrid_model(spec), hybrid_model(draft_spec)
    specs = {"target": spec, "draft": draft_spec}
    caches = {"target": make_hybrid_cache(target, spec), "draft": make_hybrid_cache(draft, draft_spec)}
    kernels = RecordedKernels()
    if seed is not None:
        mx.random.seed(seed)
    steps = decoder.speculative_generate_step(
        mx.array(prompt),
        target,
        draft,
        num_draft_tokens=num_draft,
        max_tokens=max_tokens,
        sampler=decoder.make_sampler(0.0 if seed is None else 1.0),
        prompt_cache=caches["target"] + caches["draft"],
        kernels=kernels,
    )
    history, checked, rejected = list(prompt), 0, 0
    for _ in steps:
        if len(kernels.rounds) == checked:
            continue
        # the first yield of a round: the loop has undone its rejected tokens
        count, accepted, tokens = kernels.rounds[checked]
        held = {"target": history + tokens[:-1], "draft": history + tokens[: -2 if accepted == count else -1]}
        for name, model in (("target", target), ("draft", draft)):
            assert_caches_equal_rebuilt(
                model,
                caches[name],
                [held[name]],
                make_cache=functools.partial(make_hybrid_cache, model, specs[name]),
                label=f"{name} caches after round {checked} ({accepted} of {count} drafts accepted)",
                call=call,
            )
        history += tokens
        checked, rejected = checked + 1, rejected + (accepted < count)
    event("a round rejected a draft" if rejected else "no draft rejected")
    event("a ring wrapped" if "S" in spec.layers and len(history) > spec.window else "no ring wrapped")


@pytest.mark.claim("C18")
@pytest.mark.parametrize("family", ["all"])
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_greedy_speculative_decoding_over_hybrid_models_emits_the_tokens_of_generate_step(impl, family, data):
    decoder = impl
    spec, draft_spec, prompt, max_tokens, num_draft, call = draw_hybrid_decoding(data, family)
    call += ") vs mlx_lm.generate.generate_step(..., max_tokens=...)"
    note(call)
    target, draft = hybrid_model(spec), hybrid_model(draft_spec)
    plain = list(load_decoder("mlx-lm").generate_step(mx.array(prompt), target, max_tokens=max_tokens))
    speculative_tokens = [
        int(step[0])
        for step in decoder.speculative_generate_step(
            mx.array(prompt),
            target,
            draft,
            num_draft_tokens=num_draft,
            max_tokens=max_tokens,
            prompt_cache=make_hybrid_cache(target, spec) + make_hybrid_cache(draft, draft_spec),
        )
    ]
    assert_decodings_equal(
        speculative_tokens,
        [int(token) for token, _ in plain],
        margin=min(top_two_gap(logprobs) for _, logprobs in plain),
        scale=max(float(np.abs(as_numpy(logprobs)).max()) for _, logprobs in plain),
        dtype=mx.float32,
        label="greedy speculative tokens vs generate_step's",
        call=call,
    )


@pytest.mark.claim("C18")
@pytest.mark.parametrize("family", ["all"])
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_every_target_sampler_call_over_hybrid_models_is_handed_the_target_conditional_of_what_was_emitted(
    impl, family, data
):
    """C7's call-by-call check at temperature > 0: every row the verifier is handed, after every rollback,
    matches one uncached forward pass of the target over the prompt and the tokens emitted before it."""
    decoder = impl
    spec, draft_spec, prompt, max_tokens, num_draft, call = draw_hybrid_decoding(data, family)
    temp = data.draw(st.sampled_from([0.7, 1.0, 1.5]), label="temp")
    seed = data.draw(strategies.seeds, label="sampler seed")
    call = f"mx.random.seed({seed}); {call}, sampler=make_sampler(temp={temp}))"
    note(call)
    target, draft = hybrid_model(spec), hybrid_model(draft_spec)
    mx.random.seed(seed)
    rounds = check_speculative_sampler_calls(
        decoder,
        target,
        draft,
        prompt,
        decoder.make_sampler(temp=temp),
        label=EXACT_RULE_LABEL,
        call=call,
        tolerance=RECURRENT_LOGPROBS if set(spec.layers) & set("RH") else None,
        num_draft_tokens=num_draft,
        max_tokens=max_tokens,
        prompt_cache=make_hybrid_cache(target, spec) + make_hybrid_cache(draft, draft_spec),
    )
    followed = a_target_call_followed_a_rejection(rounds, spec.vocab_size)
    event("a target call after a rejection" if followed else "no target call after a rejection")


@pytest.mark.claim("C18")
@pytest.mark.parametrize(("decoder_name", "family"), [(DECODER, "all")])
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_batched_caches_restored_and_replayed_equal_caches_rebuilt_from_each_row_s_accepted_tokens(
    decoder_name, family, data
):
    """The rollback itself, on rows that differ: snapshot, a verify pass or draft steps, restore and replay."""
    decoder = load_decoder(decoder_name)
    spec = draw_hybrid_spec(data, family, keep=True, label="model")
    batch = data.draw(strategies.rollback_batches, label="batch")
    length = data.draw(st.integers(1, 6), label="prompt length")
    rows = st.lists(st.integers(0, spec.vocab_size - 1), min_size=length, max_size=length)
    prompts = data.draw(st.lists(rows, min_size=batch, max_size=batch, unique_by=tuple), label="prompts")
    count = data.draw(strategies.rollback_draft_lengths, label="drafts")
    blocks = data.draw(
        st.lists(strategies.token_lists(spec.vocab_size, count + 1, count + 1), min_size=batch, max_size=batch),
        label="each row's last token and drafts",
    )
    accepted = data.draw(st.integers(0, count), label="accepted")
    how = data.draw(st.sampled_from(["one verify pass", "one token at a time"]), label="fed as")
    call = (
        f"{decoder_name}: snapshot_caches(make_hybrid_cache({spec})) after prompts {prompts}; feed blocks {blocks} "
        f"({how}); roll_back(..., blocks[:, :{accepted + 1}])"
    )
    note(call)
    event(f"{spec.kind} {spec.layers}, batch {batch}")
    model = hybrid_model(spec)
    caches = make_hybrid_cache(model, spec)
    model(mx.array(prompts, dtype=mx.uint32), cache=caches)
    saved = decoder.snapshot_caches(caches)
    block = mx.array(blocks, dtype=mx.uint32)
    for start, stop in [(0, count + 1)] if how == "one verify pass" else [(i, i + 1) for i in range(count + 1)]:
        model(block[:, start:stop], cache=caches)
    decoder.roll_back(model, caches, saved, block[:, : accepted + 1])
    kept = [prompt + row[: accepted + 1] for prompt, row in zip(prompts, blocks, strict=True)]
    assert_caches_equal_rebuilt(
        model,
        caches,
        kept,
        make_cache=functools.partial(make_hybrid_cache, model, spec),
        label="caches rolled back",
        call=call,
    )


@pytest.mark.claim("C18")
@given(data=st.data())
def test_mlx_lm_refuses_a_recurrent_target_before_emitting_any_token_naming_the_cache_types(data):
    """mlx-lm's `speculative_generate_step` cannot undo a recurrent layer's state, and says so up front."""
    spec, draft_spec, prompt, max_tokens, num_draft, call = draw_hybrid_decoding(data, "recurrent")
    note(f"mlx_lm.generate.{call})")
    target, draft = hybrid_model(spec), hybrid_model(draft_spec)
    untrimmable = sorted({type(c).__name__ for c in make_hybrid_cache(target, spec) if not c.is_trimmable()})
    emitted = []
    with pytest.raises(ValueError) as refusal:
        for step in load_decoder("mlx-lm").speculative_generate_step(
            mx.array(prompt), target, draft, num_draft_tokens=num_draft, max_tokens=max_tokens
        ):
            emitted.append(int(step[0]))
    message = str(refusal.value)
    assert emitted == [] and "trimmable" in message and all(name in message for name in untrimmable), (
        f"mlx-lm emitted {emitted} then raised {refusal.value!r}; expected a refusal naming {untrimmable} before "
        f"any token\n  call: mlx_lm.generate.{call})"
    )


def decode_until_refused(decoder, prompt, target, draft, **options) -> tuple[list[int], ValueError | None]:
    """The tokens `decoder`'s speculative loop emits, and the ValueError it raised before emitting any (a refusal)."""
    emitted: list[int] = []
    try:
        for step in decoder.speculative_generate_step(mx.array(prompt), target, draft, **options):
            emitted.append(int(step[0]))
    except ValueError as refusal:
        if emitted:
            raise
        return emitted, refusal
    return emitted, None


@pytest.mark.claim("C18")
@pytest.mark.parametrize("decoder_name", ["mlx-lm", DECODER])
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_a_loop_given_a_recurrent_draft_refuses_it_or_rolls_its_caches_back_to_the_tokens_emitted(decoder_name, data):
    """The draft's caches too must drop rejected drafts: with an attention-only target (which mlx-lm accepts) and a
    recurrent draft, either the loop refuses before any token, or afterwards the draft's caches equal those rebuilt
    from the prompt and the tokens emitted but the last (but the last two when the last round's drafts all stood:
    the draft never ran its last draft). mlx-lm checks only the target's caches (`known_bugs`)."""
    decoder = load_decoder(decoder_name)
    draft_spec = draw_hybrid_spec(data, "recurrent", label="draft")
    layers = data.draw(st.sampled_from(["A", "AA"]), label="target layers")
    target_spec = HybridSpec("llama", layers, vocab_size=draft_spec.vocab_size, seed=draft_spec.seed + 1)
    prompt, max_tokens, num_draft, call = draw_decoding(data, target_spec, draft_spec)
    call = f"{decoder_name}: {call})"
    note(call)
    target, draft = hybrid_model(target_spec), hybrid_model(draft_spec)
    draft_cache = make_hybrid_cache(draft, draft_spec)
    emitted, refusal = decode_until_refused(
        decoder,
        prompt,
        target,
        draft,
        num_draft_tokens=num_draft,
        max_tokens=max_tokens,
        prompt_cache=make_hybrid_cache(target, target_spec) + draft_cache,
    )
    event(f"refused: {refusal}" if refusal is not None else f"{draft_spec.kind} draft decoded")
    if refusal is not None:
        return
    history = prompt + emitted
    rebuilt = functools.partial(make_hybrid_cache, draft, draft_spec)
    try:
        assert_caches_equal_rebuilt(draft, draft_cache, [history[:-2]], make_cache=rebuilt, label="", call=call)
    except AssertionError:
        assert_caches_equal_rebuilt(
            draft,
            draft_cache,
            [history[:-1]],
            make_cache=rebuilt,
            label=f"the draft's caches after decoding (nor rebuilt from the {len(history) - 2} tokens before)",
            call=call,
        )


RING_KEEPS = ["no keep prefix", "a keep prefix"]
"""A ring without a keep prefix, and one with (mlx-lm's `--max-kv-size` ring keeps 4): the second is a known
upstream bug (`known_bugs.KEEP_RING_CHUNKS`)."""


@pytest.mark.claim("C18")
@pytest.mark.parametrize("keep", RING_KEEPS)
@settings(max_examples=LOOP_EXAMPLES)
@given(data=st.data())
def test_a_sliding_window_ring_gives_every_position_the_same_logits_in_one_pass_as_one_token_at_a_time(keep, data):
    """mlx-lm's `RotatingKVCache` alone (a llama whose last layer slides): the logits of every position of a drawn
    sequence longer than the window are those of feeding it one token at a time, as a verify pass of several tokens
    must give what plain decoding would. With a keep prefix, one-token steps attend to it and a multi-token pass
    masks a plain sliding window over the buffer."""
    window = data.draw(st.integers(2, 4), label="window")
    prefix = data.draw(st.integers(1, window - 1), label="keep prefix") if keep == "a keep prefix" else 0
    layers = data.draw(st.sampled_from(["AS", "SAS", "AAS"]), label="layers")
    vocab = data.draw(st.sampled_from([8, 16, 32]), label="vocab_size")
    spec = HybridSpec("llama", layers, vocab_size=vocab, seed=data.draw(strategies.seeds), window=window, keep=prefix)
    tokens = data.draw(strategies.token_lists(vocab, window + 2, 12), label="tokens")
    call = f"make_hybrid_model({spec})({tokens}) in one pass vs one token at a time, make_hybrid_cache each"
    note(call)
    model = hybrid_model(spec)
    whole = model(mx.array([tokens], dtype=mx.uint32), cache=make_hybrid_cache(model, spec))[0]
    caches = make_hybrid_cache(model, spec)
    stepped = mx.concatenate([model(mx.array([[token]], dtype=mx.uint32), cache=caches)[0] for token in tokens])
    assert_close(
        whole.astype(mx.float32),
        stepped.astype(mx.float32),
        dtype=mx.float32,
        label=f"logits of {len(tokens)} tokens in one pass vs one token at a time (window {window}, keep {prefix})",
        call=call,
    )
