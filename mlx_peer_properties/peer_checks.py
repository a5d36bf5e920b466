"""Checks the MLX peers' properties share: the first divergent token, a recording sampler, and the call-by-call
check that every emitted token is a target-sampler call's output on its exact (uncached) conditional."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import numpy as np

from ncm_verify.oracles.exact_text_drafting import sequence_law
from ncm_verify.tolerances import TOLERANCES


class Decoding(tuple):
    """A drawn decoding case (models first), printed by Hypothesis as its prompt and budget, not as models."""

    def __new__(cls, *fields):
        return super().__new__(cls, fields)

    def __repr__(self):
        return f"Decoding(prompt={self[-3]}, max_tokens={self[-2]})"


def run_variant(peer, variant: str, *args, **options) -> list[int]:
    """`peer.generate(*args, **options)` on the package's own code, or under its planted change."""
    if variant == "planted":
        with peer.planted():
            return peer.generate(*args, **options)
    return peer.generate(*args, **options)


def first_difference(a: list[int], b: list[int]) -> str:
    index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first divergent token at {index}: {a[index : index + 4]} vs {b[index : index + 4]}"


class RecordingSampler:
    """A package's own sampler, recording each call's rows (normalised to log-probabilities: a sampler is handed
    logits or log-probabilities, and draws alike from either) and the tokens it returned."""

    def __init__(self, sampler: Callable):
        self.sampler, self.calls = sampler, []

    def __call__(self, logits):
        tokens = self.sampler(logits)
        mx.eval(tokens)
        rows = logits.astype(mx.float32)
        rows = rows - mx.logsumexp(rows, axis=-1, keepdims=True)
        self.calls.append((np.array(rows).reshape(-1, rows.shape[-1]), np.array(tokens).reshape(-1)))
        return tokens

    def rows(self) -> list[tuple[np.ndarray, int]]:
        """Every (row, token) of every call, target's and drafter's alike, in call order: a drafter's row is not
        the target's conditional, so it never matches one."""
        return [(logprobs[r], int(tokens[r])) for logprobs, tokens in self.calls for r in range(logprobs.shape[0])]


def assert_each_token_is_a_sampler_output_on_its_conditional(emitted, rows, conditional: Callable, prompt) -> None:
    """Each emitted token, in order, is the output of a later sampler row handed exactly (float32 tolerance) the
    target's uncached conditional of the prompt and the tokens emitted before it."""
    tol = TOLERANCES[mx.float32]
    cursor = 0
    for position, token in enumerate(emitted):
        want = np.array(conditional(prompt + emitted[:position]))
        while cursor < len(rows) and not (
            rows[cursor][1] == token and np.allclose(rows[cursor][0], want, atol=tol.atol, rtol=tol.rtol)
        ):
            cursor += 1
        assert cursor < len(rows), (
            f"emitted {emitted}: token {position} ({token}) is no later target call's output on its conditional; "
            f"target calls' outputs {[t for _, t in rows]}"
        )
        cursor += 1


LAW_TOKENS = 2
"""The sampled law is tested on the first two tokens: the first comes from the prefill, the second from the
first speculative round (a draft accepted or the rule's correction), so the joint law sees the round."""


def first_tokens_law(probs: Callable[[list[int]], np.ndarray], prompt: list[int], length: int) -> np.ndarray:
    """The exact float64 law of the first `length` tokens after `prompt`, enumerated from `probs(tokens)` (the
    target's sampling law ``[V]`` after `tokens`, float64); entry ``np.ravel_multi_index(tokens, (V,) * length)``."""

    def rows(sequences: np.ndarray) -> np.ndarray:
        step = np.stack([np.asarray(probs([int(t) for t in sequence]), dtype=np.float64) for sequence in sequences])
        return step / step.sum(axis=1, keepdims=True)

    return sequence_law(rows, prompt, length)


def tempered(logprobs, temperature: float) -> np.ndarray:
    """softmax(log p / T) in float64: the law a plain temperature sampler draws from."""
    scaled = np.asarray(logprobs, dtype=np.float64) / temperature
    law = np.exp(scaled - scaled.max())
    return law / law.sum()


def assert_first_tokens_follow_the_law(
    law: np.ndarray, decode: Callable[[], list[int]], vocab: int, *, seed: int, call: str, length: int = LAW_TOKENS
) -> None:
    """`decode()`, run n times after one ``mx.random.seed(seed)`` (n from the plan), emits first `length` tokens
    whose law fits `law` under the statistical policy: `stats.make_plan` at `stats.LOOP_TARGET_TV`, its power
    checked before any draw. Examples whose law needs more than `stats.LOOP_SMOKE_MAX_SAMPLES` runs (a nearly
    certain first token) are rejected, never counted as passed."""
    from hypothesis import assume

    from ncm_verify.harness import stats
    from ncm_verify.harness.checks import assert_joint_sample_fits

    assume(stats.loop_smoke_sized({"first tokens": law}))

    def sample(n: int) -> dict[str, np.ndarray]:
        mx.random.seed(seed)
        outcomes = [np.ravel_multi_index(decode()[:length], (vocab,) * length) for _ in range(n)]
        return {"first tokens": np.array(outcomes)}

    assert_joint_sample_fits({"first tokens": law}, sample, target_tv=stats.LOOP_TARGET_TV, seed=seed, call=call)


def assert_cache_attends_as_uncached(target, cache, tokens: list[int], held: int, tolerance, label: str) -> None:
    """A copy of `cache`, which claims to hold ``tokens[:held]``, fed ``tokens[held]`` gives the next-token
    log-probabilities one uncached forward pass over ``tokens[:held + 1]`` gives (within `tolerance`)."""
    import copy

    probed = np.array(_log_softmax(target(mx.array([[tokens[held]]]), cache=copy.deepcopy(cache))[0, -1]))
    want = np.array(_log_softmax(target(mx.array([tokens[: held + 1]]))[0, -1]))
    error = float(np.abs(probed - want).max())
    assert np.allclose(probed, want, atol=tolerance.atol, rtol=tolerance.rtol), (
        f"{label}: the cache claims {held} tokens; fed token {tokens[held]} it is off one uncached pass over "
        f"{tokens[: held + 1]} by {error:.3g} nats"
    )


def _log_softmax(logits):
    logits = logits.astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def assert_greedy_equals_plain(spec: list[int], plain: list[int], conditional: Callable, prompt, label: str) -> None:
    """Greedy speculative tokens `spec` equal plain decoding's `plain` token for token, and each is the argmax of
    one uncached forward pass (`conditional(tokens)`: the target's row after `tokens`)."""
    assert spec == plain, f"{label}: speculative {spec} != plain {plain}: {first_difference(spec, plain)}"
    for position, token in enumerate(spec):
        want = int(np.asarray(conditional(prompt + spec[:position])).argmax())
        assert token == want, f"{label}: token {position}: emitted {token}, the uncached argmax is {want}"
