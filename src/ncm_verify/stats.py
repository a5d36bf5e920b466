"""The statistical policy, stated once: budget, alpha, pooling, exact p-values, power, records.

Every sampling property runs goodness-of-fit tests through this module. A whole
`make verify` run spends at most ``FAMILY_BUDGET`` on false failures, split
(Sidak) over the tests it plans to run: each test's alpha is its share, and its
p-value is valid at that alpha, P(p <= alpha) <= alpha. Plans with one or two
degrees of freedom get exact p-values (binomial tails; trinomial by conditioning
on one count). Larger plans pool bins below ``CHI_SQUARE_MIN_EXPECTED`` and
divide the chi-square tail by ``CHI_SQUARE_FRACTION``; the self-tests compute
the exact size of the worst such plans by summation at the `ci` and `thorough`
alphas. Power is asserted before any sample is drawn, by simulating the plan's
own decision, independently of the formula that chose n.

Under a derandomized profile (`ci`) the examples and seeds are a function of
the commit: the family-wise rate is the chance that a commit's drawn seeds make
a correct implementation fail, and rerunning the same commit adds nothing. To
draw other seeds, run ``make verify SEED=123``.
"""

from __future__ import annotations

import dataclasses
import hashlib
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
ALPHA_FRACTION = 1.0
"""Each test's alpha as a fraction of its Sidak share: 1, since every p-value is valid at the share."""
MIN_EXPECTED = 20
"""Bins expected to hold fewer than this are pooled into a remainder bin (exact plans)."""
EXACT_MAX_DF = 2
"""Plans with at most this many degrees of freedom get exact p-values."""
CHI_SQUARE_MIN_EXPECTED = 100
"""Pooling limit of plans tested with the chi-square tail: at 20 their true size was up to 3x the share."""
CHI_SQUARE_FRACTION = 0.25
"""The chi-square tail is divided by this: its true size near 1e-6 is up to 1.3x the nominal at 100 expected."""
TAIL_EPS = 1e-13
"""Mass left out of each enumerated count's window; added to exact p-values and sizes, so they stay upper bounds."""
POWER = 0.99
"""Each test detects a deviation of its stated size with at least this power."""
POWER_SAFETY = 1.75
"""The noncentral chi-square overstates power for deviations on few tokens."""
TARGET_TV = 0.02
"""Total-variation deviation every distribution property must detect."""
POWER_DRAWS = 2000
"""Multinomial draws of the simulated power check, fewer for plans of over 1000 bins (`POWER_DRAW_BUDGET`)."""
POWER_DRAW_BUDGET = 2_000_000
"""Random counts one shape of the power check may draw: its cost is draws x bins."""
POWER_CHECK_AT = 0.985
"""The power check fails a plan whose true power is this (the model's error allowed) with at most `POWER_CHECK_RISK`."""
POWER_CHECK_RISK = 1e-9
LOOP_TARGET_TV = 0.2
"""Total-variation deviation the sampled smoke of a whole decoding loop must detect (one Python call per
sequence, n = 1024): a loop's exactness is checked call by call, exactly, in properties/test_mlx_lm_loop.py."""
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
            "exact_max_df": EXACT_MAX_DF,
            "chi_square_min_expected": CHI_SQUARE_MIN_EXPECTED,
            "chi_square_fraction": CHI_SQUARE_FRACTION,
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


def law_digest(probs: np.ndarray) -> str:
    """A short hex digest of the exact probability vector: equal laws, equal digests."""
    vector = np.ascontiguousarray(np.asarray(probs, dtype=np.float64).ravel())
    return hashlib.sha256(vector.tobytes()).hexdigest()[:16]


def _count_window(n: int, p: float) -> np.ndarray:
    """Counts of a Binomial(n, p) bin outside which at most `TAIL_EPS` mass lies on either side."""
    low = int(scipy_stats.binom.ppf(TAIL_EPS, n, p))
    high = int(scipy_stats.binom.isf(TAIL_EPS, n, p)) + 1
    return np.arange(max(low, 0), min(high, n) + 1)


def statistic_sf(bin_probs: np.ndarray, n: int, threshold: float, *, grid: float | None = None) -> float:
    """P(X^2 >= threshold) under the null, by summation; X^2 is Pearson's statistic of n counts in `bin_probs`.

    All bins but the two widest are enumerated through their conditional binomials;
    given them, X^2 is a quadratic in the next count, so the last two bins give two
    binomial tails. `grid` merges enumerated states on a grid of the partial
    statistic, rounded up. Each enumerated count's window leaves out at most
    `TAIL_EPS` of its marginal on either side, added back: the result is an upper bound.
    """
    probs = np.asarray(bin_probs, dtype=np.float64).ravel()
    probs = probs[np.argsort(probs * (1.0 - probs), kind="stable")]
    expected = n * probs
    remaining, partial, weight = np.array([n]), np.array([0.0]), np.array([1.0])
    rejected, slack, rest = 0.0, 0.0, 1.0
    for i in range(len(probs) - 2):
        counts = _count_window(n, probs[i])
        slack += 2 * TAIL_EPS
        share = min(probs[i] / rest, 1.0) if rest > 0 else 0.0
        rest -= probs[i]
        left = remaining[:, None] - counts[None, :]
        mass = weight[:, None] * scipy_stats.binom.pmf(counts[None, :], remaining[:, None], share)
        value = partial[:, None] + (counts[None, :] - expected[i]) ** 2 / expected[i]
        live = (mass > 0) & (left >= 0)
        done = live & (value >= threshold)  # the remaining terms are >= 0: rejected already
        rejected += float(mass[done].sum())
        keep = live & ~done
        remaining, partial, weight = left[keep], value[keep], mass[keep]
        if grid is not None and remaining.size:
            cells = np.ceil(partial / grid)
            keys = remaining * (int(threshold / grid) + 2) + cells.astype(np.int64)
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            weight = np.bincount(inverse.ravel(), weights=weight)
            remaining, partial = remaining[first], cells[first] * grid
    tails = _last_two_bins_tails(expected[-2:], remaining, partial, threshold)
    return min(rejected + float((weight * tails).sum()) + slack, 1.0)


def _last_two_bins_tails(expected: np.ndarray, remaining: np.ndarray, partial: np.ndarray, threshold: float):
    """P(X^2 >= threshold) given r counts left for the last two bins: outside an interval of the first's count."""
    ea, eb = expected
    # (a - ea)^2/ea + (r - a - eb)^2/eb = lowest + (a - centre)^2 (1/ea + 1/eb)
    centre = remaining * ea / (ea + eb)
    lowest = (remaining - ea - eb) ** 2 / (ea + eb)
    room = threshold - partial - lowest
    half = np.sqrt(np.clip(room, 0.0, None) / (1.0 / ea + 1.0 / eb))
    below = np.floor(centre - half + 1e-9)  # the 1e-9 counts a count on the boundary as rejected: an upper bound
    above = np.ceil(centre + half - 1e-9)
    share = ea / (ea + eb)
    tails = scipy_stats.binom.cdf(below, remaining, share) + scipy_stats.binom.sf(above - 1, remaining, share)
    return np.where(room <= 0, 1.0, np.minimum(tails, 1.0))


def pearson_statistic(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((np.asarray(observed, dtype=np.float64) - expected) ** 2 / expected).sum())


def exact_p_value(statistic: float, bin_probs: np.ndarray, n: int) -> float:
    """P(X^2 >= statistic) under the null, by summation (an upper bound within 1e-12)."""
    return statistic_sf(bin_probs, n, statistic * (1.0 - 1e-12) - 1e-12)


def is_exact(df: int) -> bool:
    return df <= EXACT_MAX_DF


def p_value_of(statistic: float, bin_probs: np.ndarray, n: int) -> float:
    """The p-value the plan's test compares with its alpha: exact, or the chi-square tail corrected."""
    df = len(bin_probs) - 1
    if is_exact(df):
        return exact_p_value(statistic, bin_probs, n)
    return min(1.0, float(scipy_stats.chi2.sf(statistic, df)) / CHI_SQUARE_FRACTION)


def critical_statistic(bin_probs: np.ndarray, n: int, alpha: float) -> float:
    """The smallest statistic the test rejects at `alpha` (to 1e-7 relative for exact plans)."""
    df = len(bin_probs) - 1
    chi_square = float(scipy_stats.chi2.isf(CHI_SQUARE_FRACTION * alpha, df))
    if not is_exact(df):
        return chi_square
    low, high = 0.0, 4.0 * chi_square
    while statistic_sf(bin_probs, n, high) > alpha:
        low, high = high, 2.0 * high
    while high - low > 1e-7 * high:
        middle = 0.5 * (low + high)
        low, high = (middle, high) if statistic_sf(bin_probs, n, middle) > alpha else (low, middle)
    return high


@lru_cache(maxsize=4096)
def noncentrality_at(critical: float, df: int, power: float = POWER) -> float:
    """Smallest noncentrality at which a chi-square test rejecting above `critical` has `power`."""
    return optimize.brentq(lambda lam: scipy_stats.ncx2.sf(critical, df, lam) - power, 1e-9, 1e7, xtol=1e-9)


def min_detectable_tv(n: int, df: int, critical: float) -> float:
    """Smallest total-variation deviation detected with power `POWER` by n samples.

    Uses lambda = n * sum((q - p)^2 / p) >= 4 n eps^2 (Cauchy-Schwarz), inflated
    by `POWER_SAFETY` for deviations concentrated on few outcomes.
    """
    if df < 1 or n < 1:
        return math.inf
    return math.sqrt(POWER_SAFETY * noncentrality_at(critical, df) / (4.0 * n))


class UntestableDistribution(ValueError):
    """No affordable sample size gives the stated power on this distribution."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A goodness-of-fit test fixed before sampling: n, its bins, its rejection region, what it detects."""

    n: int
    alpha: float
    bin_of: np.ndarray  # outcome index -> bin index; -1 for outcomes of probability 0
    bin_probs: np.ndarray
    pooled_mass: float
    min_detectable_tv: float
    critical: float = math.nan
    law_digest: str = ""

    @property
    def df(self) -> int:
        return len(self.bin_probs) - 1

    @property
    def method(self) -> str:
        return "exact" if is_exact(self.df) else "chi-square"


def make_bins(probs: np.ndarray, n: int, min_expected: float = MIN_EXPECTED) -> tuple[np.ndarray, np.ndarray, float]:
    """Pool outcomes expected fewer than `min_expected` times into a remainder bin."""
    probs = np.asarray(probs, dtype=np.float64).ravel()
    possible = probs > 0
    large = possible & (probs * n >= min_expected)
    bin_of = np.full(probs.shape, -1, dtype=np.int64)
    bin_of[large] = np.arange(int(large.sum()))
    small = possible & ~large
    pooled_mass = float(probs[small].sum())
    bin_probs = list(probs[large])
    if small.any():
        if pooled_mass * n >= min_expected or not bin_probs:
            bin_of[small] = len(bin_probs)
            bin_probs.append(pooled_mass)
        else:  # the remainder itself is too small: merge it into the smallest bin
            smallest = int(np.argmin(bin_probs))
            bin_of[small] = smallest
            bin_probs[smallest] += pooled_mass
    return bin_of, np.asarray(bin_probs), pooled_mass


def make_plan_bins(probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Bins at the exact plans' pooling limit; past `EXACT_MAX_DF` bins at the chi-square limit."""
    bins = make_bins(probs, n)
    return bins if is_exact(len(bins[1]) - 1) else make_bins(probs, n, CHI_SQUARE_MIN_EXPECTED)


def plan_at(probs: np.ndarray, n: int, alpha: float, *, bins: tuple | None = None) -> Plan:
    """The test of `probs` with n samples at `alpha`, whatever its power (make_plan chooses n)."""
    bin_of, bin_probs, pooled = make_plan_bins(probs, n) if bins is None else bins
    df = len(bin_probs) - 1
    critical = critical_statistic(bin_probs, n, alpha)
    return Plan(n, alpha, bin_of, bin_probs, pooled, min_detectable_tv(n, df, critical), critical, law_digest(probs))


def make_plan(probs: np.ndarray, *, target_tv: float = TARGET_TV, alpha: float | None = None) -> Plan:
    """Choose the smallest n (a multiple of 1024) that detects `target_tv`; never more than `MAX_SAMPLES`."""
    alpha = current_policy().alpha if alpha is None else alpha
    probs = np.asarray(probs, dtype=np.float64).ravel()
    if np.count_nonzero(probs) < 2:
        raise UntestableDistribution("probs: fewer than two possible outcomes")
    n = 1024
    while n <= MAX_SAMPLES:  # n at least doubles or stops each turn
        bin_of, bin_probs, pooled = make_plan_bins(probs, n)
        df = len(bin_probs) - 1
        if df < 1:  # everything in one bin: grow n until the likeliest outcome and the rest both stand
            enough = MIN_EXPECTED / min(float(probs.max()), 1.0 - float(probs.max()))
            n = max(2 * n, math.ceil(enough / 1024.0) * 1024)
            continue
        plan = plan_at(probs, n, alpha, bins=(bin_of, bin_probs, pooled))
        lam = noncentrality_at(plan.critical, df)
        needed = math.ceil(POWER_SAFETY * lam / (4.0 * target_tv**2) / 1024.0) * 1024
        if needed <= n:
            return plan
        n = max(needed, n + 1024)
    raise UntestableDistribution(f"target_tv: {target_tv} needs more than {MAX_SAMPLES} samples")


def deviate(probs: np.ndarray, tv: float, shape: str) -> np.ndarray:
    """`probs` moved by exactly `tv` in total variation.

    "spread": every outcome scaled, up on one half of the mass and down on the other,
    so that sum((q - p)^2 / p) is close to 4 tv^2, the least any deviation of size tv gives.
    "concentrated": tv moved between the two likeliest outcomes (or onto the likeliest from as few
    as hold it), the case the safety factor is for.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if shape == "concentrated":
        order = np.argsort(probs, kind="stable")[::-1]
        moved = probs.copy()
        if probs[order[0]] >= tv:
            moved[order[0]] -= tv
            moved[order[1]] += tv
            return moved
        # no outcome holds tv: give it to the likeliest, taken from as few of the next as can give it
        taken = np.minimum(probs[order[1:]], np.clip(tv - np.cumsum(np.r_[0.0, probs[order[1:-1]]]), 0.0, None))
        moved[order[1:]] -= taken
        moved[order[0]] += tv
        return moved
    if shape != "spread":
        raise ValueError(f"shape: expected 'spread' or 'concentrated', got {shape!r}")
    up = np.zeros(len(probs), dtype=bool)
    up[np.argsort(probs)[::-2]] = True  # every other outcome by size: close to half the mass
    if probs[~up].sum() < tv:  # too little mass to take tv from: move it the other way
        up = ~up
    mass_up = probs[up].sum()
    return np.where(up, probs * (1 + tv / mass_up), probs * (1 - tv / (1 - mass_up)))


def power_draws(plan: Plan) -> int:
    """Draws of the power check: `POWER_DRAWS`, or fewer (at least 200) when the plan has many bins."""
    return int(np.clip(POWER_DRAW_BUDGET // len(plan.bin_probs), 200, POWER_DRAWS))


def simulated_power(plan: Plan, tv: float, shape: str, *, draws: int = POWER_DRAWS) -> float:
    """Fraction of `draws` multinomial count vectors, off the plan's bins by `tv`, that the plan rejects.

    Independent of the noncentral formula that chose n: it applies the plan's own
    rejection region to counts drawn from a deviated law. Seeded by the law's digest.
    """
    deviated = deviate(plan.bin_probs, tv, shape)
    rng = np.random.default_rng(int(plan.law_digest or "0", 16) + plan.n)
    counts = rng.multinomial(plan.n, deviated / deviated.sum(), size=draws)
    expected = plan.bin_probs * plan.n
    statistics = ((counts - expected) ** 2 / expected).sum(axis=1)
    return float((statistics >= plan.critical).mean())


def power_shortfall(plan: Plan, tv: float = TARGET_TV) -> str | None:
    """Why the plan's n is too small, or None.

    n is sized so that the noncentral chi-square predicts power `POWER` at a deviation
    of tv / sqrt(POWER_SAFETY) (the safety factor spent). The check runs the plan's own
    test on counts off by that much (spread over every bin, and concentrated on two) and
    fails when fewer are rejected than a true power of `POWER_CHECK_AT` would give
    with probability `POWER_CHECK_RISK`: a too-small n fails it (self-tested at 0.6 n).
    """
    deviation = tv / math.sqrt(POWER_SAFETY)
    draws = power_draws(plan)
    floor = int(scipy_stats.binom.ppf(POWER_CHECK_RISK, draws, POWER_CHECK_AT)) / draws
    for shape in ("spread", "concentrated"):
        rate = simulated_power(plan, deviation, shape, draws=draws)
        if rate < floor:
            return (
                f"n = {plan.n} on {plan.df} df rejects a {shape} deviation of TV {deviation:.4f} in "
                f"{rate:.3f} of {draws} simulated draws < {floor:.3f} (power {POWER} at TV {tv} claimed)"
            )
    return None


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
    law_digest: str = ""
    method: str = ""

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
    statistic = pearson_statistic(observed, expected)
    return ChiSquareResult(
        name=name,
        n=plan.n,
        df=plan.df,
        statistic=statistic,
        p_value=p_value_of(statistic, plan.bin_probs, plan.n),
        alpha=plan.alpha,
        min_detectable_tv=plan.min_detectable_tv,
        pooled_mass=plan.pooled_mass,
        impossible_count=impossible,
        expected=expected.tolist(),
        observed=observed.tolist(),
        context=context,
        law_digest=plan.law_digest,
        method=plan.method,
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
