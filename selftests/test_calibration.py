"""The goodness-of-fit machinery is calibrated, holds its size at the run's alpha, and has its stated power.

These checks run inside `make verify`. The sampling ones (three calibration checks and
the bars of every power case in `POWER_CASES`) spend the run's
`stats.SELFTEST_BUDGET`, split evenly (`CHECKS`); the size and planner checks are
computed exactly, bounded by importance sampling with a fixed seed, or drawn from
fixed seeds, and spend nothing.
"""

import dataclasses
import fcntl
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

from ncm_verify import reference
from ncm_verify.evidence.chi_square import POWER_CASES
from ncm_verify.harness import drivers, stats
from ncm_verify.oracles import exact

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_ALPHA = 0.05
CALIBRATION_RUNS = 400
CALIBRATION_SAMPLES = 4096
POWER_RUNS = 850
"""Enough runs that the bar tells power 0.99 from 0.95 (see `test_the_power_bar_tells_099_from_095`)."""
POWER_BARS = sum(
    1 if shape == "within pooled" else 1 + (shape in stats.RAW_MODEL_SHAPES)
    for shapes in POWER_CASES.values()
    for shape in shapes
)
"""One bar per power case at the boundary production relies on, one more at the raw model's where it holds."""
CHECKS = 3 + POWER_BARS
CHECK_BUDGET = stats.SELFTEST_BUDGET / CHECKS
"""Each sampling check below (binomial, KS, production p-values; every power bar) fails a correct machinery at most
this often."""

# Three tokens, two positions; p and q far apart so that a third of the drafts are rejected.
FIXTURE = exact.AutoregressiveFixture(
    target=np.array([[0.6, 0.3, 0.1], [0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]),
    draft=np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2], [0.6, 0.2, 0.2]]),
    vocab=3,
    length=2,
)
SHAPE = (3, 3)


_POLICIES: dict[str, stats.Policy] = {}
SIZE_PROFILES = ("ci", "thorough")
"""The profiles whose run alphas the self-tests use: the first policy asked for collects them all, side by side."""


def verify_policy(env: dict, folder: Path) -> stats.Policy:
    """The policy a run installs: its properties collected under `env`'s profile, once per profile for every
    worker of the session (the first collects, under a lock in the self-tests' `folder`; the others read its count).
    The first call collects `SIZE_PROFILES` too, side by side, under `env` with its profile replaced."""
    profile = env.get("HYPOTHESIS_PROFILE", "dev")
    if profile not in _POLICIES:
        profiles = list(dict.fromkeys((profile, *SIZE_PROFILES)))
        counted = {each: folder / f"planned-tests-{each}.txt" for each in profiles}
        with open(folder / "planned-tests.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            missing = [each for each in profiles if not counted[each].exists()]
            environments = [{**env, "HYPOTHESIS_PROFILE": each} for each in missing]
            for each, planned in zip(missing, collected_plans(environments)):
                counted[each].write_text(str(planned))
            for each in profiles:
                _POLICIES[each] = stats.Policy(planned_tests=int(counted[each].read_text()))
    return _POLICIES[profile]


def collected_plans(environments: list[dict]) -> list[int]:
    """The chi-square tests a run under each environment plans: its properties collected in a pytest of their
    own, all started at once (each is mostly imports and collection: on two cores they overlap)."""
    code = (
        "import pytest\nfrom ncm_verify.harness.run_state import run_state\n"
        "class Planned:\n"
        "    def pytest_collection_finish(self, session):\n"
        "        print('PLANNED', run_state(session.config).policy.planned_tests)\n"
        "pytest.main(['properties', '--collect-only', '-q', '-p', 'no:xdist'], plugins=[Planned()])"
    )
    command = [sys.executable, "-c", code]
    started = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for env in environments
    ]
    outputs = [process.communicate() for process in started]
    for process, (stdout, stderr) in zip(started, outputs):
        if process.returncode:
            raise subprocess.CalledProcessError(process.returncode, command, stdout, stderr)
    return [int(re.search(r"PLANNED (\d+)", stdout).group(1)) for stdout, _ in outputs]


def chain_p_values(plan, runs: int) -> tuple[list[float], list[float]]:
    """Plain chi-square tails and the properties' own p-values of `runs` chain samples of `plan.n` sequences."""
    plain, production = [], []
    for seed in range(runs):
        run = drivers.run_chain(reference, FIXTURE, batch=plan.n, max_draft=1, mixed=False, seed=seed)
        outcomes = np.ravel_multi_index(tuple(run.sequences.T), SHAPE)
        result = stats.chi_square_test("calibration", outcomes, plan)
        plain.append(float(scipy_stats.chi2.sf(result.statistic, plan.df)))
        production.append(result.p_value)
    return plain, production


def fewest_rejections(runs: int, power: float, budget: float) -> int:
    """The largest k with P(Binomial(runs, power) < k) <= budget."""
    return int(scipy_stats.binom.ppf(budget, runs, power))


def keep(reports: Path, part: str, record: dict) -> None:
    """One part of calibration.json; the self-tests' conftest merges the parts."""
    (reports / "calibration").mkdir(exist_ok=True)
    record = {**record, "device": str(mx.default_device())}
    (reports / "calibration" / f"{part}.json").write_text(json.dumps(record, indent=2) + "\n")


def test_correct_kernels_reject_at_the_nominal_rate_with_uniform_p_values(reports):
    """The chain kernel's samples follow the exact law: the plain chi-square tail is uniform on them.

    The plain tail (uniform enough at alpha 0.05 on 4096 samples of this 9-outcome law)
    tests the kernel and the sampler, not the correction. The properties' own p-values
    (`stats.p_value_of`, df 8 here: the corrected tail) are conservative by design, so
    they are checked one-sided: not rejected more often than alpha. Their size at the
    run's alphas is proven by summation below, not here.
    """
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
    p_values, production = chain_p_values(loose, CALIBRATION_RUNS)
    rejections = int(sum(p < CALIBRATION_ALPHA for p in p_values))
    binomial = scipy_stats.binomtest(rejections, CALIBRATION_RUNS, CALIBRATION_ALPHA).pvalue
    uniformity = scipy_stats.kstest(p_values, "uniform").pvalue
    production_rejections = int(sum(p <= CALIBRATION_ALPHA for p in production))
    production_excess = scipy_stats.binom.sf(production_rejections - 1, CALIBRATION_RUNS, CALIBRATION_ALPHA)
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
            "p_value_method": "plain chi-square tail (the kernel's law); the properties' p-values one-sided",
            "production_method": loose.method,
            "production_rejections": production_rejections,
            "production_excess_p_value": production_excess,
            "check_budget": CHECK_BUDGET,
            "p_values": p_values,
            "passed": bool(min(binomial, uniformity, production_excess) >= CHECK_BUDGET),
        },
    )
    assert binomial >= CHECK_BUDGET, f"{rejections}/{CALIBRATION_RUNS} rejections at alpha {CALIBRATION_ALPHA}"
    assert uniformity >= CHECK_BUDGET, f"p-values of correct kernels are not uniform (KS p = {uniformity:.3g})"
    assert production_excess >= CHECK_BUDGET, (
        f"the properties' p-values rejected {production_rejections}/{CALIBRATION_RUNS} at alpha {CALIBRATION_ALPHA}"
    )


# --- Size: the true size of the worst plans make_plan builds, computed by summation, at the run's alphas.

SMALLEST = "smallest reachable"
"""The alpha of `stats.MAX_PLANNED_TESTS` planned tests: no run's alpha is smaller (`stats.Policy` refuses)."""
SIZE_GRID = 0.25
"""Grid of the partial statistic when chi-square sizes are summed: rounded up, so the sums are upper bounds."""


def binomial_window(n: int, p: float) -> np.ndarray:
    """Counts of a Binomial(n, p) outside which less than 1e-15 lies (added to the sizes below)."""
    return np.arange(int(scipy_stats.binom.ppf(1e-15, n, p)), int(scipy_stats.binom.isf(1e-15, n, p)) + 2)


def every_count_vector(plan: stats.Plan) -> tuple[np.ndarray, np.ndarray]:
    """Pearson statistic and null probability of every likely count vector of a 2- or 3-bin plan, by brute force."""
    p, n = plan.bin_probs, plan.n
    axes = [binomial_window(n, q) for q in p[:-1]]
    places = [c.ravel() for c in np.meshgrid(*(np.arange(len(axis)) for axis in axes), indexing="ij")]
    last = n - sum(axis[place] for axis, place in zip(axes, places))
    possible = last >= 0
    places, last = [place[possible] for place in places], last[possible]
    # each enumerated bin's terms once per count of its window, laid out over the vectors: the same values
    counts = [*axes, last]
    log_terms = [c * np.log(q) - gammaln(c + 1) for c, q in zip(counts, p)]
    terms = [(c - n * q) ** 2 / (n * q) for c, q in zip(counts, p)]
    log_pmf = gammaln(n + 1) + (sum(t[place] for t, place in zip(log_terms, places)) + log_terms[-1])
    statistic = sum(t[place] for t, place in zip(terms, places)) + terms[-1]
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
    # normalised: the log-factorials of ~1e5 shift every mass alike by ~1e-10 relative, 1e-3 of alpha at MIN_ALPHA;
    # each window leaves out < 1e-15 of its marginal on either side
    left_out = 2e-15 * (len(plan.bin_probs) - 1)
    return float(mass[statistic >= threshold].sum() / mass.sum()) + left_out


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


def size_alphas(nested_environment, reports: Path) -> dict[str, float]:
    """The alphas the size is proven at: each profile's run, and the smallest any run can reach."""
    return {
        **{profile: verify_policy(nested_environment(profile), reports).alpha for profile in SIZE_PROFILES},
        SMALLEST: stats.MIN_ALPHA,
    }


def test_the_worst_plans_make_plan_builds_hold_their_size_at_the_run_alpha(reports, nested_environment):
    """Exact size (by summation) <= alpha for df 1-2 (exact p-values) and df 3-5 (corrected chi-square tail),
    at the `ci` and `thorough` alphas and at `stats.MIN_ALPHA`."""
    rows = []
    for profile, alpha in size_alphas(nested_environment, reports).items():
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
    ratios = {
        f"{profile} {method}": max(r["ratio"] for r in rows if r["profile"] == profile and r["method"] == method)
        for profile in (*SIZE_PROFILES, SMALLEST)
        for method in ("exact", "chi-square")
    }
    keep(
        reports,
        "size",
        {
            "rows": rows,
            "largest_ratio": worst["ratio"],
            "worst": worst,
            "ratios": ratios,
            "min_alpha": stats.MIN_ALPHA,
            "max_planned_tests": stats.MAX_PLANNED_TESTS,
            "passed": not over,
        },
    )
    assert not over, "true size above alpha:\n" + "\n".join(
        f"  {r['profile']} df {r['df']} n {r['n']} smallest bin {r['smallest_expected']:.1f}: "
        f"size {r['size']:.3g} = {r['ratio']:.2f} x alpha {r['alpha']:.3g}"
        for r in over[:5]
    )


LARGE_DF = 60
"""A plan of many bins (sampled laws reach df 273): too wide to sum, its size is bounded by importance sampling."""
IMPORTANCE_DRAWS = 100_000
IMPORTANCE_SIGMAS = 4.0
"""The size bound is the estimate plus this many standard errors."""


def importance_size(plan: stats.Plan, threshold: float, draws: int, seed: int = 0) -> tuple[float, float]:
    """P(X^2 >= threshold) under the plan's null, estimated by importance sampling, and its standard error.

    The proposal is the Dirichlet-multinomial of the same mean with every covariance
    inflated by threshold / df, so that the tail is its typical region; each draw is
    weighted by its exact multinomial / Dirichlet-multinomial likelihood ratio.
    """
    p, n = plan.bin_probs, plan.n
    inflation = max(threshold / plan.df, 1.5)
    concentration = (n - inflation) / (inflation - 1.0)
    shape = concentration * p
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, rng.dirichlet(shape, size=draws))
    statistic = ((counts - n * p) ** 2 / (n * p)).sum(axis=1)
    log_null = (counts * np.log(p)).sum(axis=1)
    log_proposal = (
        gammaln(concentration) - gammaln(n + concentration) + (gammaln(counts + shape) - gammaln(shape)).sum(axis=1)
    )
    weights = np.where(statistic >= threshold, np.exp(log_null - log_proposal), 0.0)
    return float(weights.mean()), float(weights.std() / math.sqrt(draws))


def test_a_plan_of_many_bins_holds_its_size_down_to_the_smallest_alpha(reports, nested_environment):
    """A df-60 plan of bins at the pooling limit: size <= alpha by importance sampling, at every alpha of
    `size_alphas`; the sampler is first checked against the summation on the worst df-3 plan."""
    check = worst_plans(3, stats.MIN_ALPHA)[0]
    summed = stats.statistic_sf(check.bin_probs, check.n, check.critical)
    estimate, error = importance_size(check, check.critical, IMPORTANCE_DRAWS)
    assert abs(estimate - summed) <= IMPORTANCE_SIGMAS * error, (
        f"importance sampling {estimate:.3g} +- {error:.2g} against the summed size {summed:.3g} of the worst df-3 plan"
    )
    rows = []
    for profile, alpha in size_alphas(nested_environment, reports).items():
        plan = worst_plans(LARGE_DF, alpha)[0]
        assert plan.df == LARGE_DF and not stats.is_exact(plan.df)
        estimate, error = importance_size(plan, plan.critical, IMPORTANCE_DRAWS)
        bound = estimate + IMPORTANCE_SIGMAS * error
        rows.append(
            {
                "profile": profile,
                "alpha": alpha,
                "df": plan.df,
                "n": plan.n,
                "method": plan.method,
                "smallest_expected": float(plan.bin_probs.min() * plan.n),
                "size_estimate": estimate,
                "standard_error": error,
                "size": bound,
                "ratio": bound / alpha,
            }
        )
    over = [row for row in rows if row["size"] > row["alpha"]]
    keep(
        reports,
        "size large df",
        {
            "rows": rows,
            "largest_ratio": max(row["ratio"] for row in rows),
            "check_against_summation": {"summed": summed, "estimate": estimate, "standard_error": error},
            "passed": not over,
        },
    )
    assert not over, "size bound above alpha: " + "; ".join(
        f"{r['profile']} df {r['df']}: {r['ratio']:.2f} x alpha {r['alpha']:.3g}" for r in over
    )


def test_every_record_names_its_binned_law_rounded_so_that_equal_laws_share_a_digest():
    """exp(log p), a last-bit change and a change inside the pooled remainder keep the digest; a change of a
    tested bin by more than 10^-LAW_DECIMALS does not; records carry it."""
    probs = np.array([0.25, 0.5, 0.25])
    plan = stats.make_plan(probs, alpha=1e-5)
    assert plan.law_digest == stats.law_digest(np.exp(np.log(probs))) == stats.law_digest(np.nextafter(probs, 1.0))
    assert plan.law_digest == stats.make_plan(probs.tolist(), alpha=1e-4).law_digest
    assert plan.law_digest != stats.law_digest(probs + np.array([1, -1, 0]) * 10.0**-stats.LAW_DECIMALS)
    assert int(plan.law_digest, 16) >= 0 and len(plan.law_digest) == 16
    record = stats.chi_square_test("digest", np.repeat(np.arange(3), [plan.n // 4, plan.n // 2, plan.n // 4]), plan)
    assert record.as_record()["law_digest"] == plan.law_digest and record.as_record()["method"] == "exact"
    rare = np.r_[0.5, 0.3, np.full(200, 0.2 / 200)]
    moved = rare.copy()
    moved[2:4] += np.array([1, -1]) * 0.2 / 400  # inside the pooled remainder
    pooled = stats.make_plan(rare, alpha=1e-5)
    assert pooled.pooled_mass > 0 and pooled.law_digest == stats.make_plan(moved, alpha=1e-5).law_digest


def test_an_outcome_index_out_of_range_is_refused_not_counted():
    """NumPy would wrap -1 to the last outcome; the test names `outcomes` instead."""
    plan = stats.make_plan(np.array([0.5, 0.5]), alpha=1e-5)
    for wrong in (-1, 2):
        outcomes = np.r_[np.zeros(plan.n - 1, dtype=np.int64), wrong]
        with pytest.raises(ValueError, match="^outcomes: .*got " + str(wrong)):
            stats.chi_square_test("range", outcomes, plan)


def test_a_run_planning_more_tests_than_the_size_is_proven_for_is_refused():
    """`stats.MIN_ALPHA` is the smallest alpha any run reaches: the policy refuses planned counts past it."""
    assert stats.Policy(planned_tests=stats.MAX_PLANNED_TESTS).alpha == stats.MIN_ALPHA
    with pytest.raises(ValueError, match="^planned_tests: "):
        stats.Policy(planned_tests=stats.MAX_PLANNED_TESTS + 1)


def test_corrected_p_values_reject_exactly_where_the_shrunk_tail_does():
    """The p-value of a chi-square plan inverts `chi_square_tail_at`: p <= alpha iff tail <= tail_at(alpha)."""
    for alpha in (1e-3, stats.CHI_SQUARE_KNEE, 5.8e-7, stats.MIN_ALPHA):
        tail = stats.chi_square_tail_at(alpha)
        assert math.isclose(stats.corrected_p_value(tail), alpha, rel_tol=1e-9), alpha
        assert stats.corrected_p_value(tail * 0.999) < alpha < stats.corrected_p_value(tail * 1.001)


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


# --- Power at the boundary: deviations of every shape at the noncentrality production relies on.


def power_law(case: str, alpha: float) -> tuple[np.ndarray, stats.Plan]:
    """The law of a power case of `POWER_CASES` and its plan at `alpha`."""
    if case == "chain fixture, 9 outcomes":
        probs = exact.as_vector(exact.target_joint(FIXTURE), SHAPE)
    elif case == "Dirichlet(0.3), 512 outcomes":  # most outcomes pooled: df and n of a large fixture
        probs = np.random.default_rng(3).dirichlet(np.full(512, 0.3))
    else:  # the plan the audit found the raw model worst on: three bins at the pooling limit, one large
        plan = worst_plans(3, alpha)[0]
        return plan.bin_probs, plan
    return probs, stats.make_plan(probs, alpha=alpha)


def noncentrality(plan: stats.Plan, planted: np.ndarray) -> float:
    """n * sum((q - p)^2 / p) over the plan's bins, q the planted law binned alike."""
    possible = plan.bin_of >= 0
    binned = np.bincount(plan.bin_of[possible], weights=planted[possible], minlength=len(plan.bin_probs))
    return float(plan.n * ((binned - plan.bin_probs) ** 2 / plan.bin_probs).sum())


def planted_law(plan: stats.Plan, probs: np.ndarray, tv: float, shape: str) -> np.ndarray:
    return stats.deviate(probs, tv, shape, bin_of=plan.bin_of, pooled=plan.bin_of == plan.pooled_bin)


def boundary_deviation(plan: stats.Plan, probs: np.ndarray, shape: str, discount: float) -> float:
    """The TV of `shape` whose noncentrality is `discount` x the one the raw model gives power `stats.POWER`."""
    wanted = discount * stats.noncentrality_at(plan.critical, plan.df)
    return optimize.brentq(lambda tv: noncentrality(plan, planted_law(plan, probs, tv, shape)) - wanted, 1e-7, 0.3)


def rejections(plan: stats.Plan, planted: np.ndarray, seed: int) -> int:
    """Of `POWER_RUNS` samples of the planted law, how many the plan's own test rejects."""
    # each run's counts drawn at once (the same law as n draws) and tested as counts, all runs together: the
    # verdicts of `stats.chi_square_test` on the outcomes they spell out (tests/test_stats_counts.py)
    counts = np.random.default_rng(seed).multinomial(plan.n, planted, size=POWER_RUNS)
    return int(stats.rejected_counts(plan, counts).sum())


@pytest.mark.parametrize(("case", "shape"), [(case, shape) for case, shapes in POWER_CASES.items() for shape in shapes])
def test_a_deviation_at_the_power_boundary_is_caught_at_the_predicted_rate(reports, case, shape, nested_environment):
    """A sampler off by the TV at which the discounted model (what n is chosen by) predicts power 0.99, at the
    alpha and n a `make verify` run uses; the raw model's boundary is run beside it and, on the shapes it holds
    for (`stats.RAW_MODEL_SHAPES`), must pass the same bar. Inside the pooled remainder the test is blind: the
    whole remainder moved is rejected at the size, and the plan's raw-law TV covers it."""
    policy = verify_policy(nested_environment("ci"), reports)
    probs, plan = power_law(case, policy.alpha)
    needed = fewest_rejections(POWER_RUNS, stats.POWER, CHECK_BUDGET)
    row = {
        "name": f"{case}: {shape}",
        "case": case,
        "shape": shape,
        "runs": POWER_RUNS,
        "needed": needed,
        "false_pass_at_power_095": float(scipy_stats.binom.sf(needed - 1, POWER_RUNS, 0.95)),
        "alpha": plan.alpha,
        "n": plan.n,
        "df": plan.df,
        "pooled_mass": plan.pooled_mass,
        "planned_tests": policy.planned_tests,
        "method": plan.method,
        "min_detectable_tv": plan.min_detectable_tv,
        "raw_detectable_tv": plan.raw_detectable_tv,
    }
    if shape == "within pooled":
        members = probs[plan.bin_of == plan.pooled_bin]
        tv = float(members.sum() - members.max())  # every pooled outcome's mass onto the likeliest
        planted = planted_law(plan, probs, tv, shape)
        caught = rejections(plan, planted, seed=0)
        allowed = int(scipy_stats.binom.isf(CHECK_BUDGET, POWER_RUNS, plan.alpha))
        row |= {
            "tv": tv,
            "noncentrality": noncentrality(plan, planted),
            "predicted_power": plan.alpha,
            "rejections": caught,
            "rejection_rate": caught / POWER_RUNS,
            "needed": None,
            "allowed": allowed,
            "passed": bool(caught <= allowed and tv <= plan.pooled_mass < plan.raw_detectable_tv),
        }
        keep(reports, f"planted {case} {shape}", row)
        assert caught <= allowed, f"binning cannot see TV {tv:.4f} inside the remainder, yet {caught} rejected"
        assert tv <= plan.pooled_mass, f"TV {tv:.4f} moved inside a remainder of mass {plan.pooled_mass:.4f}"
        return
    tv = boundary_deviation(plan, probs, shape, stats.POWER_SAFETY)
    raw_tv = boundary_deviation(plan, probs, shape, 1.0)
    planted, raw_planted = planted_law(plan, probs, tv, shape), planted_law(plan, probs, raw_tv, shape)
    assert (planted >= 0).all() and math.isclose(0.5 * np.abs(planted - probs).sum(), tv, rel_tol=1e-9)
    caught, raw_caught = rejections(plan, planted, seed=0), rejections(plan, raw_planted, seed=1)
    raw_held = shape not in stats.RAW_MODEL_SHAPES or raw_caught >= needed
    row |= {
        "tv": tv,
        "predicted_power": stats.POWER,
        "raw_model_power": float(scipy_stats.ncx2.sf(plan.critical, plan.df, noncentrality(plan, planted))),
        "rejections": int(caught),
        "rejection_rate": caught / POWER_RUNS,
        "raw_tv": raw_tv,
        "raw_rejections": int(raw_caught),
        "raw_rejection_rate": raw_caught / POWER_RUNS,
        "raw_bar_applies": shape in stats.RAW_MODEL_SHAPES,
        "passed": bool(caught >= needed and raw_held),
    }
    keep(reports, f"planted {case} {shape}", row)
    assert caught >= needed, f"TV {tv:.4f} ({shape}): caught in {caught}/{POWER_RUNS} runs, power 0.99 needs {needed}"
    assert raw_held, f"TV {raw_tv:.4f} ({shape}, raw model): caught in {raw_caught}/{POWER_RUNS}, needs {needed}"


def test_a_too_small_n_fails_the_boundary_of_every_shape():
    """The bar has teeth on every shape: n shrunk to 0.4x, the deviation at the full n's boundary is caught less
    often than the power check allows (simulated with the plan's own test)."""
    probs, plan = power_law("Dirichlet(0.3), 512 outcomes", 4.6e-6)
    draws = 2000
    floor = int(scipy_stats.binom.ppf(stats.POWER_CHECK_RISK, draws, stats.POWER_CHECK_AT)) / draws
    shrunk = dataclasses.replace(plan, n=int(0.4 * plan.n))
    shrunk = dataclasses.replace(shrunk, critical=stats.critical_statistic(plan.bin_probs, shrunk.n, plan.alpha))
    for shape in stats.plan_shapes(plan):
        tv = boundary_deviation(plan, probs, shape, stats.POWER_SAFETY)
        rate = stats.simulated_power(shrunk, tv, shape, draws=draws)
        assert rate < floor, f"{shape}: n = {shrunk.n} (0.4 x {plan.n}) caught TV {tv:.4f} in {rate:.3f} >= {floor}"
