"""transformers' assisted generation judged end to end, like mlx-lm's loop in properties/test_mlx_lm_loop.py.

Each property runs transformers' own `generate(..., assistant_model=draft)` on
tiny seeded `LlamaForCausalLM` models, and the exact properties on a sliding-window
`MistralForCausalLM` too (`peers.transformers_assisted`), with its
draft schedule drawn: transformers' default (20 drafts, constant, confidence stop
0.4), or a constant or heuristic schedule from 1-4 drafts, with or without the
confidence stop. `verifier` names the verification step: transformers' own, or
a planted wrong one (`PLANTED`, used by tests/test_transformers_assisted_planted.py).
Sampled laws are smoke tests at `stats.LOOP_TARGET_TV` (n = 1024 sequences,
about 5 ms each on one thread, transformers' own overhead; the whole file took 3.7 minutes
under `ci` on the shared 2-core machine); the exact check of every verification step's
inputs is what sees small errors.
"""

from __future__ import annotations

import dataclasses
import functools

import mlx.core as mx
import numpy as np
import pytest
import torch
from hypothesis import assume, event, given, note, settings
from hypothesis import strategies as st

from ncm_verify.harness import stats, strategies
from ncm_verify.harness.checks import assert_close, assert_decodings_equal, assert_equal, assert_joint_sample_fits
from ncm_verify.mlx_lm_real.models import outcome_index
from ncm_verify.peers import transformers_assisted as peer
from ncm_verify.report.status import MIN_DISTINCT_EXAMPLES

VERIFIERS = ("transformers",)
"""The verification steps the properties judge here: transformers' own (planted ones are `peer.PLANTED`)."""
LAW_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""The distinct laws a claim's property must show, two more as derandomized examples can repeat one."""
DRAFTS = {
    "same weights, head x2 (sharper)": lambda spec: dataclasses.replace(spec, logit_scale=2.0 * spec.logit_scale),
    "same weights, head x0.3 (flatter)": lambda spec: dataclasses.replace(spec, logit_scale=0.3 * spec.logit_scale),
    "other weights": lambda spec: dataclasses.replace(spec, seed=spec.seed + 1),
    "other weights, head x3": lambda spec: dataclasses.replace(spec, seed=spec.seed + 1, logit_scale=3.0),
}
"""Draft relations: first drafts stand at about 0.7-0.9 (sharper), 0.6-0.9 (flatter), 0.4-0.8 (other weights),
0.1-0.6 (other weights, head x3; median 0.3)."""
MIN_REJECTION = 0.4
"""The law after a rejection is sampled only where a first draft is rejected at least this often (cost n / rate)."""
MAX_TOKENS_JUDGED = 2
"""Tokens whose joint law is sampled: at most 36 outcomes, so that n = 1024 leaves a law some unpooled bins."""


def crowded(laws: dict[str, np.ndarray]) -> str | None:
    """Why a law's plan at `stats.LOOP_TARGET_TV` cannot show its power, or None.

    The power check moves the deviation into the pooled (or the smallest) bin from the
    other bins; where those hold less than the deviation, at n = 1024 most of the law
    is pooled into one bin, which the test cannot look inside: such examples are filtered.
    """
    deviation = stats.LOOP_TARGET_TV / np.sqrt(stats.POWER_SAFETY)
    for name, probs in laws.items():
        if np.count_nonzero(probs) < 2:
            continue
        try:
            plan = stats.make_plan(probs, target_tv=stats.LOOP_TARGET_TV)
        except stats.UntestableDistribution as reason:
            return f"{name}: {reason}"
        into = [plan.bin_probs.min()] + ([plan.bin_probs[plan.pooled_bin]] if plan.pooled_bin is not None else [])
        if 1.0 - max(into) < deviation:
            return f"{name}: {max(into):.3f} of the law in one bin at n = {plan.n}, less than {deviation:.3f} outside"
    return None


@functools.lru_cache(maxsize=64)
def model(spec: peer.TinySpec, dtype: torch.dtype = torch.float32):
    """Models are pure functions of their spec; the float64 twin computes exact laws."""
    return peer.make_model(spec, dtype)


def tiny_specs(kind: str):
    return st.builds(
        peer.TinySpec,
        kind=st.just(kind),
        vocab_size=st.integers(4, 6),
        seed=st.integers(0, 2**16),
        num_layers=st.integers(1, 2),
        hidden_size=st.sampled_from([16, 32]),
        window=st.integers(2, 5),
    )


llama_specs = tiny_specs("llama")
CASES = [pytest.param(v, kind, id=f"{v}-{kind}") for v in VERIFIERS for kind in peer.KINDS]
"""(verifier, model kind) of the exact properties; the sampled ones run on the llama alone (their cost)."""
assistances = st.one_of(
    st.just(peer.Assistance()),
    st.builds(
        peer.Assistance,
        schedule=st.sampled_from(peer.SCHEDULES),
        num_assistant_tokens=st.integers(1, 4),
        confidence_threshold=st.sampled_from([peer.DEFAULT_CONFIDENCE, 0.0]),
    ),
)


sampled_specs = llama_specs.map(lambda spec: dataclasses.replace(spec, num_layers=1, hidden_size=16))
"""Specs of the sampled properties: one layer of 16, the cheapest (5.5 ms an assisted call, 8 ms at 2 x 32)."""


def draw_pair(data, drafts=tuple(DRAFTS), specs=llama_specs):
    spec = data.draw(specs, label="target")
    relation = data.draw(st.sampled_from(drafts), label="draft relation")
    return spec, DRAFTS[relation](spec)


def budget_edges(assistance: peer.Assistance) -> list[int]:
    """max_new_tokens at the edges: 1 (no room to draft), 2 (one draft), the draft count and one past it."""
    return sorted({1, 2, assistance.num_assistant_tokens, assistance.num_assistant_tokens + 1, 3})


def describe(spec, draft_spec, prompt, max_new_tokens, assistance, seed, *, do_sample=True) -> str:
    """A reproduction: the models, the assistant's settings, the seed and transformers' call."""
    sampling = f"do_sample=True, {', '.join(f'{k}={v}' for k, v in peer.PROCESSING_OFF.items())}"
    return (
        f"target, draft = make_model({spec}), make_model({draft_spec}); {assistance}.configure(draft); "
        f"torch.manual_seed({seed}); target.generate(torch.tensor([{prompt}]), assistant_model=draft, "
        f"max_new_tokens={max_new_tokens}, {sampling if do_sample else 'do_sample=False'})"
    )


class AssistedSampler:
    """Sequences of one assisted configuration, each with its first verification step's record."""

    def __init__(self, verifier: str, spec, draft_spec, prompt, max_new_tokens, assistance, seed, call):
        self.target, self.draft = model(spec), model(draft_spec)
        self.prompt, self.max_new_tokens, self.assistance, self.seed = prompt, max_new_tokens, assistance, seed
        self.recorder = peer.StepRecorder(verifier)
        self.call = call

    def draws(self, count: int):
        """`count` sequences from one seeding (the heuristic schedule's count carries from call to call)."""
        self.assistance.configure(self.draft)
        torch.manual_seed(self.seed)
        with self.recorder.recording():
            for i in range(count):
                before = len(self.recorder.rounds)
                tokens = peer.generate_tokens(
                    self.target, self.prompt, self.max_new_tokens, do_sample=True, draft=self.draft
                )
                if len(tokens) != self.max_new_tokens:
                    raise AssertionError(
                        f"sequence {i}: {len(tokens)} new tokens for max_new_tokens={self.max_new_tokens}: "
                        f"{tokens}\n  call: {self.call}"
                    )
                first = self.recorder.rounds[before] if len(self.recorder.rounds) > before else None
                yield tokens, first

    def first_round(self, first: peer.Round | None) -> peer.Round:
        if first is None or first.start != len(self.prompt):
            raise AssertionError(
                f"with room for {self.max_new_tokens} tokens, the first round handed no drafts to the verification "
                f"step\n  call: {self.call}"
            )
        return first


LAW = "test_assisted_sampling_emits_the_target_law_and_first_drafts_stand_at_the_optimal_rules_rate"


@pytest.mark.claim("C5")
@pytest.mark.statistical(tests=3)
@pytest.mark.parametrize("verifier", VERIFIERS)
@settings(max_examples=LAW_EXAMPLES)
@given(data=st.data())
def test_assisted_sampling_emits_the_target_law_and_first_drafts_stand_at_the_optimal_rules_rate(verifier, data):
    """The first L new tokens (L = min(max_new_tokens, 2)) follow the target's exact law; the first draft stands at
    sum min(p, q); and (first draft stood or not, first token) follows min(p, q) and p - min(p, q).
    max_new_tokens is drawn at the budget edges (2, 3, the draft
    count and one past it), so the law is judged at the edge too.

    Each example draws n = 1024 sequences in one seeding (6-12 s here): each plan detects a total-variation
    deviation of `stats.LOOP_TARGET_TV` (0.2) with power 0.99 on its binned law (the binary acceptance law, about
    0.1 in its rate). It sees a wrong q handed to the verifier or every draft standing, not small biases.
    Examples whose binned law is mostly one bin are filtered (`crowded`). Binning pools rare outcomes: under `ci`
    the first-tokens laws pooled up to 78% of their mass (raw-law detectable TV 0.4-0.9), the acceptance law none.
    """
    spec, draft_spec = draw_pair(data, specs=sampled_specs)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 4), label="prompt")
    assistance = data.draw(assistances, label="assistance")
    # a budget of 1 leaves no room to draft (the target samples alone): the budget property covers it
    edges = [edge for edge in budget_edges(assistance) if edge > 1]
    max_new_tokens = data.draw(st.sampled_from(edges), label="max_new_tokens")
    seed = data.draw(strategies.seeds, label="torch seed")
    length = min(max_new_tokens, MAX_TOKENS_JUDGED)
    laws = peer.first_round_laws(model(spec, torch.float64), model(draft_spec, torch.float64), prompt, length)
    call = describe(spec, draft_spec, prompt, max_new_tokens, assistance, seed)
    call += f" x n  # first {length} tokens; acceptance sum min(p, q) = {laws.stood[0]:.4f}"
    note(call)
    sampler = AssistedSampler(verifier, spec, draft_spec, prompt, max_new_tokens, assistance, seed, call)
    vocab = spec.vocab_size
    expected = {
        "first tokens": laws.tokens,
        "first draft stood": laws.stood,
        "first draft stood or not, and the first token": laws.joint,
    }
    event(f"max_new_tokens {'at' if max_new_tokens == assistance.num_assistant_tokens else 'not at'} the draft count")
    reason = crowded(expected)
    if reason:
        note(f"filtered: {reason}")
    assume(reason is None)

    def sample(n: int) -> dict[str, np.ndarray]:
        outcomes = {name: np.empty(n, dtype=np.int64) for name in expected}
        for i, (tokens, first) in enumerate(sampler.draws(n)):
            outcomes["first tokens"][i] = outcome_index(tokens[:length], vocab)
            rejected = int(sampler.first_round(first).accepted == 0)
            outcomes["first draft stood"][i] = rejected
            outcomes["first draft stood or not, and the first token"][i] = rejected * vocab + tokens[0]
        return outcomes

    assert_joint_sample_fits(expected, sample, target_tv=stats.LOOP_TARGET_TV, seed=seed, call=call)


AFTER_REJECTION = "test_after_a_rejected_first_draft_the_tokens_follow_the_residual_then_the_target"


@pytest.mark.claim("C5")
@pytest.mark.statistical(tests=1)
@pytest.mark.parametrize("verifier", VERIFIERS)
@settings(max_examples=min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES))
@given(data=st.data())
def test_after_a_rejected_first_draft_the_tokens_follow_the_residual_then_the_target(verifier, data):
    """Given that the first round's first draft is rejected, the first token follows normalised max(p - q, 0)
    and the next ones the target's conditional: prefill, the correction and the caches cropped after a rejection,
    judged by their law.

    Drafts have other weights and a head scaled x3 (first drafts rejected at about 0.4-0.9). Sequences are drawn
    until n = 1024 have a rejected first draft (a stopping rule on the rejection alone, so those n are independent
    draws of the conditional law): 1024 / rejection rate calls, about 1500 (8 s here) at the median; examples
    rejecting less often than `MIN_REJECTION` are filtered. The plan detects a total-variation deviation of
    `stats.LOOP_TARGET_TV` (0.2) with power 0.99 on the binned conditional law.
    """
    spec, draft_spec = draw_pair(data, drafts=("other weights, head x3",), specs=sampled_specs)
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 4), label="prompt")
    assistance = data.draw(assistances, label="assistance")
    max_new_tokens = data.draw(st.integers(2, 3), label="max_new_tokens")
    seed = data.draw(strategies.seeds, label="torch seed")
    length = MAX_TOKENS_JUDGED
    laws = peer.first_round_laws(model(spec, torch.float64), model(draft_spec, torch.float64), prompt, length)
    rejection = float(laws.stood[1])
    call = describe(spec, draft_spec, prompt, max_new_tokens, assistance, seed)
    call += f" until n have a rejected first draft  # rejected at 1 - sum min(p, q) = {rejection:.4f}"
    note(call)
    assume(rejection >= MIN_REJECTION)
    expected = {"tokens after a rejected first draft": laws.after_rejection}
    reason = crowded(expected)
    if reason:
        note(f"filtered: {reason}")
    assume(reason is None)
    sampler = AssistedSampler(verifier, spec, draft_spec, prompt, max_new_tokens, assistance, seed, call)

    def sample(n: int) -> dict[str, np.ndarray]:
        kept: list[int] = []
        for tokens, first in sampler.draws(int(np.ceil(4 * n / rejection))):
            if sampler.first_round(first).accepted == 0:
                kept.append(outcome_index(tokens[:length], spec.vocab_size))
                if len(kept) == n:
                    return {"tokens after a rejected first draft": np.asarray(kept)}
        raise AssertionError(
            f"{len(kept)} rejected first drafts in {int(np.ceil(4 * n / rejection))} sequences, expected about "
            f"{4 * n}: first drafts stand far more often than min(p, q) allows\n  call: {call}"
        )

    assert_joint_sample_fits(
        expected,
        sample,
        target_tv=stats.LOOP_TARGET_TV,
        seed=seed,
        call=call,
    )


GREEDY = "test_greedy_assisted_generation_emits_the_tokens_of_plain_greedy_generation"


@pytest.mark.claim("C7")
@pytest.mark.parametrize(("verifier", "kind"), CASES)
@given(data=st.data())
def test_greedy_assisted_generation_emits_the_tokens_of_plain_greedy_generation(verifier, kind, data):
    spec, draft_spec = draw_pair(data, specs=tiny_specs(kind))
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 8), label="prompt")
    assistance = data.draw(assistances, label="assistance")
    max_new_tokens = data.draw(st.integers(1, 12), label="max_new_tokens")
    call = describe(spec, draft_spec, prompt, max_new_tokens, assistance, 0, do_sample=False)
    call += " vs target.generate(..., do_sample=False) without the assistant"
    note(call)
    target, draft = model(spec), model(draft_spec)
    plain = peer.generate_tokens(target, prompt, max_new_tokens, do_sample=False)
    assistance.configure(draft)
    with peer.StepRecorder(verifier).recording():
        assisted = peer.generate_tokens(target, prompt, max_new_tokens, do_sample=False, draft=draft)
    logits = peer.greedy_logits(target, prompt, max_new_tokens)
    top = np.sort(logits, axis=-1)
    assert_decodings_equal(
        assisted,
        plain,
        margin=float((top[:, -1] - top[:, -2]).min()),
        scale=float(np.abs(logits).max()),
        dtype=mx.float32,
        label="greedy assisted tokens vs plain greedy generate's",
        call=call,
    )


BUDGET = "test_assisted_generation_emits_exactly_max_new_tokens_at_every_budget_edge"
BUDGET_SEEDS = 8
"""Sampled calls per example: a surplus token or a short sequence shows on most seeds, and each costs about 5 ms."""


@pytest.mark.claim("C8")
@pytest.mark.parametrize(("verifier", "kind"), CASES)
@given(data=st.data())
def test_assisted_generation_emits_exactly_max_new_tokens_at_every_budget_edge(verifier, kind, data):
    spec, draft_spec = draw_pair(data, specs=tiny_specs(kind))
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    assistance = data.draw(assistances, label="assistance")
    max_new_tokens = data.draw(st.sampled_from(budget_edges(assistance)), label="max_new_tokens")
    seed = data.draw(strategies.seeds, label="torch seed")
    do_sample = data.draw(st.booleans(), label="do_sample")
    call = describe(spec, draft_spec, prompt, max_new_tokens, assistance, seed, do_sample=do_sample)
    note(call)
    target, draft = model(spec), model(draft_spec)
    assistance.configure(draft)
    torch.manual_seed(seed)
    with peer.StepRecorder(verifier).recording():
        lengths = [
            len(peer.generate_tokens(target, prompt, max_new_tokens, do_sample=do_sample, draft=draft))
            for _ in range(BUDGET_SEEDS if do_sample else 1)
        ]
    assert_equal(
        np.asarray(lengths),
        np.full(len(lengths), max_new_tokens),
        label=f"new tokens per call, {len(lengths)} calls in one seeding, vs max_new_tokens",
        call=call,
    )


EXACT = "test_every_verification_step_is_handed_the_exact_conditionals_of_the_tokens_before_it"


@pytest.mark.claim("C5", "C8")
@pytest.mark.parametrize(("verifier", "kind"), CASES)
@given(data=st.data())
def test_every_verification_step_is_handed_the_exact_conditionals_of_the_tokens_before_it(verifier, kind, data):
    """The loop is exact iff each verification step is handed, as p, the target's conditionals after the tokens
    emitted so far and its drafts, and, as q, the assistant's conditionals its drafts were drawn from: checked
    call by call against one uncached forward pass of each model (prefill, the caches cropped after a rejection,
    the schedule's changing draft count), with the step's emitted tokens found in the output where they belong.
    """
    spec, draft_spec = draw_pair(data, specs=tiny_specs(kind))
    prompt = data.draw(strategies.token_lists(spec.vocab_size, 1, 6), label="prompt")
    assistance = data.draw(assistances, label="assistance")
    max_new_tokens = data.draw(st.integers(1, 12), label="max_new_tokens")
    seed = data.draw(strategies.seeds, label="torch seed")
    call = describe(spec, draft_spec, prompt, max_new_tokens, assistance, seed)
    note(call)
    target, draft = model(spec), model(draft_spec)
    assistance.configure(draft)
    torch.manual_seed(seed)
    recorder = peer.StepRecorder(verifier)
    with recorder.recording():
        emitted = peer.generate_tokens(target, prompt, max_new_tokens, do_sample=True, draft=draft)
    sequence = prompt + emitted
    rejected_before = False
    for number, step in enumerate(recorder.rounds):
        start, k = step.start, step.drafts
        where = f"{call}  # verification step {number}: {k} drafts after {start - len(prompt)} new tokens"
        assert_equal(
            step.candidate_input_ids[0, :start].numpy(),
            np.asarray(sequence[:start]),
            label="tokens before the drafts vs the prompt and the tokens emitted so far",
            call=where,
        )
        candidates = step.candidate_input_ids[0].tolist()
        p_rows, q_rows = peer.uncached_logits(target, candidates), peer.uncached_logits(draft, candidates)
        assert_close(
            step.new_logits[0].log_softmax(-1).numpy(),
            p_rows[start - 1 :].log_softmax(-1).numpy(),
            dtype=mx.float32,
            label="p handed to the step vs the target's uncached conditionals"
            + (" (after a rejection)" if rejected_before else ""),
            call=where,
        )
        assert_close(
            step.candidate_logits[0].log_softmax(-1).numpy(),
            q_rows[start - 1 : -1].log_softmax(-1).numpy(),
            dtype=mx.float32,
            label="q handed to the step vs the assistant's uncached conditionals",
            call=where,
        )
        kept = sequence[start : start + len(step.tokens)]
        assert_equal(
            np.asarray(kept),
            np.asarray(step.tokens[: len(kept)]),
            label="emitted tokens at this step's place vs the tokens the step returned",
            call=where,
        )
        rejected_before |= step.accepted < k
    event("a step after a rejection" if rejected_before and len(recorder.rounds) > 1 else "no step after a rejection")
