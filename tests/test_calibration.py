"""The chi-square machinery is calibrated on correct kernels and has power on a planted bug."""

import json

import mlx.core as mx
import numpy as np
import pytest
from scipy import stats as scipy_stats

from ncm_verify import drivers, exact, reference, stats
from ncm_verify.mutants import resample_from_target

pytestmark = pytest.mark.teeth

CALIBRATION_ALPHA = 0.05
CALIBRATION_RUNS = 400
CALIBRATION_SAMPLES = 4096
POWER_RUNS = 40
VERIFY_PLANNED_TESTS = 120
"""Chi-square tests a `make verify` run plans (4 statistical properties x 30 examples)."""
BINOMIAL_FLOOR = 1e-3
"""Self-test budget: a correct machinery fails this calibration once in a thousand runs."""

# Two tokens, two positions; p and q far apart so a third of the drafts are rejected.
FIXTURE = exact.AutoregressiveFixture(
    target=np.array([[0.6, 0.3, 0.1], [0.5, 0.25, 0.25], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]]),
    draft=np.array([[0.2, 0.3, 0.5], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2], [0.6, 0.2, 0.2]]),
    vocab=3,
    length=2,
)
SHAPE = (3, 3)


def chain_p_values(impl, plan, runs: int) -> list[float]:
    """p-values of `runs` independent chain samples of `plan.n` sequences each."""
    values = []
    for seed in range(runs):
        run = drivers.run_chain(impl, FIXTURE, batch=plan.n, max_draft=1, mixed=False, seed=seed)
        outcomes = np.ravel_multi_index(tuple(run.sequences.T), SHAPE)
        values.append(stats.chi_square_test("calibration", outcomes, plan).p_value)
    return values


def test_correct_kernels_reject_at_the_nominal_rate_and_a_planted_bug_at_the_planned_power(reports):
    probs = exact.as_vector(exact.target_joint(FIXTURE), SHAPE)
    loose = stats.Plan(
        CALIBRATION_SAMPLES, CALIBRATION_ALPHA, *stats.make_bins(probs, CALIBRATION_SAMPLES),
        min_detectable_tv=stats.min_detectable_tv(CALIBRATION_SAMPLES, 8, CALIBRATION_ALPHA),
    )
    p_values = chain_p_values(reference, loose, CALIBRATION_RUNS)
    rejections = int(sum(p < CALIBRATION_ALPHA for p in p_values))
    binomial = scipy_stats.binomtest(rejections, CALIBRATION_RUNS, CALIBRATION_ALPHA).pvalue
    uniformity = scipy_stats.kstest(p_values, "uniform").pvalue

    planned = stats.make_plan(probs, alpha=stats.Policy(planned_tests=VERIFY_PLANNED_TESTS).alpha)
    mutant_values = chain_p_values(resample_from_target, planned, POWER_RUNS)
    caught = int(sum(p < planned.alpha for p in mutant_values))
    summary = {
        "alpha": CALIBRATION_ALPHA, "runs": CALIBRATION_RUNS, "samples": CALIBRATION_SAMPLES,
        "rejections": rejections, "binomial_p_value": binomial, "ks_uniform_p_value": uniformity,
        "p_values": p_values, "device": str(mx.default_device()),
        "planted": {
            "name": "resample_from_target", "runs": POWER_RUNS, "rejections": caught,
            "rejection_rate": caught / POWER_RUNS, "alpha": planned.alpha, "n": planned.n,
            "min_detectable_tv": planned.min_detectable_tv,
        },
    }
    (reports / "calibration.json").write_text(json.dumps(summary, indent=2) + "\n")
    assert binomial >= BINOMIAL_FLOOR, f"{rejections}/{CALIBRATION_RUNS} rejections at alpha {CALIBRATION_ALPHA}"
    assert uniformity >= BINOMIAL_FLOOR, f"p-values of correct kernels are not uniform (KS p = {uniformity:.3g})"
    assert caught / POWER_RUNS >= stats.POWER - 0.05, f"planted bug caught in {caught}/{POWER_RUNS} runs only"
