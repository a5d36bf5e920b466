"""`assert_*` helpers: each message says what was seen, what was expected, and the call."""

from __future__ import annotations

import numpy as np

from typing import Callable

from hypothesis import note, reject

from ncm_verify import evidence, stats
from ncm_verify.tolerances import EXACT_IDENTITY, tolerance_for


def as_numpy(array) -> np.ndarray:
    """A float64/int NumPy copy of an MLX or NumPy array (evaluates MLX lazily built arrays)."""
    import mlx.core as mx

    if isinstance(array, mx.array):
        if mx.issubdtype(array.dtype, mx.floating):
            array = array.astype(mx.float32)
        return np.array(array)
    return np.asarray(array)


def assert_equal(actual, expected, *, label: str, call: str = "") -> None:
    """Exact equality of two arrays (tokens, latents, identical-shape states)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"{label}: shape {actual.shape}, expected {expected.shape}\n  call: {call}")
    mismatch = np.argwhere(actual != expected)
    evidence.record_difference(label, float(len(mismatch)), 0.0)
    if len(mismatch):
        where = tuple(mismatch[0])
        raise AssertionError(
            f"{label}: {len(mismatch)} of {actual.size} entries differ; first at {where}: "
            f"{actual[where]!r}, expected {expected[where]!r}\n  call: {call}"
        )


def assert_close(actual, expected, *, dtype, label: str, call: str = "") -> None:
    """Agreement within the tolerance table's entry for `dtype`."""
    tolerance = tolerance_for(dtype)
    actual, expected = as_numpy(actual).astype(np.float64), as_numpy(expected).astype(np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"{label}: shape {actual.shape}, expected {expected.shape}\n  call: {call}")
    difference = np.abs(actual - expected)
    allowed = tolerance.atol + tolerance.rtol * np.abs(expected)
    worst = float(difference.max(initial=0.0))
    evidence.record_difference(label, worst, tolerance.atol)
    bad = ~(difference <= allowed)
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{label}: {int(bad.sum())} entries beyond atol={tolerance.atol}, rtol={tolerance.rtol} "
            f"for {dtype}; worst |diff| {worst:.3g}; first at {where}: {actual[where]!r}, "
            f"expected {expected[where]!r}\n  call: {call}"
        )


def assert_distributions_equal(actual: dict, expected: dict, *, label: str, call: str = "") -> None:
    """Two enumerated distributions (outcome -> probability) agree within `EXACT_IDENTITY`."""
    outcomes = set(actual) | set(expected)
    worst, where = 0.0, None
    for outcome in outcomes:
        gap = abs(actual.get(outcome, 0.0) - expected.get(outcome, 0.0))
        if gap > worst:
            worst, where = gap, outcome
    evidence.record_difference(label, worst, EXACT_IDENTITY)
    if worst > EXACT_IDENTITY:
        raise AssertionError(
            f"{label}: outcome {where} has probability {actual.get(where, 0.0)!r}, "
            f"expected {expected.get(where, 0.0)!r} (|diff| {worst:.3g} > {EXACT_IDENTITY})\n  call: {call}"
        )


def assert_fits(result: stats.ChiSquareResult, *, call: str = "") -> None:
    """Record a chi-square result and fail, with the bin table, when it rejects."""
    stats.record(result)
    if result.passed:
        return
    rows = "\n".join(
        f"    bin {i:3d}: expected {e:12.1f}  observed {o:10.0f}"
        for i, (e, o) in enumerate(zip(result.expected, result.observed))
    )
    raise AssertionError(
        f"{result.name}: chi-square rejects the exact distribution: statistic {result.statistic:.2f} "
        f"on {result.df} df, p = {result.p_value:.3g} < alpha = {result.alpha:.3g} "
        f"(n = {result.n}, samples of impossible outcomes: {result.impossible_count})\n"
        f"{rows}\n  context: {result.context}\n  call: {call}"
    )


def assert_generations_equal(actual, expected, *, dtype, label: str, call: str = "") -> None:
    """Two NCM generations agree: identical tokens and latents, logits within `dtype`'s tolerance.

    A token mismatch where `expected` had a near-tie (a Gumbel margin within twice the
    tolerance of its largest logit) is ill-conditioned input: the example is rejected.
    """
    from hypothesis import note, reject

    tolerance = tolerance_for(dtype)
    logits = [as_numpy(x) for x in (*expected.latent_logits, *expected.token_logits)]
    scale = max(float(np.abs(x).max(initial=0.0)) for x in logits)
    same_draws = all(
        np.array_equal(as_numpy(a), as_numpy(b))
        for a, b in zip((*actual.tokens, actual.latents), (*expected.tokens, expected.latents))
    )
    if not same_draws and expected.margin <= 2 * (tolerance.atol + tolerance.rtol * scale):
        reject()
    for level, (a, b) in enumerate(zip(actual.tokens, expected.tokens)):
        assert_equal(a, b, label=f"{label}: level {level} tokens", call=call)
    assert_equal(actual.latents, expected.latents, label=f"{label}: latents", call=call)
    for level, (a, b) in enumerate(zip(actual.latent_logits, expected.latent_logits)):
        assert_close(a, b, dtype=dtype, label=f"{label}: latent logits", call=f"{call} level {level}")
    for level, (a, b) in enumerate(zip(actual.token_logits, expected.token_logits)):
        assert_close(a, b, dtype=dtype, label=f"{label}: token logits", call=f"{call} level {level}")


def assert_chain_outcome_well_formed(outcome, drafts, num_draft, vocab: int) -> None:
    """Accepted counts within the drafts, accepted drafts kept, one id in [0, V), then -1."""
    tokens = as_numpy(outcome.tokens).astype(np.int64)
    accepted = as_numpy(outcome.num_accepted).astype(np.int64)
    drafts, num_draft = np.asarray(drafts), np.asarray(num_draft)
    batch, width = drafts.shape[0], drafts.shape[1] + 1
    if tokens.shape != (batch, width) or accepted.shape != (batch,):
        raise AssertionError(f"outcome shapes {tokens.shape}, {accepted.shape}; expected {(batch, width)}, {(batch,)}")
    bad = np.flatnonzero((accepted < 0) | (accepted > num_draft))
    if len(bad):
        b = bad[0]
        raise AssertionError(f"row {b}: num_accepted {accepted[b]} outside [0, num_draft={num_draft[b]}]")
    position = np.arange(width)[None]
    padded = np.concatenate([drafts, np.full((batch, 1), -1)], axis=1)
    emitted = np.take_along_axis(tokens, accepted[:, None], axis=1)[:, 0]
    kept = np.where(position < accepted[:, None], tokens == padded, True).all(axis=1)
    tail = np.where(position > accepted[:, None], tokens == -1, True).all(axis=1)
    valid = kept & tail & (emitted >= 0) & (emitted < vocab)
    if not valid.all():
        b = int(np.flatnonzero(~valid)[0])
        raise AssertionError(
            f"row {b}: malformed outcome tokens {tokens[b].tolist()} with num_accepted {accepted[b]}, "
            f"drafts {drafts[b].tolist()}, num_draft {num_draft[b]}, vocabulary {vocab}"
        )


DETERMINISTIC_SAMPLES = 1024
"""Samples drawn when the exact distribution has one possible outcome: any other fails."""


def assert_sampler_matches(
    name: str, probs: np.ndarray, sample: Callable[[int], np.ndarray], *, seed: int, call: str = ""
) -> stats.ChiSquareResult | None:
    """Plan a chi-square test on the exact `probs`, assert its power, then sample and test.

    `sample(n)` returns n outcome indices into `probs`. The power assertion is
    deterministic and comes before any sample is drawn.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if np.count_nonzero(probs) < 2:
        outcomes = np.asarray(sample(DETERMINISTIC_SAMPLES))
        certain = int(np.flatnonzero(probs)[0])
        if not (outcomes == certain).all():
            wrong = outcomes[outcomes != certain]
            raise AssertionError(
                f"{name}: the only possible outcome is {certain}, but {len(wrong)} of {len(outcomes)} "
                f"samples were others (first {int(wrong[0])})\n  call: {call}"
            )
        return None
    try:
        plan = stats.make_plan(probs)
    except stats.UntestableDistribution as reason:
        note(f"{name}: {reason}")
        reject()  # excluded from the examples, never counted as passed
    shortfall = stats.power_shortfall(plan)
    if shortfall:
        raise AssertionError(f"{name}: {shortfall}")
    result = stats.chi_square_test(name, sample(plan.n), plan, seed=seed)
    assert_fits(result, call=call)
    return result


def top_two_gap(logits) -> float:
    """Smallest gap between the best and second-best logit of any row: an argmax flips only past it."""
    values = np.sort(as_numpy(logits).astype(np.float64), axis=-1)
    return float((values[..., -1] - values[..., -2]).min(initial=np.inf)) if values.shape[-1] > 1 else np.inf


def assert_decodings_equal(actual, expected, *, margin: float, scale: float, dtype, label: str, call: str = "") -> None:
    """Two greedy decodings emit identical tokens.

    A mismatch where `expected` had a near-tie (a top-two `margin` within twice
    the tolerance at logit `scale`) is ill-conditioned input: the example is rejected.
    """
    tolerance = tolerance_for(dtype)
    actual, expected = list(actual), list(expected)
    flipped = len(actual) == len(expected) and actual != expected
    if flipped and margin <= 2 * (tolerance.atol + tolerance.rtol * scale):
        reject()
    assert_equal(np.asarray(actual), np.asarray(expected), label=label, call=call)


STEP_MISMATCH_LINES = 5
"""Mismatched decisions a failure message lists (the count says how many more)."""


def assert_step_matches(comparison, *, label: str, call: str = "") -> None:
    """A kernel step agrees with its float64 oracle (`exact.StepComparison`), near-boundary decisions excused.

    Excused decisions are counted as evidence (excused vs decisions compared) and noted.
    """
    from hypothesis import event

    evidence.record_difference(f"{label}: mismatched decisions", float(len(comparison.mismatches)), 0.0)
    evidence.record_difference(
        f"{label}: excused near-boundary decisions vs decisions compared",
        float(len(comparison.excused)), float(comparison.decisions),
    )
    event(f"{label}: excused near-boundary decisions", len(comparison.excused))
    for line in comparison.excused[:STEP_MISMATCH_LINES]:
        note(f"excused (within float32 rounding of its boundary): {line}")
    if comparison.mismatches:
        shown = "\n    ".join(comparison.mismatches[:STEP_MISMATCH_LINES])
        raise AssertionError(
            f"{label}: {len(comparison.mismatches)} of {comparison.decisions} decisions differ from the float64 "
            f"step beyond float32 rounding ({len(comparison.excused)} excused near a boundary):\n    {shown}\n"
            f"  call: {call}"
        )
