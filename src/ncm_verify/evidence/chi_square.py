"""Facts about the chi-square evidence that both the harness (which writes it) and the report (which reads it)
need, as plain Python: the report rebuilds from JSON without NumPy's statistics, SciPy or Hypothesis."""

from __future__ import annotations

from collections.abc import Sequence

LAW_DECIMALS = 6
"""Binned laws are rounded to this many decimals before `law_digest`: the largest n (4e6) resolves a bin to
about 5e-4, so laws closer than 1e-6 are one law to every test the suite can run (exp(log p) is not a new law)."""
POWER_SHAPES = ("spread", "concentrated", "smallest", "pooled", "within pooled")
"""Every deviation shape `deviate` knows: the power cases show each at its boundary."""
POWER_CASES = {
    "chain fixture, 9 outcomes": ("spread", "concentrated", "smallest"),
    "Dirichlet(0.3), 512 outcomes": POWER_SHAPES,
    "worst df-3 plan": ("spread", "smallest"),  # its two likeliest bins are the large one and a smallest
}
"""The power self-tests, by law and shape (the chain fixture and the df-3 plan pool nothing). The self-test
parametrises over these and the verdict (`report.status.calibration_part`) requires every one."""
WORST_BINS = 5
"""Bins a chi-square record keeps and a failure prints: the largest contributions to the statistic."""
SHRINK_STOPPED = "shrinking was very slow"
"""Hypothesis's stop reason when the profile's shrink budget ran out (`ExitReason.very_slow_shrinking`, which
`harness/hypothesis_internals.py` checks is this text)."""


def power_case_names() -> list[str]:
    """'<law>: <shape>' for every power case the calibration self-tests must record."""
    return [f"{law}: {shape}" for law, shapes in POWER_CASES.items() for shape in shapes]


def worst_bin_parts(expected: Sequence[float], observed: Sequence[float]) -> list[tuple[int, float]]:
    """(bin, its part of the chi-square statistic) for the `WORST_BINS` largest parts, largest first (ties in bin
    order); an empty expected bin counts 0. The one ranking for the failure message and the report."""
    parts = [(float(o) - float(e)) ** 2 / float(e) if e != 0 else 0.0 for e, o in zip(expected, observed)]
    return [(b, parts[b]) for b in sorted(range(len(parts)), key=lambda b: -parts[b])[:WORST_BINS]]
