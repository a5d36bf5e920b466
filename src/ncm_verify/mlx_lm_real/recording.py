"""What a decoding loop hands its sampler, call by call, and the exact check of a sampling loop built on it.

A loop that samples is exact iff every token it emits is drawn, by its rule,
from the target's exact conditional on the prompt and the tokens emitted
before it. `CallLog` wraps the models (to know which one a sampler call
follows) and the sampler (mlx-lm's closure, or the exact verifier's
`DistributionSampler`, whose `probs` and `key` it records too);
`check_sampler_calls` replays the loop's rule on what was recorded and compares
every handed row with one uncached forward pass of the target.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np

from ncm_verify.harness.checks import as_numpy, assert_close, assert_equal
from ncm_verify.mlx_lm_real.exact_verifier import DistributionSampler
from ncm_verify.mlx_lm_real.models import logprobs_at_every_position
from ncm_verify.reference import speculative
from ncm_verify.tolerances import Tolerance


@dataclasses.dataclass
class SamplerCall:
    """One call into a sampler: what it was handed (``[rows, V]`` log-probabilities) and what it returned."""

    role: str  # the model whose forward pass came last: "target" or "draft"
    method: str  # "sample" (tokens returned) or "probs" (the distribution returned)
    logprobs: mx.array
    output: mx.array
    forward: mx.array  # the token ids of that forward pass; its last rows-1 are the drafts a target block scores
    key: mx.array | None = None  # the verification key the sampler drew for this block (the exact verifier)


class CallLog:
    """The forward passes and sampler calls of one decoding, in order."""

    def __init__(self):
        self.role, self.forward, self.forwards, self.calls = None, None, [], []

    def model(self, model, role: str) -> RecordingModel:
        return RecordingModel(model, role, self)

    def sampler(self, sampler):
        """`sampler` recorded: a `DistributionSampler` stays one (the exact verifier requires it)."""
        if isinstance(sampler, DistributionSampler):
            return RecordingDistributionSampler(sampler, self)
        return RecordingSampler(sampler, self)

    def record(self, method: str, logprobs: mx.array, output: mx.array) -> mx.array:
        if self.role is None:
            raise AssertionError(f"the sampler was called ({method}) before any model forward pass")
        self.calls.append(SamplerCall(self.role, method, logprobs, output, self.forward))
        return output

    def record_key(self, key: mx.array) -> mx.array:
        targets = [c for c in self.calls if c.role == "target"]
        if not targets or targets[-1].key is not None:
            raise AssertionError("a verification key was drawn without a target block of its own before it")
        targets[-1].key = key
        return key


class RecordingModel:
    """A model that logs its forward passes under `role`; everything else is the wrapped model's."""

    def __init__(self, model, role: str, log: CallLog):
        self.model, self.role, self.log = model, role, log

    def __call__(self, inputs, *args, **kwargs):
        self.log.role, self.log.forward = self.role, inputs
        self.log.forwards.append((self.role, inputs))
        return self.model(inputs, *args, **kwargs)

    def __getattr__(self, name):
        if name == "model":  # not yet set: no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.model, name)


class RecordingSampler:
    """A sampler callable (mlx-lm's `make_sampler` closure) that logs each call."""

    def __init__(self, sampler, log: CallLog):
        self.sampler, self.log = sampler, log

    def __call__(self, logprobs: mx.array) -> mx.array:
        return self.log.record("sample", logprobs, self.sampler(logprobs))


class RecordingDistributionSampler(DistributionSampler):
    """A `DistributionSampler` with `sampler`'s settings that logs draws, distributions and keys."""

    def __init__(self, sampler: DistributionSampler, log: CallLog):
        super().__init__(sampler.temp, sampler.top_p, sampler.top_k)
        self.log = log

    def __call__(self, logprobs: mx.array) -> mx.array:
        return self.log.record("sample", logprobs, super().__call__(logprobs))

    def probs(self, logprobs: mx.array) -> mx.array:
        return self.log.record("probs", logprobs, super().probs(logprobs))

    def key(self) -> mx.array:
        return self.log.record_key(super().key())


def rows(array: mx.array, vocab: int) -> np.ndarray:
    return as_numpy(array).astype(np.float64).reshape(-1, vocab)


def block_drafts(call: SamplerCall, vocab: int) -> list[int]:
    """The drafts a target block scores: the last ``rows - 1`` tokens of its forward pass."""
    count = rows(call.logprobs, vocab).shape[0] - 1
    tokens = as_numpy(call.forward).reshape(-1).tolist()
    return [int(t) for t in tokens[len(tokens) - count :]] if count else []


def sampler_match(call: SamplerCall, drafts: list[int], earlier: list[SamplerCall], vocab: int):
    """mlx-lm's rule: a draft stands iff it equals the target sampler's own output at its row; the first
    that does not is replaced by that output, and after all stand the last row's output follows."""
    if call.method != "sample":
        raise AssertionError(f"mlx-lm's rule samples the target's block; the sampler was asked for {call.method}")
    sampled = as_numpy(call.output).reshape(-1).astype(int).tolist()
    accepted = 0
    while accepted < len(drafts) and sampled[accepted] == drafts[accepted]:
        accepted += 1
    return accepted, sampled[: accepted + 1]


def chain(call: SamplerCall, drafts: list[int], earlier: list[SamplerCall], vocab: int):
    """The exact verifier's rule: `verify_chain` on the target's p, the q the drafts were drawn from, the
    drafts and the key the sampler drew for this block."""
    q = [c for c in earlier if c.role == "draft" and c.method == "probs"][-len(drafts) :] if drafts else []
    if call.method != "probs" or call.key is None or len(q) != len(drafts):
        raise AssertionError(
            f"the chain rule needs p, a key and one q per draft: got {call.method}, "
            f"key {'drawn' if call.key is not None else 'none'}, {len(q)} q rows for {len(drafts)} drafts"
        )
    q_rows = mx.concatenate([c.output.reshape(-1, vocab) for c in q]) if q else mx.zeros((0, vocab))
    outcome = speculative.verify_chain(
        call.output.reshape(1, -1, vocab), q_rows[None], mx.array([drafts], dtype=mx.int32), key=call.key
    )
    accepted = int(outcome.num_accepted[0].item())
    return accepted, outcome.tokens[0, : accepted + 1].tolist()


RULES = {"sum p*q": sampler_match, "sum min(p, q)": chain}
"""A decoder's `ACCEPTANCE_RULE` -> the rule that replays its verification from its sampler's record."""


def replay(log: CallLog, rule, vocab: int) -> list[tuple[SamplerCall, int, list[int]]]:
    """Each target block, with the drafts the rule accepts and the tokens it emits."""
    rounds, since = [], []
    for call in log.calls:
        if call.role == "target":
            drafts = block_drafts(call, vocab)
            accepted, tokens = rule(call, drafts, since, vocab)
            rounds.append((call, accepted, tokens))
            since = []
        else:
            since.append(call)
    return rounds


def check_sampler_calls(
    log: CallLog,
    steps: list[tuple],
    target,
    prompt: list[int],
    rule,
    *,
    lookahead: int,
    label: str,
    call: str,
    tolerance: Tolerance | None = None,
) -> list[tuple[SamplerCall, int, list[int]]]:
    """Every emitted token is the rule's output on the target's exact conditional; returns the rounds.

    `steps` are the loop's yields ``(token, logprobs[, from_draft])``. Each target
    block's rows up to its first rejection, and each yielded log-probability row,
    must match an uncached forward pass of `target` over the prompt and the tokens
    emitted before them; the emitted tokens and flags must be the replayed ones.
    `lookahead` target blocks may follow the last emitted token (mlx-lm's
    `generate_step` samples one step ahead). `tolerance`: a named override of the float32 entry.
    """
    vocab = target.args.vocab_size
    rounds = replay(log, rule, vocab)
    replayed = [t for _, _, tokens in rounds for t in tokens]
    flags = [i < accepted for _, accepted, tokens in rounds for i in range(len(tokens))]
    emitted = [int(step[0]) for step in steps]
    if not rounds:
        raise AssertionError(f"{label}: no target sampler call for {len(emitted)} emitted tokens\n  call: {call}")
    # every prefix's conditional at once: an uncached causal pass scores each position on what precedes it
    sequence = mx.array([prompt + replayed[:-1]], dtype=mx.int32)
    exact = logprobs_at_every_position(target, sequence)[0, len(prompt) - 1 :]
    assert_equal(
        np.asarray(emitted),
        np.asarray(replayed[: len(emitted)]),
        label=f"{label}: emitted tokens vs the rule replayed on the sampler's record",
        call=f"{call}  # {len(rounds)} target sampler calls",
    )
    if len(steps) and len(steps[0]) > 2:
        assert_equal(
            np.asarray([bool(step[2]) for step in steps]),
            np.asarray(flags[: len(emitted)]),
            label=f"{label}: from_draft flags vs the drafts the rule accepts",
            call=call,
        )
    ends = np.cumsum([len(tokens) for _, _, tokens in rounds])
    surplus = len(rounds) - int(np.searchsorted(ends, len(emitted))) - 1
    if len(emitted) > ends[-1] or surplus > lookahead:
        raise AssertionError(
            f"{label}: {len(rounds)} target sampler calls replay {int(ends[-1])} tokens for {len(emitted)} "
            f"emitted ({surplus} calls after the last, {lookahead} allowed)\n  call: {call}"
        )
    position = 0
    for number, (block, accepted, tokens) in enumerate(rounds):
        handed = block.logprobs.reshape(-1, vocab)[: accepted + 1]
        assert_close(
            handed,
            exact[position : position + accepted + 1],
            dtype=mx.float32,
            tolerance=tolerance,
            label=f"{label}: rows handed to the target sampler vs the target's uncached conditional of what precedes",
            call=f"{call}  # target sampler call {number}, rows 0..{accepted}, after {position} emitted tokens",
        )
        position += len(tokens)
    if emitted:
        assert_close(
            mx.stack([mx.array(step[1]).reshape(-1) for step in steps]),
            exact[: len(emitted)],
            dtype=mx.float32,
            tolerance=tolerance,
            label=f"{label}: yielded log-probabilities vs the target's uncached conditionals",
            call=call,
        )
    return rounds


def check_speculative_sampler_calls(
    decoder, target, draft, prompt: list[int], sampler, *, label: str, call: str, tolerance=None, **options
) -> list[tuple[SamplerCall, int, list[int]]]:
    """`decoder`'s speculative loop run with every model and sampler call recorded, then `check_sampler_calls`
    under the decoder's own acceptance rule; `options` go to `speculative_generate_step`. Returns the rounds."""
    log = CallLog()
    steps = list(
        decoder.speculative_generate_step(
            mx.array(prompt),
            log.model(target, "target"),
            log.model(draft, "draft"),
            sampler=log.sampler(sampler),
            **options,
        )
    )
    # a module without ACCEPTANCE_RULE verifies through the protocol's verify_chain: the chain rule
    rule = RULES[getattr(decoder, "ACCEPTANCE_RULE", "sum min(p, q)")]
    return check_sampler_calls(
        log, steps, target, prompt, rule, lookahead=0, label=label, call=call, tolerance=tolerance
    )


def a_target_call_followed_a_rejection(rounds: list[tuple[SamplerCall, int, list[int]]], vocab: int) -> bool:
    """Whether some round before the last rejected a draft (the rounds a rollback bug shows in)."""
    return any(accepted < len(block_drafts(block, vocab)) for block, accepted, _ in rounds[:-1])
