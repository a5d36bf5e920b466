"""The statistical policy, stated once: budget, alpha, pooling, exact p-values, power, records.

Every sampling property runs goodness-of-fit tests through this module. A whole
`make verify` run spends at most ``FAMILY_BUDGET`` on false failures, split
(Sidak) over the tests it plans to run: each test's alpha is its share, and its
p-value is valid at that alpha, P(p <= alpha) <= alpha. Plans with one or two
degrees of freedom get exact p-values (binomial tails; trinomial by conditioning
on one count). Larger plans pool bins below ``CHI_SQUARE_MIN_EXPECTED`` and
reject when the chi-square tail is below `chi_square_tail_at(alpha)`: a quarter
of alpha down to ``CHI_SQUARE_KNEE``, a fraction shrinking as alpha^0.25 below
it, because the chi-square tail's error grows as alpha shrinks. A run plans at
most ``MAX_PLANNED_TESTS`` tests (`Policy` refuses more), so no alpha falls below
``MIN_ALPHA``; the self-tests bound the size of the worst plans at the `ci` and
`thorough` alphas and at ``MIN_ALPHA``, by summation for df 1-5 and by importance
sampling for a plan of many bins.

Power: n is the smallest at which the noncentral chi-square, its noncentrality
discounted by ``POWER_SAFETY``, predicts power ``POWER`` against any deviation of
total variation ``TARGET_TV`` on the binned law (the noncentrality of such a
deviation is at least 4 n TV^2, the "spread" shape). The raw model is not
trusted: it overpredicts for mass moved into a small bin (true power about 0.96
where it says 0.99). What the plan promises, and the self-tests check on every
shape `deviate` knows, is the discounted model: a deviation whose noncentrality
is ``POWER_SAFETY`` times the raw power-0.99 noncentrality is caught with power
0.99; the raw model's rate is reported beside it. Each property's n is checked by
simulating its own test before any sample is drawn (`power_shortfall`).

Binning hides what happens inside the pooled remainder, so a plan states two
figures: TV ``min_detectable_tv`` on the binned law, and ``raw_detectable_tv``
= that plus the pooled mass on the raw law (binned TV >= raw TV - pooled mass).

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

import numpy as np

from ncm_verify.evidence.chi_square import LAW_DECIMALS, POWER_SHAPES  # with the evidence: the report reads them
from ncm_verify.harness.run_state import run_state


@lru_cache(maxsize=1)
def scipy_stats():
    # Imported on first use: about 1 s of start-up in each pytest process that runs no statistical test
    # (xdist's controller, most unit tests' own sessions).
    from scipy import stats

    return stats


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
"""The chi-square tail is compared with this fraction of alpha down to `CHI_SQUARE_KNEE`: its true size near 1e-6
is up to 1.3x the nominal at 100 expected."""
CHI_SQUARE_KNEE = 1e-6
"""Below this alpha the fraction shrinks as (alpha / knee)^CHI_SQUARE_SLOPE: at a quarter, the worst df-3 plan's
true size was 1.1x alpha at 5.8e-8 and 1.6x at 1e-8."""
CHI_SQUARE_SLOPE = 0.25
MAX_PLANNED_TESTS = 20_000
"""Most chi-square tests one run may plan (14x `thorough`); past it `Policy` refuses, so alpha >= `MIN_ALPHA`."""
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
RAW_MODEL_SHAPES = ("spread", "concentrated")
"""Shapes on which the raw noncentral chi-square is accurate: their power cases also pass its own 0.99 bar."""
LOOP_TARGET_TV = 0.2
"""Total-variation deviation the sampled smoke of a whole decoding loop must detect (one Python call per
sequence, n = 1024): a loop's exactness is checked call by call, exactly, in properties/test_mlx_lm_loop.py."""
MAX_SAMPLES = 4_000_000


def chi_square_tail_at(alpha: float) -> float:
    """The chi-square tail below which a chi-square plan rejects at `alpha`: a fraction of alpha, smaller below
    the knee (increasing in alpha, so `corrected_p_value` inverts it)."""
    shrink = min(1.0, alpha / CHI_SQUARE_KNEE) ** CHI_SQUARE_SLOPE
    return CHI_SQUARE_FRACTION * alpha * shrink


def corrected_p_value(tail: float) -> float:
    """The smallest alpha at which a chi-square plan rejects a statistic of chi-square tail `tail`."""
    scaled = tail / CHI_SQUARE_FRACTION
    if scaled >= CHI_SQUARE_KNEE:
        return min(1.0, scaled)
    return CHI_SQUARE_KNEE * (scaled / CHI_SQUARE_KNEE) ** (1.0 / (1.0 + CHI_SQUARE_SLOPE))


@dataclasses.dataclass(frozen=True)
class Policy:
    """How the family-wise budget is split over the tests of one run."""

    planned_tests: int = 1
    family_budget: float = FAMILY_BUDGET
    selftest_budget: float = SELFTEST_BUDGET

    def __post_init__(self):
        if not 1 <= self.planned_tests <= MAX_PLANNED_TESTS:
            raise ValueError(
                f"planned_tests: {self.planned_tests} is outside 1..{MAX_PLANNED_TESTS}; the size self-tests prove "
                f"the p-values down to alpha {MIN_ALPHA:.3g}, the alpha of {MAX_PLANNED_TESTS} tests"
            )

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
            "chi_square_fraction_at_alpha": chi_square_tail_at(self.alpha) / self.alpha,
            "chi_square_knee": CHI_SQUARE_KNEE,
            "max_planned_tests": MAX_PLANNED_TESTS,
            "min_alpha": MIN_ALPHA,
            "power": POWER,
            "power_safety": POWER_SAFETY,
            "target_tv": TARGET_TV,
            "loop_target_tv": LOOP_TARGET_TV,
            "law_decimals": LAW_DECIMALS,
            "power_shapes": list(POWER_SHAPES),
        }


MIN_ALPHA = Policy(planned_tests=MAX_PLANNED_TESTS).alpha
"""The smallest alpha any run reaches: `MAX_PLANNED_TESTS` tests (about 4e-8)."""


def current_policy() -> Policy:
    """The policy of the run in progress: its run state's, or the default one before collection or outside pytest."""
    return run_state().policy or Policy()


def law_digest(bin_probs: np.ndarray) -> str:
    """A short hex digest of a (binned) law rounded to `LAW_DECIMALS`: laws no test tells apart share it."""
    rounded = np.round(np.asarray(bin_probs, dtype=np.float64).ravel(), LAW_DECIMALS) + 0.0  # -0.0 is 0.0
    return hashlib.sha256(np.ascontiguousarray(rounded).tobytes()).hexdigest()[:16]


def _count_window(n: int, p: float) -> np.ndarray:
    """Counts of a Binomial(n, p) bin outside which at most `TAIL_EPS` mass lies on either side."""
    low = int(scipy_stats().binom.ppf(TAIL_EPS, n, p))
    high = int(scipy_stats().binom.isf(TAIL_EPS, n, p)) + 1
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
        # the pmf depends on a state's remaining count only: one row per distinct count, shared by its states
        distinct, row = np.unique(remaining, return_inverse=True)
        mass = weight[:, None] * scipy_stats().binom.pmf(counts[None, :], distinct[:, None], share)[row.ravel()]
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
    tails = scipy_stats().binom.cdf(below, remaining, share) + scipy_stats().binom.sf(above - 1, remaining, share)
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
    return corrected_p_value(float(scipy_stats().chi2.sf(statistic, df)))


def critical_statistic(bin_probs: np.ndarray, n: int, alpha: float) -> float:
    """The smallest statistic the test rejects at `alpha` (to 1e-7 relative for exact plans)."""
    df = len(bin_probs) - 1
    chi_square = float(scipy_stats().chi2.isf(chi_square_tail_at(alpha), df))
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
    from scipy import optimize

    sf = scipy_stats().ncx2.sf
    return optimize.brentq(lambda lam: sf(critical, df, lam) - power, 1e-9, 1e7, xtol=1e-9)


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

    @property
    def raw_detectable_tv(self) -> float:
        """TV on the raw law detected with power `POWER`: binned TV >= raw TV - pooled mass."""
        return self.min_detectable_tv + self.pooled_mass

    @property
    def pooled_bin(self) -> int | None:
        """The bin holding the pooled remainder (the one bin of several outcomes), or None."""
        members = np.bincount(self.bin_of[self.bin_of >= 0], minlength=len(self.bin_probs))
        several = np.flatnonzero(members > 1)
        return int(several[0]) if several.size else None


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
    tv = min_detectable_tv(n, df, critical)
    return Plan(n, alpha, bin_of, bin_probs, pooled, tv, critical, law_digest(bin_probs))


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


def _move(probs: np.ndarray, tv: float, into: np.ndarray) -> np.ndarray:
    """`tv` added to the outcomes `into` (in proportion, or evenly where they hold nothing), taken from the
    likeliest other outcomes, as few as hold it."""
    others = np.flatnonzero(~into)
    order = others[np.argsort(probs[others], kind="stable")[::-1]]
    if probs[order].sum() < tv * (1 - 1e-12):
        raise ValueError(f"tv: {tv} is more than the {probs[order].sum():.4g} outside the outcomes it moves into")
    moved = probs.copy()
    moved[order] -= np.minimum(probs[order], np.clip(tv - np.cumsum(np.r_[0.0, probs[order][:-1]]), 0.0, None))
    held = probs[into].sum()
    moved[into] += tv * (probs[into] / held if held > 0 else np.full(int(into.sum()), 1.0 / into.sum()))
    return moved


def deviate(
    probs: np.ndarray, tv: float, shape: str, *, bin_of: np.ndarray | None = None, pooled: np.ndarray | None = None
) -> np.ndarray:
    """`probs` moved by exactly `tv` in total variation, in one of `POWER_SHAPES`.

    "spread": every outcome scaled, up on one half of the mass and down on the other,
    so that sum((q - p)^2 / p) is close to 4 tv^2, the least any deviation of size tv gives.
    "concentrated": tv moved between the two likeliest outcomes (or onto the likeliest from as few
    as hold it), the most noncentrality per unit of TV.
    "smallest": tv moved from the likeliest outcomes into the least likely bin (`bin_of`: outcome -> bin,
    -1 impossible; default one bin per outcome), where the noncentral chi-square overstates power.
    "pooled": tv moved from the likeliest outcomes into the outcomes `pooled` (a mask: the pooled remainder).
    "within pooled": tv moved inside `pooled`, from all its outcomes onto its likeliest: binning cannot see it.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if shape in ("pooled", "within pooled"):
        if pooled is None or not np.asarray(pooled).any():
            raise ValueError(f"pooled: shape {shape!r} needs the mask of a pooled remainder, got none")
        pooled = np.asarray(pooled, dtype=bool)
        if shape == "pooled":
            return _move(probs, tv, pooled)
        into = np.zeros(len(probs), dtype=bool)
        into[np.flatnonzero(pooled)[np.argmax(probs[pooled])]] = True
        inside = probs.copy()
        inside[~pooled] = 0.0  # take only from the pooled outcomes
        return np.where(pooled, _move(inside, tv, into), probs)
    if shape == "smallest":
        bins = np.arange(len(probs)) if bin_of is None else np.asarray(bin_of)
        possible = bins >= 0
        mass = np.bincount(bins[possible], weights=probs[possible])
        return _move(probs, tv, possible & (bins == int(np.argmin(np.where(mass > 0, mass, np.inf)))))
    if shape == "concentrated":
        order = np.argsort(probs, kind="stable")[::-1]
        if probs[order[0]] >= tv:
            moved = probs.copy()
            moved[order[0]] -= tv
            moved[order[1]] += tv
            return moved
        # no outcome holds tv: give it to the likeliest, taken from as few of the next as can give it
        into = np.zeros(len(probs), dtype=bool)
        into[order[0]] = True
        return _move(probs, tv, into)
    if shape != "spread":
        raise ValueError(f"shape: expected one of {POWER_SHAPES}, got {shape!r}")
    up = np.zeros(len(probs), dtype=bool)
    up[np.argsort(probs)[::-2]] = True  # every other outcome by size: close to half the mass
    if probs[~up].sum() < tv:  # too little mass to take tv from: move it the other way
        up = ~up
    mass_up = probs[up].sum()
    return np.where(up, probs * (1 + tv / mass_up), probs * (1 - tv / (1 - mass_up)))


def plan_shapes(plan: Plan) -> tuple[str, ...]:
    """The shapes the plan's bins can show: "pooled" only with a pooled remainder; never "within pooled"."""
    return RAW_MODEL_SHAPES + ("smallest",) + (("pooled",) if plan.pooled_bin is not None else ())


def power_draws(plan: Plan) -> int:
    """Draws of the power check: `POWER_DRAWS`, or fewer (at least 200) when the plan has many bins."""
    return int(np.clip(POWER_DRAW_BUDGET // len(plan.bin_probs), 200, POWER_DRAWS))


def simulated_power(plan: Plan, tv: float, shape: str, *, draws: int = POWER_DRAWS) -> float:
    """Fraction of `draws` multinomial count vectors, off the plan's bins by `tv`, that the plan rejects.

    Independent of the noncentral formula that chose n: it applies the plan's own
    rejection region to counts drawn from a deviated law. Seeded by the law's digest.
    """
    pooled = None if plan.pooled_bin is None else np.arange(len(plan.bin_probs)) == plan.pooled_bin
    deviated = deviate(plan.bin_probs, tv, shape, pooled=pooled)
    rng = np.random.default_rng(int(plan.law_digest or "0", 16) + plan.n)
    counts = rng.multinomial(plan.n, deviated / deviated.sum(), size=draws)
    expected = plan.bin_probs * plan.n
    statistics = ((counts - expected) ** 2 / expected).sum(axis=1)
    return float((statistics >= plan.critical).mean())


def power_shortfall(plan: Plan, tv: float = TARGET_TV) -> str | None:
    """Why the plan's n is too small, or None.

    n is sized so that the noncentral chi-square predicts power `POWER` at a deviation
    of tv / sqrt(POWER_SAFETY) (the safety factor spent). The check runs the plan's own
    test on counts off by that much in every shape its bins can show (`plan_shapes`:
    spread, concentrated, into the smallest bin, into the pooled remainder) and
    fails when fewer are rejected than a true power of `POWER_CHECK_AT` would give
    with probability `POWER_CHECK_RISK`: a too-small n fails it (self-tested at 0.6 n).
    """
    deviation = tv / math.sqrt(POWER_SAFETY)
    draws = power_draws(plan)
    floor = int(scipy_stats().binom.ppf(POWER_CHECK_RISK, draws, POWER_CHECK_AT)) / draws
    for shape in plan_shapes(plan):
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
    raw_detectable_tv: float = math.nan

    @property
    def passed(self) -> bool:
        return self.impossible_count == 0 and self.p_value >= self.alpha

    def as_record(self) -> dict:
        record = dataclasses.asdict(self)
        record["passed"] = self.passed
        record["test"] = run_state().test
        return record


def chi_square_test(name: str, outcomes: np.ndarray, plan: Plan, **context) -> ChiSquareResult:
    """Test sampled outcome indices against the plan's exact distribution.

    Any sample of an outcome with probability 0 fails the test outright.
    """
    outcomes = np.asarray(outcomes, dtype=np.int64).ravel()
    if outcomes.size != plan.n:
        raise ValueError(f"outcomes: expected {plan.n} samples, got {outcomes.size}")
    if outcomes.size and (outcomes.min() < 0 or outcomes.max() >= len(plan.bin_of)):
        bad = outcomes[(outcomes < 0) | (outcomes >= len(plan.bin_of))]
        raise ValueError(f"outcomes: indices must lie in 0..{len(plan.bin_of) - 1}, got {bad[0]} ({bad.size} such)")
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
        raw_detectable_tv=plan.raw_detectable_tv,
    )


def binned_counts(plan: Plan, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of outcome counts (draws x outcomes) summed into the plan's bins, as `chi_square_test` bins the
    outcomes they spell out, and each row's count of impossible outcomes."""
    counts = np.atleast_2d(np.asarray(counts, dtype=np.int64))
    possible = plan.bin_of >= 0
    columns = np.flatnonzero(possible)[np.argsort(plan.bin_of[possible], kind="stable")]
    starts = np.searchsorted(plan.bin_of[columns], np.arange(len(plan.bin_probs)))
    # integer sums, exact: every bin holds at least one outcome, so each reduceat slice is its members
    observed = np.add.reduceat(counts[:, columns], starts, axis=1).astype(np.float64)
    return observed, counts[:, ~possible].sum(axis=1)


def count_statistics(plan: Plan, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pearson's statistic of each row of outcome counts on the plan's bins (`pearson_statistic` of each), and
    each row's count of impossible outcomes."""
    observed, impossible = binned_counts(plan, counts)
    expected = plan.bin_probs * plan.n
    return ((observed - expected) ** 2 / expected).sum(axis=1), impossible


def p_values_of(statistics: np.ndarray, bin_probs: np.ndarray, n: int) -> np.ndarray:
    """`p_value_of` each statistic: exact ones summed once per distinct statistic, chi-square tails at once."""
    statistics = np.asarray(statistics, dtype=np.float64)
    if is_exact(len(bin_probs) - 1):
        distinct, row = np.unique(statistics, return_inverse=True)
        return np.array([exact_p_value(float(s), bin_probs, n) for s in distinct])[row.reshape(statistics.shape)]
    tails = scipy_stats().chi2.sf(statistics, len(bin_probs) - 1)
    return np.array([corrected_p_value(float(tail)) for tail in np.ravel(tails)]).reshape(statistics.shape)


def rejected_counts(plan: Plan, counts: np.ndarray) -> np.ndarray:
    """Whether the plan's test rejects each row of outcome counts: `chi_square_test(...).passed` negated, without
    spelling the counts out as outcomes."""
    statistics, impossible = count_statistics(plan, counts)
    p_values = p_values_of(statistics, plan.bin_probs, plan.n)
    return (impossible > 0) | ~(p_values >= plan.alpha)


def record(result: ChiSquareResult) -> None:
    """Keep a result for the report: in the run's state and as one JSON line."""
    entry = result.as_record()
    state = run_state()
    state.records.append(entry)
    path = state.records_path
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # One O_APPEND write per record: lines from parallel workers never interleave.
        line = (json.dumps(entry, default=float) + "\n").encode()
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)


LOOP_SMOKE_MAX_SAMPLES = 2048
"""Sequences one example of a loop's sampled smoke may draw (one Python call each, about 5 ms here)."""


def loop_smoke_sized(laws: dict[str, np.ndarray], max_samples: int = LOOP_SMOKE_MAX_SAMPLES) -> bool:
    """Whether every testable law's plan at `LOOP_TARGET_TV` needs at most `max_samples` draws."""
    try:
        sizes = [make_plan(p, target_tv=LOOP_TARGET_TV).n for p in laws.values() if np.count_nonzero(p) > 1]
    except UntestableDistribution:
        return True  # the check itself rejects it, with its reason noted
    return max(sizes, default=0) <= max_samples


DIRECTION_ALPHA = FAMILY_BUDGET / 2
"""Each of C10's two paired tests (distilled, feature-conditioned drafter against the undistilled one): the
rate at which a direction that does not lengthen accepted blocks reads *shown*, Bonferroni over the two."""


SMOLLM2_DIRECTION_ALPHA = FAMILY_BUDGET / 3
"""Each of C10's three paired tests on SmolLM2 (issue 42: the distilled AR drafter, the positive control; the distilled
and the feature-conditioned NCM drafter): the rate at which a direction that does not lengthen accepted blocks reads
*shown*, Bonferroni over the three."""


def paired_improvement_p_value(challenger: np.ndarray, baseline: np.ndarray) -> float:
    """One-sided paired t-test p-value of mean(challenger - baseline) > 0, per context (exact values, not samples:
    the test is over which held-out contexts were drawn)."""
    if challenger.shape != baseline.shape or challenger.ndim != 1 or len(challenger) < 2:
        raise ValueError(f"challenger, baseline: need two equal 1-d arrays, got {challenger.shape}, {baseline.shape}")
    difference = challenger - baseline
    if np.ptp(difference) == 0:  # no spread: the t statistic is undefined, the sign decides
        return 0.0 if difference[0] > 0 else 1.0
    return float(scipy_stats().ttest_rel(challenger, baseline, alternative="greater").pvalue)


def paired_detectable_difference(difference: np.ndarray, alpha: float, power: float = POWER) -> float:
    """The smallest mean of per-context `difference`s that `paired_improvement_p_value` shows at `alpha` with
    `power`, at their sample size and observed spread (the t approximation of a one-sided paired test)."""
    n, t = len(difference), scipy_stats().t
    return float((t.ppf(1 - alpha, n - 1) + t.ppf(power, n - 1)) * difference.std(ddof=1) / math.sqrt(n))
