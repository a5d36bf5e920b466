"""The goodness-of-fit machinery is calibrated, holds its size at the run's alpha, and has its stated power.

These checks run inside `make verify`. The sampling ones (two calibration checks,
four power cases) spend the run's `stats.SELFTEST_BUDGET`, split six ways; the
size and planner checks are computed exactly or from fixed seeds and spend nothing.
"""

import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from scipy import optimize
from scipy import stats as scipy_stats
from scipy.special import gammaln

from ncm_verify import drivers, exact, reference, stats

pytestmark = pytest.mark.teeth

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_ALPHA = 0.05
CALIBRATION_RUNS = 400
CALIBRATION_SAMPLES = 4096
POWER_RUNS = 800
"""Enough runs that the bar tells power 0.99 from 0.95 (see `test_the_power_bar_tells_099_from_095`)."""
CHECK_BUDGET = stats.SELFTEST_BUDGET / 6
"""Each of the six checks below (two calibration, four power) fails a correct machinery at most this often."""

# Three tokens, two positions; p and q far apart so that a third of the drafts are rejected.
FIXTURE = exact.AutoregressiveFixture(
    target=np.array([[0.6, 0.3, 0.1], [0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]),
    draft=np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2], [0.6, 0.2, 0.2]]),
    vocab=3,
    length=2,
)
SHAPE = (3, 3)


_POLICIES: dict[str, stats.Policy] = {}


def verify_policy(env: dict) -> stats.Policy:
    """The policy a run installs: its properties collected under `env`'s profile (collected once per profile)."""
    profile = env.get("HYPOTHESIS_PROFILE", "dev")
    if profile in _POLICIES:
        return _POLICIES[profile]
    code = (
        "import pytest; from ncm_verify import stats; "
        "pytest.main(['properties', '--collect-only', '-q', '-p', 'no:xdist']); "
        "print('PLANNED', stats.current_policy().planned_tests)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    _POLICIES[profile] = stats.Policy(planned_tests=int(re.search(r"PLANNED (\d+)", done.stdout).group(1)))
    return _POLICIES[profile]


def chain_p_values(plan, runs: int) -> list[float]:
    """p-values of `runs` independent chain samples of `plan.n` sequences each."""
    values = []
    for seed in range(runs):
        run = drivers.run_chain(reference, FIXTURE, batch=plan.n, max_draft=1, mixed=False, seed=seed)
        outcomes = np.ravel_multi_index(tuple(run.sequences.T), SHAPE)
        # the uncorrected chi-square tail: at alpha 0.05 on this fixture it is uniform enough to test as such
        statistic = stats.chi_square_test("calibration", outcomes, plan).statistic
        values.append(float(scipy_stats.chi2.sf(statistic, plan.df)))
    return values


def fewest_rejections(runs: int, power: float, budget: float) -> int:
    """The largest k with P(Binomial(runs, power) < k) <= budget."""
    return int(scipy_stats.binom.ppf(budget, runs, power))


def keep(reports: Path, part: str, record: dict) -> None:
    """One part of calibration.json; the self-tests' conftest merges the parts."""
    (reports / "calibration").mkdir(exist_ok=True)
    record = {**record, "device": str(mx.default_device())}
    (reports / "calibration" / f"{part}.json").write_text(json.dumps(record, indent=2) + "\n")


def test_correct_kernels_reject_at_the_nominal_rate_with_uniform_p_values(reports):
    probs = exact.as_vector(exact.target_joint(FIXTURE), SHAPE)
    bins = stats.make_bins(probs, CALIBRATION_SAMPLES)
    critical = float(scipy_stats.chi2.isf(CALIBRATION_ALPHA, len(bins[1]) - 1))
    loose = stats.Plan(
        CALIBRATION_SAMPLES,
        CALIBRATION_ALPHA,
        *bins,
        min_detectable_tv=stats.min_detectable_tv(CALIBRATION_SAMPLES, len(bins[1]) - 1, critical),
        critical=critical,
    )
    p_values = chain_p_values(loose, CALIBRATION_RUNS)
    rejections = int(sum(p < CALIBRATION_ALPHA for p in p_values))
    binomial = scipy_stats.binomtest(rejections, CALIBRATION_RUNS, CALIBRATION_ALPHA).pvalue
    uniformity = scipy_stats.kstest(p_values, "uniform").pvalue
    keep(
        reports,
        "nominal",
        {
            "alpha": CALIBRATION_ALPHA,
            "runs": CALIBRATION_RUNS,
            "samples": CALIBRATION_SAMPLES,
            "rejections": rejections,
            "binomial_p_value": binomial,
            "ks_uniform_p_value": uniformity,
            "check_budget": CHECK_BUDGET,
            "p_values": p_values,
            "passed": bool(binomial >= CHECK_BUDGET and uniformity >= CHECK_BUDGET),
        },
    )
    assert binomial >= CHECK_BUDGET, f"{rejections}/{CALIBRATION_RUNS} rejections at alpha {CALIBRATION_ALPHA}"
    assert uniformity >= CHECK_BUDGET, f"p-values of correct kernels are not uniform (KS p = {uniformity:.3g})"


# --- Size: the true size of the worst plans make_plan builds, computed by summation, at the run's alphas.

SIZE_PROFILES = ("ci", "thorough")
SIZE_GRID = 0.25
"""Grid of the partial statistic when chi-square sizes are summed: rounded up, so the sums are upper bounds."""


def binomial_window(n: int, p: float) -> np.ndarray:
    """Counts of a Binomial(n, p) outside which less than 1e-15 lies (added to the sizes below)."""
    return np.arange(int(scipy_stats.binom.ppf(1e-15, n, p)), int(scipy_stats.binom.isf(1e-15, n, p)) + 2)


def every_count_vector(plan: stats.Plan) -> tuple[np.ndarray, np.ndarray]:
    """Pearson statistic and null probability of every likely count vector of a 2- or 3-bin plan, by brute force."""
    p, n = plan.bin_probs, plan.n
    axes = [binomial_window(n, q) for q in p[:-1]]
    counts = [c.ravel() for c in np.meshgrid(*axes, indexing="ij")]
    last = n - sum(counts)
    counts.append(last)
    possible = last >= 0
    counts = [c[possible] for c in counts]
    log_pmf = gammaln(n + 1) + sum(c * np.log(q) - gammaln(c + 1) for c, q in zip(counts, p))
    statistic = sum((c - n * q) ** 2 / (n * q) for c, q in zip(counts, p))
    return statistic, np.exp(log_pmf)


def brute_force_size(plan: stats.Plan) -> float:
    """P(reject) of an exact plan: the null mass of every count vector whose p-value the plan rejects.

    The p-value is a non-increasing function of the statistic, so the rejected
    vectors are those at or above the smallest rejected statistic, found by
    bisection over the vectors' own statistics.
    """
    statistic, mass = every_count_vector(plan)
    values = np.unique(statistic)

    def rejects(value: float) -> bool:
        return stats.p_value_of(value, plan.bin_probs, plan.n) <= plan.alpha

    low, high = 0, len(values)  # invariant: values[high:] rejected, values[:low] accepted
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if rejects(values[middle]) else (middle + 1, high)
    if high < len(values):
        assert rejects(values[-1]) and not (high and rejects(values[high - 1]))
    threshold = values[high] if high < len(values) else np.inf
    return float(mass[statistic >= threshold].sum()) + 1e-14 + (1.0 - float(mass.sum()))


def law_with_small_bins(df: int, smallest: int, probability: float) -> np.ndarray:
    """`smallest` outcomes of `probability`, the rest of the mass on the other df + 1 - smallest outcomes."""
    small = np.full(smallest, probability)
    large = df + 1 - smallest
    return np.concatenate([small, np.full(large, (1.0 - small.sum()) / large)])


def worst_plans(df: int, alpha: float) -> list[stats.Plan]:
    """Plans of df degrees of freedom at make_plan's n for df, their smallest bins at the pooling limit.

    A pooled remainder can hold any mass, so a bin at the limit is a plan make_plan
    can build (a superset of them: its path to n may stop short of some). The rest
    of the mass is one large bin (one or two for exact plans): the scans behind
    `stats.CHI_SQUARE_FRACTION` found more small bins worse.
    """
    limit = (stats.MIN_EXPECTED if stats.is_exact(df) else stats.CHI_SQUARE_MIN_EXPECTED) * (1 + 1e-9)
    uniform = stats.make_plan(np.full(df + 1, 1.0 / (df + 1)), alpha=alpha)
    if not stats.is_exact(df):  # a chi-square plan of large bins only is far from the worst, and too wide to sum
        return [stats.plan_at(law_with_small_bins(df, df, limit / uniform.n), uniform.n, alpha)]
    plans = [uniform] + [
        stats.plan_at(law_with_small_bins(df, smallest, limit / uniform.n), uniform.n, alpha)
        for smallest in range(1, df + 1)
    ]
    if df == 1:  # the df<1 branch: n grown until the rest stands at the limit
        plans.append(stats.make_plan(np.array([0.9996, 0.0004]), alpha=alpha))
    return plans


def test_a_p_value_by_summation_equals_the_brute_force_tail():
    """The conditioning sum that gives exact p-values and sizes agrees with summing every count vector."""
    for probs in (np.array([0.004, 0.4, 0.596]), np.array([0.3, 0.7])):
        plan = stats.make_plan(probs, alpha=1e-5)
        statistic, mass = every_count_vector(plan)
        for threshold in (2.0, 10.0, 20.0, 30.0):
            brute = float(mass[statistic >= threshold - 1e-9].sum())
            summed = stats.statistic_sf(plan.bin_probs, plan.n, threshold)
            bound = stats.statistic_sf(plan.bin_probs, plan.n, threshold, grid=SIZE_GRID)
            # the brute force's log-factorials of ~1e5 lose about 1e-10 relative
            assert math.isclose(summed, brute, rel_tol=1e-8, abs_tol=1e-12), (threshold, brute, summed)
            assert summed <= bound + 1e-15, (threshold, summed, bound)


def test_the_worst_plans_make_plan_builds_hold_their_size_at_the_run_alpha(reports, nested_environment):
    """Exact size (by summation) <= alpha for df 1-2 (exact p-values) and df 3-5 (corrected chi-square tail)."""
    rows = []
    for profile in SIZE_PROFILES:
        alpha = verify_policy(nested_environment(profile)).alpha
        for target in (1, 2, 3, 4, 5):
            for plan in worst_plans(target, alpha):
                df = plan.df
                assert df == target, (profile, target, df, plan.bin_probs * plan.n)
                if stats.is_exact(df):
                    size = brute_force_size(plan)
                else:
                    assert stats.p_value_of(plan.critical * (1 + 1e-9), plan.bin_probs, plan.n) <= alpha
                    assert stats.p_value_of(plan.critical * (1 - 1e-9), plan.bin_probs, plan.n) > alpha
                    size = stats.statistic_sf(plan.bin_probs, plan.n, plan.critical, grid=SIZE_GRID)
                smallest = float(plan.bin_probs.min() * plan.n)
                rows.append(
                    {
                        "profile": profile,
                        "alpha": alpha,
                        "df": df,
                        "n": plan.n,
                        "method": plan.method,
                        "smallest_expected": smallest,
                        "bins": len(plan.bin_probs),
                        "size": size,
                        "ratio": size / alpha,
                    }
                )
    worst = max(rows, key=lambda row: row["ratio"])
    over = sorted((row for row in rows if row["size"] > row["alpha"]), key=lambda row: -row["ratio"])
    ratios = {profile: max(r["ratio"] for r in rows if r["profile"] == profile) for profile in SIZE_PROFILES}
    keep(
        reports,
        "size",
        {"rows": rows, "largest_ratio": worst["ratio"], "worst": worst, "ratios": ratios, "passed": not over},
    )
    assert not over, "true size above alpha:\n" + "\n".join(
        f"  {r['profile']} df {r['df']} n {r['n']} smallest bin {r['smallest_expected']:.1f}: "
        f"size {r['size']:.3g} = {r['ratio']:.2f} x alpha {r['alpha']:.3g}"
        for r in over[:5]
    )


def test_every_record_names_the_exact_law_its_plan_was_made_from():
    """Equal probability vectors share a digest, a change in the last bit does not; records carry it."""
    probs = np.array([0.25, 0.5, 0.25])
    plan = stats.make_plan(probs, alpha=1e-5)
    assert plan.law_digest == stats.law_digest(probs.copy()) == stats.make_plan(probs.tolist(), alpha=1e-4).law_digest
    assert plan.law_digest != stats.law_digest(np.nextafter(probs, 1.0))
    assert int(plan.law_digest, 16) >= 0 and len(plan.law_digest) == 16
    record = stats.chi_square_test("digest", np.repeat(np.arange(3), [plan.n // 4, plan.n // 2, plan.n // 4]), plan)
    assert record.as_record()["law_digest"] == plan.law_digest and record.as_record()["method"] == "exact"


# --- The planner: it always answers, and its power check fails for too small an n.

MANY_OUTCOME_LAWS = {
    "uniform over 52": np.full(52, 1 / 52),
    "uniform over 100": np.full(100, 1 / 100),
    "uniform over 1000": np.full(1000, 1 / 1000),
    "Dirichlet(1), 2000 outcomes": np.random.default_rng(5).dirichlet(np.ones(2000)),
    "one likely outcome, 300 rare ones": np.r_[0.7, np.full(300, 0.3 / 300)],
}


@pytest.mark.parametrize("case", sorted(MANY_OUTCOME_LAWS))
def test_a_law_of_many_rare_outcomes_gets_a_plan_or_a_clear_refusal(case):
    """All but at most one probability below 20/1024 once made make_plan loop to 'did not converge'."""
    probs = MANY_OUTCOME_LAWS[case]
    assert np.sort(probs)[-2] < stats.MIN_EXPECTED / 1024
    try:
        plan = stats.make_plan(probs, alpha=3e-6)
    except stats.UntestableDistribution as reason:
        assert str(reason).startswith(("probs", "target_tv")), reason
        return
    limit = stats.MIN_EXPECTED if stats.is_exact(plan.df) else stats.CHI_SQUARE_MIN_EXPECTED
    assert plan.df >= 1 and plan.n <= stats.MAX_SAMPLES
    assert (plan.bin_probs * plan.n >= limit * (1 - 1e-9)).all(), plan.bin_probs.min() * plan.n
    assert stats.power_shortfall(plan) is None


POWER_CHECK_LAWS = {
    "coin": np.array([0.5, 0.5]),
    "three outcomes": np.array([0.3, 0.3, 0.4]),
    "uniform over 52": np.full(52, 1 / 52),
    "Dirichlet(0.3), 512 outcomes": np.random.default_rng(3).dirichlet(np.full(512, 0.3)),
}


@pytest.mark.parametrize("case", sorted(POWER_CHECK_LAWS))
def test_the_power_check_passes_the_planned_n_and_fails_a_shrunk_one(case):
    """The check simulates the plan's own test, so unlike the formula that chose n it can reject n."""
    plan = stats.make_plan(POWER_CHECK_LAWS[case], alpha=3e-6)
    assert stats.power_shortfall(plan) is None
    shrunk = dataclasses.replace(plan, n=int(0.6 * plan.n))
    assert stats.power_shortfall(shrunk) is not None, f"n = {shrunk.n} (0.6 x {plan.n}) passed the power check"


def test_the_power_bar_tells_099_from_095():
    """P(fail | power 0.99) is within the check's budget; P(pass | power 0.95) is stated here and in the README."""
    needed = fewest_rejections(POWER_RUNS, stats.POWER, CHECK_BUDGET)
    false_failure = scipy_stats.binom.cdf(needed - 1, POWER_RUNS, stats.POWER)
    false_pass = scipy_stats.binom.sf(needed - 1, POWER_RUNS, 0.95)
    assert false_failure <= CHECK_BUDGET and false_pass <= 1e-3, (needed, false_failure, false_pass)


# --- Power at the boundary: deviations the model says are caught with power exactly 0.99.

POWER_CASES = {
    "chain fixture, 9 outcomes": exact.as_vector(exact.target_joint(FIXTURE), SHAPE),
    # Many rare outcomes: most of them pooled, so df and n are those of a large fixture.
    "Dirichlet(0.3), 512 outcomes": np.random.default_rng(3).dirichlet(np.full(512, 0.3)),
}


def noncentrality(plan: stats.Plan, planted: np.ndarray) -> float:
    """n * sum((q - p)^2 / p) over the plan's bins, q the planted law binned alike."""
    possible = plan.bin_of >= 0
    binned = np.bincount(plan.bin_of[possible], weights=planted[possible], minlength=len(plan.bin_probs))
    return float(plan.n * ((binned - plan.bin_probs) ** 2 / plan.bin_probs).sum())


def boundary_deviation(plan: stats.Plan, probs: np.ndarray, shape: str) -> float:
    """The TV of `shape` at which the noncentral chi-square predicts power `stats.POWER` for the plan's test."""
    wanted = stats.noncentrality_at(plan.critical, plan.df)
    return optimize.brentq(lambda tv: noncentrality(plan, stats.deviate(probs, tv, shape)) - wanted, 1e-6, 0.2)


@pytest.mark.parametrize("shape", ["spread", "concentrated"])
@pytest.mark.parametrize("case", sorted(POWER_CASES))
def test_a_deviation_at_the_power_boundary_is_caught_at_the_predicted_rate(reports, case, shape, nested_environment):
    """A sampler off by the TV the model gives power 0.99 for, at the alpha and n a `make verify` run uses."""
    policy = verify_policy(nested_environment("ci"))
    probs = POWER_CASES[case]
    plan = stats.make_plan(probs, alpha=policy.alpha)
    tv = boundary_deviation(plan, probs, shape)
    planted = stats.deviate(probs, tv, shape)
    assert (planted >= 0).all() and math.isclose(0.5 * np.abs(planted - probs).sum(), tv, rel_tol=1e-9)
    predicted = float(scipy_stats.ncx2.sf(plan.critical, plan.df, noncentrality(plan, planted)))
    rng = np.random.default_rng(0)
    outcomes = np.arange(len(planted))
    # counts drawn at once and spelled out as outcomes: the same law as n draws, much faster
    caught = sum(
        not stats.chi_square_test("power", np.repeat(outcomes, rng.multinomial(plan.n, planted)), plan).passed
        for _ in range(POWER_RUNS)
    )
    needed = fewest_rejections(POWER_RUNS, stats.POWER, CHECK_BUDGET)
    keep(
        reports,
        f"planted {case} {shape}",
        {
            "name": f"{case}: TV {tv:.4f} ({shape}), predicted power {predicted:.3f}",
            "runs": POWER_RUNS,
            "rejections": int(caught),
            "rejection_rate": caught / POWER_RUNS,
            "needed": needed,
            "tv": tv,
            "predicted_power": predicted,
            "passed": bool(caught >= needed),
            "false_pass_at_power_095": float(scipy_stats.binom.sf(needed - 1, POWER_RUNS, 0.95)),
            "alpha": plan.alpha,
            "n": plan.n,
            "df": plan.df,
            "pooled_mass": plan.pooled_mass,
            "planned_tests": policy.planned_tests,
            "method": plan.method,
            "min_detectable_tv": plan.min_detectable_tv,
        },
    )
    assert caught >= needed, f"TV {tv:.4f} ({shape}): caught in {caught}/{POWER_RUNS} runs, power 0.99 needs {needed}"
