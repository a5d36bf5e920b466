"""The statistical policy, stated once: budget, alpha, pooling, power, records.

Every sampling property runs chi-square goodness-of-fit tests through this
module. A whole `make verify` run spends at most ``FAMILY_BUDGET`` on false
failures, split (Sidak) over the tests it plans to run; each test's nominal
alpha is half its share because the chi-square p-value is anti-conservative
near 1e-6 even with pooled bins. Power is asserted before any sample is drawn.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

FAMILY_BUDGET = 1e-3
"""Largest probability that a correct implementation fails a `make verify` run."""
SELFTEST_BUDGET = 2e-4
"""Part of that budget spent by the calibration self-tests `make verify` also runs."""
ALPHA_FRACTION = 0.5
"""Nominal alpha as a fraction of the per-test share (p-values are anti-conservative)."""
MIN_EXPECTED = 20
"""Bins expected to hold fewer samples than this are pooled into a remainder bin."""
POWER = 0.99
"""Each test detects a deviation of its stated size with at least this power."""
POWER_SAFETY = 1.75
"""The noncentral chi-square overstates power for deviations on few tokens."""
TARGET_TV = 0.02
"""Total-variation deviation every distribution property must detect."""
LOOP_TARGET_TV = 0.1
"""Total-variation deviation the laws of whole decoding loops must detect: a loop (mlx-lm's, batch size 1)
draws one sequence per Python call, so 0.02 would need ~10^5 calls per test."""
MAX_SAMPLES = 4_000_000
RECORDS_FILE = "stats.jsonl"


@dataclasses.dataclass(frozen=True)
class Policy:
    """How the family-wise budget is split over the tests of one run."""

    planned_tests: int = 1
    family_budget: float = FAMILY_BUDGET
    selftest_budget: float = SELFTEST_BUDGET

    @property
    def property_budget(self) -> float:
        """What the chi-square properties may spend: the family budget less the self-tests'."""
        return self.family_budget - self.selftest_budget

    @property
    def per_test_share(self) -> float:
        return 1.0 - (1.0 - self.property_budget) ** (1.0 / max(self.planned_tests, 1))

    @property
    def alpha(self) -> float:
        return ALPHA_FRACTION * self.per_test_share

    def describe(self) -> dict:
        return {
            "family_budget": self.family_budget,
            "selftest_budget": self.selftest_budget,
            "property_budget": self.property_budget,
            "planned_tests": self.planned_tests,
            "per_test_share": self.per_test_share,
            "alpha": self.alpha,
            "alpha_fraction": ALPHA_FRACTION,
            "min_expected": MIN_EXPECTED,
            "power": POWER,
            "power_safety": POWER_SAFETY,
            "target_tv": TARGET_TV,
        }


_policy = Policy()


def set_policy(policy: Policy) -> None:
    """Install the policy of this run (the pytest plugin does, after collection)."""
    global _policy
    _policy = policy


def current_policy() -> Policy:
    return _policy


@lru_cache(maxsize=4096)
def required_noncentrality(df: int, alpha: float, power: float = POWER) -> float:
    """Smallest noncentrality at which a chi-square test at `alpha` has `power`."""
    critical = scipy_stats.chi2.isf(alpha, df)
    return optimize.brentq(
        lambda lam: scipy_stats.ncx2.sf(critical, df, lam) - power, 1e-9, 1e7, xtol=1e-9
    )


def power_at(n: int, df: int, alpha: float, tv: float) -> float:
    """Power of the test against a deviation of total variation `tv`, discounted by `POWER_SAFETY`.

    Computed from the noncentral chi-square directly, independently of `make_plan`.
    """
    critical = scipy_stats.chi2.isf(alpha, df)
    return float(scipy_stats.ncx2.sf(critical, df, 4.0 * n * tv**2 / POWER_SAFETY))


def min_detectable_tv(n: int, df: int, alpha: float) -> float:
    """Smallest total-variation deviation detected with power `POWER` by n samples.

    Uses lambda = n * sum((q - p)^2 / p) >= 4 n eps^2 (Cauchy-Schwarz), inflated
    by `POWER_SAFETY` for deviations concentrated on few outcomes.
    """
    if df < 1 or n < 1:
        return math.inf
    return math.sqrt(POWER_SAFETY * required_noncentrality(df, alpha) / (4.0 * n))


class UntestableDistribution(ValueError):
    """No affordable sample size gives the stated power on this distribution."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A chi-square test fixed before sampling: n, its bins, and what it detects."""

    n: int
    alpha: float
    bin_of: np.ndarray  # outcome index -> bin index; -1 for outcomes of probability 0
    bin_probs: np.ndarray
    pooled_mass: float
    min_detectable_tv: float

    @property
    def df(self) -> int:
        return len(self.bin_probs) - 1


def make_bins(probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Pool outcomes expected fewer than `MIN_EXPECTED` times into a remainder bin."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    possible = probs > 0
    large = possible & (probs * n >= MIN_EXPECTED)
    bin_of = np.full(probs.shape, -1, dtype=np.int64)
    bin_of[large] = np.arange(int(large.sum()))
    small = possible & ~large
    pooled_mass = float(probs[small].sum())
    bin_probs = list(probs[large])
    if small.any():
        if pooled_mass * n >= MIN_EXPECTED or not bin_probs:
            bin_of[small] = len(bin_probs)
            bin_probs.append(pooled_mass)
        else:  # the remainder itself is too small: merge it into the smallest bin
            smallest = int(np.argmin(bin_probs))
            bin_of[small] = smallest
            bin_probs[smallest] += pooled_mass
    return bin_of, np.asarray(bin_probs), pooled_mass


def make_plan(
    probs: np.ndarray, *, target_tv: float = TARGET_TV, alpha: float | None = None
) -> Plan:
    """Choose the smallest n (a multiple of 1024) that detects `target_tv`."""
    alpha = current_policy().alpha if alpha is None else alpha
    probs = np.asarray(probs, dtype=np.float64).ravel()
    n = 1024
    for _ in range(64):
        bin_of, bin_probs, pooled = make_bins(probs, n)
        df = len(bin_probs) - 1
        if df < 1:  # all but one outcome pooled away: grow n until the remainder stands alone
            rest = 1.0 - float(probs.max())
            if np.count_nonzero(probs) < 2 or MIN_EXPECTED / rest > MAX_SAMPLES:
                raise UntestableDistribution("probs: too little mass off the likeliest outcome to test")
            n = int(math.ceil(MIN_EXPECTED / rest / 1024.0)) * 1024
            continue
        lam = required_noncentrality(df, alpha)
        needed = int(math.ceil(POWER_SAFETY * lam / (4.0 * target_tv**2) / 1024.0)) * 1024
        if needed <= n:
            return Plan(n, alpha, bin_of, bin_probs, pooled, min_detectable_tv(n, df, alpha))
        if needed > MAX_SAMPLES:
            raise UntestableDistribution(f"target_tv: {target_tv} needs {needed} samples > {MAX_SAMPLES}")
        n = needed
    raise RuntimeError("make_plan did not converge")


@dataclasses.dataclass
class ChiSquareResult:
    """One goodness-of-fit test, as recorded in the report."""

    name: str
    n: int
    df: int
    statistic: float
    p_value: float
    alpha: float
    min_detectable_tv: float
    pooled_mass: float
    impossible_count: int
    expected: list
    observed: list
    context: dict

    @property
    def passed(self) -> bool:
        return self.impossible_count == 0 and self.p_value >= self.alpha

    def as_record(self) -> dict:
        record = dataclasses.asdict(self)
        record["passed"] = self.passed
        record["test"] = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        return record


def chi_square_test(name: str, outcomes: np.ndarray, plan: Plan, **context) -> ChiSquareResult:
    """Test sampled outcome indices against the plan's exact distribution.

    Any sample of an outcome with probability 0 fails the test outright.
    """
    outcomes = np.asarray(outcomes, dtype=np.int64).ravel()
    if outcomes.size != plan.n:
        raise ValueError(f"outcomes: expected {plan.n} samples, got {outcomes.size}")
    bins = plan.bin_of[outcomes]
    impossible = int((bins < 0).sum())
    observed = np.bincount(bins[bins >= 0], minlength=len(plan.bin_probs)).astype(np.float64)
    expected = plan.bin_probs * plan.n
    statistic = float(((observed - expected) ** 2 / expected).sum())
    p_value = float(scipy_stats.chi2.sf(statistic, plan.df))
    return ChiSquareResult(
        name=name,
        n=plan.n,
        df=plan.df,
        statistic=statistic,
        p_value=p_value,
        alpha=plan.alpha,
        min_detectable_tv=plan.min_detectable_tv,
        pooled_mass=plan.pooled_mass,
        impossible_count=impossible,
        expected=expected.tolist(),
        observed=observed.tolist(),
        context=context,
    )


def records_path() -> Path | None:
    """Where this run appends its records (None: keep them in memory only)."""
    directory = os.environ.get("NCM_VERIFY_REPORT_DIR")
    return Path(directory) / RECORDS_FILE if directory else None


RECORDS: list[dict] = []


def record(result: ChiSquareResult) -> None:
    """Keep a result for the report: in memory and as one JSON line."""
    entry = result.as_record()
    RECORDS.append(entry)
    path = records_path()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One O_APPEND write per record: lines from parallel workers never interleave.
        line = (json.dumps(entry, default=float) + "\n").encode()
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
