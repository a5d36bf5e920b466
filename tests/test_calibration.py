"""The chi-square machinery is calibrated on correct kernels and has its stated power.

These checks run inside `make verify`, so their own false-failure chance comes
out of the run's family-wise budget: `stats.SELFTEST_BUDGET`, split six ways.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from scipy import stats as scipy_stats

from ncm_verify import drivers, exact, reference, stats

pytestmark = pytest.mark.teeth

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_ALPHA = 0.05
CALIBRATION_RUNS = 400
CALIBRATION_SAMPLES = 4096
POWER_RUNS = 200
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


def verify_policy(env: dict) -> stats.Policy:
    """The policy a `make verify` run installs: its properties collected under the `ci` profile."""
    code = (
        "import pytest; from ncm_verify import stats; "
        "pytest.main(['properties', '--collect-only', '-q', '-p', 'no:xdist']); "
        "print('PLANNED', stats.current_policy().planned_tests)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env,
        capture_output=True, text=True, check=True,
    )
    return stats.Policy(planned_tests=int(re.search(r"PLANNED (\d+)", done.stdout).group(1)))


def chain_p_values(plan, runs: int) -> list[float]:
    """p-values of `runs` independent chain samples of `plan.n` sequences each."""
    values = []
    for seed in range(runs):
        run = drivers.run_chain(reference, FIXTURE, batch=plan.n, max_draft=1, mixed=False, seed=seed)
        outcomes = np.ravel_multi_index(tuple(run.sequences.T), SHAPE)
        values.append(stats.chi_square_test("calibration", outcomes, plan).p_value)
    return values


def deviate(probs: np.ndarray, tv: float, shape: str) -> np.ndarray:
    """`probs` moved by exactly `tv` in total variation.

    "spread": every outcome scaled, up on one half of the mass and down on the other,
    so that sum((q - p)^2 / p) = 4 tv^2, the least any deviation of size tv gives.
    "concentrated": tv moved between the two likeliest outcomes, the case the safety factor is for.
    """
    if shape == "concentrated":
        first, second = np.argsort(probs)[::-1][:2]
        moved = probs.copy()
        moved[first] -= tv
        moved[second] += tv
        return moved
    up = np.zeros(len(probs), dtype=bool)
    up[np.argsort(probs)[::-2]] = True  # every other outcome by size: close to half the mass
    mass_up = probs[up].sum()
    return np.where(up, probs * (1 + tv / mass_up), probs * (1 - tv / (1 - mass_up)))


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
    df = len(bins[1]) - 1
    loose = stats.Plan(
        CALIBRATION_SAMPLES, CALIBRATION_ALPHA, *bins,
        min_detectable_tv=stats.min_detectable_tv(CALIBRATION_SAMPLES, df, CALIBRATION_ALPHA),
    )
    p_values = chain_p_values(loose, CALIBRATION_RUNS)
    rejections = int(sum(p < CALIBRATION_ALPHA for p in p_values))
    binomial = scipy_stats.binomtest(rejections, CALIBRATION_RUNS, CALIBRATION_ALPHA).pvalue
    uniformity = scipy_stats.kstest(p_values, "uniform").pvalue
    keep(reports, "nominal", dict(
        alpha=CALIBRATION_ALPHA, runs=CALIBRATION_RUNS, samples=CALIBRATION_SAMPLES, rejections=rejections,
        binomial_p_value=binomial, ks_uniform_p_value=uniformity, check_budget=CHECK_BUDGET, p_values=p_values,
    ))
    assert binomial >= CHECK_BUDGET, f"{rejections}/{CALIBRATION_RUNS} rejections at alpha {CALIBRATION_ALPHA}"
    assert uniformity >= CHECK_BUDGET, f"p-values of correct kernels are not uniform (KS p = {uniformity:.3g})"


POWER_CASES = {
    "chain fixture, 9 outcomes": exact.as_vector(exact.target_joint(FIXTURE), SHAPE),
    # Many rare outcomes: most of them pooled, so df and n are those of a large fixture.
    "Dirichlet(0.3), 512 outcomes": np.random.default_rng(3).dirichlet(np.full(512, 0.3)),
}


@pytest.mark.parametrize("shape", ["spread", "concentrated"])
@pytest.mark.parametrize("case", sorted(POWER_CASES))
def test_a_deviation_of_the_target_size_is_caught_with_the_stated_power(reports, case, shape, nested_environment):
    """A sampler off by exactly TV 0.02, at the alpha and n a `make verify` run uses."""
    policy = verify_policy(nested_environment("ci"))
    probs = POWER_CASES[case]
    plan = stats.make_plan(probs, alpha=policy.alpha)
    planted = deviate(probs, stats.TARGET_TV, shape)
    assert abs(0.5 * np.abs(planted - probs).sum() - stats.TARGET_TV) < 1e-12 and (planted >= 0).all()
    rng = np.random.default_rng(0)
    caught = sum(
        stats.chi_square_test("power", rng.choice(len(planted), size=plan.n, p=planted), plan).p_value < plan.alpha
        for _ in range(POWER_RUNS)
    )
    needed = fewest_rejections(POWER_RUNS, stats.POWER, CHECK_BUDGET)
    keep(reports, f"planted {case} {shape}", {
        "name": f"{case}: TV {stats.TARGET_TV}, {shape}", "runs": POWER_RUNS,
        "rejections": int(caught), "rejection_rate": caught / POWER_RUNS, "needed": needed,
        "alpha": plan.alpha, "n": plan.n, "df": plan.df, "pooled_mass": plan.pooled_mass,
        "planned_tests": policy.planned_tests,
        "min_detectable_tv": plan.min_detectable_tv,
    })
    assert caught >= needed, f"TV {stats.TARGET_TV} caught in {caught}/{POWER_RUNS} runs; power {stats.POWER} needs {needed}"
