"""`assert_*` helpers: each message says what was seen, what was expected, and the call."""

from __future__ import annotations

import numpy as np

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
