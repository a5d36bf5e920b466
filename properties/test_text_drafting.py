"""C17: the text drafting loop (a drafter proposes blocks, an mlx-lm target verifies each in one pass) is exact.

Judged call by call, as mlx-lm's loop is: every `verify_chain` call the implementation's
`generate_drafted` makes must be handed the target's exact conditionals of what was emitted before it and
the very rows q(. | z) the drafter drew its tokens from (recomputed uncached under its codes). The law of
the procedure is enumerated in float64 against the target's; a sampled smoke checks the whole loop's law.
The drafters are the tiny seeded test drafters of `mlx_lm_real.text_drafters` (autoregressive; NCM-style
block drafters with codes z, one of them reading the target's hidden state), and the call-by-call check
also runs the shipped trained target and drafters (`make train`).
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st

from ncm_verify.evidence.thresholds import MIN_DISTINCT_EXAMPLES
from ncm_verify.harness import stats, strategies
from ncm_verify.harness.checks import assert_distributions_equal, assert_joint_sample_fits
from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model, outcome_index
from ncm_verify.mlx_lm_real.text_drafters import (
    DRAFTER_KINDS,
    CountingModel,
    RecordingDrafter,
    RecordingKernels,
    check_drafted_calls,
    check_one_pass_per_block,
    drafting_tables,
    enumerated_loop_law,
    make_drafter,
    target_rows,
)
from ncm_verify.oracles import exact_text_drafting
from ncm_verify.reference.drafting.models import ARDrafter
from ncm_verify.reference.drafting.text import text_ids
from ncm_verify.reference.drafting.trained import load_trained
from ncm_verify.tolerances import LAW_FROM_FLOAT32_ROWS

pytestmark = pytest.mark.claim("C17")

TEMPERATURES = (0.7, 1.0, 1.5)
CLOSE_DRAFT_SCALES = (None, 1.5, 2.0, 4.5)
"""An autoregressive draft with other weights (None), or the target's weights under a scaled head (close)."""


@functools.lru_cache(maxsize=64)
def tiny_target(spec: TinySpec):
    return make_tiny_model(spec)


@functools.lru_cache(maxsize=64)
def tiny_drafter(kind: str, spec: TinySpec, seed: int, scale: float | None):
    return make_drafter(kind, spec, seed, logit_scale=scale)


def draw_models(data, vocabs=(8, 16, 31)):  # a block drafter adds a placeholder id: at most 32
    """A target, a drafter of some kind over its vocabulary, and how to rebuild them."""
    spec = TinySpec(vocab_size=data.draw(st.sampled_from(vocabs), label="vocab"), seed=data.draw(st.integers(0, 2**16)))
    kind = data.draw(st.sampled_from(DRAFTER_KINDS), label="drafter kind")
    seed = data.draw(st.integers(0, 2**16), label="drafter seed")
    scale = (
        data.draw(st.sampled_from(CLOSE_DRAFT_SCALES), label="draft logit_scale") if kind == "autoregressive" else None
    )
    built = f"make_tiny_model({spec}), make_drafter({kind!r}, spec, {seed}, logit_scale={scale})"
    return spec, tiny_target(spec), kind, tiny_drafter(kind, spec, seed, scale), built


def draw_prompt(data, kind: str, vocab: int, max_size: int = 6) -> list[int]:
    # the first block of a feature-reading drafter needs a target state: two prompt tokens at least
    return data.draw(strategies.token_lists(vocab, 2 if "features" in kind else 1, max_size), label="prompt")


def run_judged_call_by_call(impl, target, drafter, prompt, max_tokens, num_draft, temperature, seed, call):
    """Run the implementation's loop with its drafter, target and `verify_chain` recorded, then judge every
    call (`check_drafted_calls`) and its target passes; returns the drafts accepted and drafted per round."""
    calls: list = []
    passes: list = []
    try:
        generation = impl.generate_drafted(
            CountingModel(target, passes),
            RecordingDrafter(drafter, calls),
            prompt,
            max_tokens,
            num_draft=num_draft,
            key=mx.random.key(seed),
            temperature=temperature,
            kernels=RecordingKernels(impl, calls),
        )
    except Exception:
        check_drafted_calls(calls, None, target, drafter, prompt, max_tokens, temperature, call=call)
        raise
    accepted = check_drafted_calls(
        calls, generation.tokens, target, drafter, prompt, max_tokens, temperature, call=call
    )
    drafted = [record["drafts"].shape[1] for name, record in calls if name == "verify_chain"]
    check_one_pass_per_block(passes, prompt, len(drafted), call=call)
    return accepted, drafted


@settings(deadline=None)
@given(data=st.data())
def test_every_verify_chain_call_is_handed_the_target_conditional_and_the_rows_the_drafts_were_drawn_from(impl, data):
    """The loop is exact iff each round verifies the target's exact p against the q the drafts came from.

    Its drafter and `verify_chain` are wrapped to record each proposal and each call; every handed p row
    must match one uncached forward pass of the target over the prompt, the tokens emitted before and the
    drafts; every q row the drafter's own rows under the codes it drew, recomputed without a cache; a
    feature-reading drafter's features the target's uncached hidden state; the emitted tokens what
    `verify_chain` decided; the target ran one pass per block; no two random calls got the same key (a reused
    key correlates rounds that are each exact). A loop that raises is judged on the calls it made before.
    """
    spec, target, kind, drafter, built = draw_models(data)
    prompt = draw_prompt(data, kind, spec.vocab_size)
    max_tokens = data.draw(st.integers(1, 12), label="max_tokens")
    num_draft = data.draw(st.integers(1, drafter.max_block), label="num_draft")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    call = (
        f"generate_drafted({built}, {prompt}, {max_tokens}, num_draft={num_draft}, key=mx.random.key({seed}), "
        f"temperature={temperature})"
    )
    note(call)
    accepted, drafted = run_judged_call_by_call(
        impl, target, drafter, prompt, max_tokens, num_draft, temperature, seed, call
    )
    rejected = [a < d for a, d in zip(accepted, drafted)]
    event(f"drafter: {kind}")
    event("a round after a rejection" if any(rejected[:-1]) else "no round after a rejection")


TRAINED_DRAFTERS = ("ar_draft", "ncm_data", "ncm_distilled", "ncm_features")
"""The shipped drafters (`make train`), judged against the shipped target: trained models' peaked rows."""
TRAINED_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""A few short generations (20-60 ms each here): the distinct examples a claim's property must show, two more."""


@functools.cache
def trained(name: str):
    model = load_trained(name)
    return ARDrafter(model) if name == "ar_draft" else model


@functools.lru_cache(maxsize=1)
def held_out_ids():
    return text_ids()[1]


@settings(max_examples=TRAINED_EXAMPLES, deadline=None)
@given(data=st.data())
def test_every_verify_chain_call_on_the_trained_target_and_drafters_is_handed_the_exact_rows(impl, data):
    """The call-by-call check above, on the shipped trained target and its four trained drafters.

    Prompts are held-out text, so the rows are a trained model's: peaked, with long accepted runs and
    rejections where the tiny seeded drafters rarely reach them (a wrong row near a one-hot row shows).
    """
    name = data.draw(st.sampled_from(TRAINED_DRAFTERS), label="trained drafter")
    target, drafter, ids = trained("target"), trained(name), held_out_ids()
    start = data.draw(st.integers(0, len(ids) - 32), label="held-out offset")
    prompt = [int(t) for t in ids[start : start + data.draw(st.integers(2, 24), label="prompt length")]]
    max_tokens = data.draw(st.integers(1, 16), label="max_tokens")
    num_draft = data.draw(st.integers(1, drafter.max_block), label="num_draft")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    call = (
        f"generate_drafted(load_trained('target'), trained({name!r}), {prompt}, {max_tokens}, "
        f"num_draft={num_draft}, key=mx.random.key({seed}), temperature={temperature})"
    )
    note(call)
    accepted, drafted = run_judged_call_by_call(
        impl, target, drafter, prompt, max_tokens, num_draft, temperature, seed, call
    )
    event(f"trained drafter: {name}")
    event("a draft rejected" if any(a < d for a, d in zip(accepted, drafted)) else "every draft stood")


ENUMERATION_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example tabulates both models over every continuation (0.1-0.3 s): the distinct examples a claim's
property must show, two more as the first derandomized examples can repeat one."""


@settings(max_examples=ENUMERATION_EXAMPLES, deadline=None)
@given(data=st.data())
def test_drafted_generation_enumerates_to_the_target_law(data):
    """The procedure's law of the first tokens, enumerated in float64 from both models' rows, is the target's."""
    spec, target, kind, drafter, built = draw_models(data, vocabs=(8,))
    prompt = draw_prompt(data, kind, spec.vocab_size, max_size=3)
    length = data.draw(st.integers(1, 3), label="tokens")
    num_draft = data.draw(st.integers(1, min(4 - length, drafter.max_block) if length < 3 else 1), label="num_draft")
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    call = f"drafted_law(drafting_tables({built}, {prompt}, {length}, {num_draft}, {temperature}))"
    note(call)
    target_row, blocks = drafting_tables(target, drafter, prompt, length, num_draft, temperature)
    assert_distributions_equal(
        exact_text_drafting.drafted_law(target_row, blocks, length, num_draft),
        exact_text_drafting.target_law(target_row, length),
        label="drafted generation's law of the first tokens vs the target's",
        call=call,
    )


LOOP_ENUMERATION_VOCAB = 4
"""Each internal branch of the enumeration costs V runs of the loop: at V = 4 about 20-50 runs of 1-2 rounds."""


@settings(max_examples=ENUMERATION_EXAMPLES, deadline=None)
@given(data=st.data())
def test_the_implementations_drafting_loop_enumerates_to_the_target_law_over_two_rounds(impl, data):
    """The implementation's loop, every branch walked through it, emits the target's law of two tokens.

    Each round's draft is forced in turn (the drafter still proposes, so its cache and key advance as they would)
    and weighted by the drafter's own row; the round's outcomes are weighted from the p and q the loop handed
    `verify_chain` and forced in the runs below (`enumerated_loop_law`). A first draft rejected leaves a second round
    to the loop's own state (caches trimmed, features carried): a wrong row there, a cache that kept a rejected
    draft, a q other than the drafter's, move the law.
    """
    spec, target, kind, drafter, built = draw_models(data, vocabs=(LOOP_ENUMERATION_VOCAB,))
    prompt = draw_prompt(data, kind, spec.vocab_size, max_size=4)
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    length = 2
    call = (
        f"generate_drafted({built}, {prompt}, {length}, num_draft=1, key=mx.random.key({seed}), "
        f"temperature={temperature}) with scripted drafts and outcomes"
    )
    note(call)

    def run_loop(wrap, kernels):
        impl.generate_drafted(
            target,
            wrap(drafter),
            prompt,
            length,
            num_draft=1,
            key=mx.random.key(seed),
            temperature=temperature,
            kernels=kernels,
        )

    law = enumerated_loop_law(run_loop, length, call=call)
    target_row = target_rows(target, prompt, length, temperature)
    assert_distributions_equal(
        law,
        exact_text_drafting.target_law(target_row, length),
        label="the loop's law of two tokens, enumerated through it, vs the target's",
        call=call,
        tolerance=LAW_FROM_FLOAT32_ROWS,
    )


SMOKE_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example runs 1024 generations, one Python call each (8-20 ms of CPU here): the distinct laws a claim
must show, two more. The suite's costliest property per example; the exact check above is the proof."""


@pytest.mark.thorough_only  # 80 CPU-s for TV 0.2; the loop's evidence is the exact call-by-call check
@pytest.mark.statistical(tests=2)
@settings(max_examples=SMOKE_EXAMPLES, deadline=None)
@given(data=st.data())
def test_sampled_drafted_generations_follow_the_target_law_and_first_drafts_stand_at_sum_min_p_q(impl, data):
    """A smoke test of the whole loop's sampled output, weak by design; exactness rests on the call-by-call check.

    Its plans detect a total-variation deviation of `stats.LOOP_TARGET_TV` (0.2) on the binned law with
    power 0.99 (`stats.make_plan`): gross errors (every draft standing, the drafter's law emitted, keys reused
    across rounds), not subtle ones. A generation is one token over V = 8, or up to three over V = 4: one round
    of one draft each, so several rounds run on the loop's own state and randomness (the enumeration forces both).
    Laws needing more than `stats.LOOP_SMOKE_MAX_SAMPLES` generations are filtered out.
    """
    spec, target, kind, drafter, built = draw_models(data, vocabs=(4, 8))
    prompt = draw_prompt(data, kind, spec.vocab_size, max_size=2)  # one or two passes a generation: cheap
    length = data.draw(st.integers(1, 3 if spec.vocab_size == 4 else 1), label="tokens")
    num_draft = 1  # one round a token at most: the cheapest law that sees q, p, the acceptance rule and the rounds
    temperature = data.draw(st.sampled_from(TEMPERATURES), label="temperature")
    seed = data.draw(strategies.seeds, label="seed")
    target_row, blocks = drafting_tables(target, drafter, prompt, length, num_draft, temperature)
    target_law = exact_text_drafting.target_law(target_row, length)
    law = np.zeros(spec.vocab_size**length)
    for tokens, mass in target_law.items():
        law[outcome_index(list(tokens), spec.vocab_size)] += mass
    stood = exact_text_drafting.first_draft_acceptance(target_row, blocks)
    call = (
        f"generate_drafted({built}, {prompt}, {length}, num_draft={num_draft}, key=mx.random.split("
        f"mx.random.key({seed}), n)[i], temperature={temperature})  # first draft stands w.p. {stood:.4f}"
    )
    note(call)
    laws = {"first tokens": law, "first draft stood": np.array([stood, 1.0 - stood])}
    assume(stats.loop_smoke_sized(laws))

    def sample(n: int) -> dict[str, np.ndarray]:
        outcomes, first = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        for i, key in enumerate(mx.random.split(mx.random.key(seed), n)):
            generation = impl.generate_drafted(
                target, drafter, prompt, length, num_draft=num_draft, key=key, temperature=temperature, kernels=impl
            )
            outcomes[i] = outcome_index(generation.tokens, spec.vocab_size)
            first[i] = 0 if generation.accepted[0] >= 1 else 1
        return {"first tokens": outcomes, "first draft stood": first}

    assert_joint_sample_fits(laws, sample, target_tv=stats.LOOP_TARGET_TV, seed=seed, call=call)
