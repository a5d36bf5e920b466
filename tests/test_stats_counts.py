"""Count vectors tested all at once give bit for bit what `chi_square_test` gives on the outcomes they spell out."""

import numpy as np
import pytest

from ncm_verify.harness import stats

LAWS = {
    "coin (exact, df 1)": (np.array([0.5, 0.5]), 64),
    "three outcomes (exact, df 2)": (np.array([0.2, 0.3, 0.5]), 128),
    "a pooled remainder (exact)": (np.array([0.45, 0.45, 0.04, 0.03, 0.03]), 96),
    "many bins (chi-square)": (np.r_[np.full(12, 0.07), np.full(32, 0.16 / 32)], 4096),
    "impossible outcomes": (np.array([0.0, 0.4, 0.0, 0.6]), 64),
}


def edge_rows(probs: np.ndarray, n: int) -> np.ndarray:
    """All n on each outcome in turn (zero counts elsewhere, impossible ones included), and n split evenly."""
    rows = [np.eye(len(probs), dtype=np.int64)[i] * n for i in range(len(probs))]
    even = np.full(len(probs), n // len(probs))
    even[0] += n - even.sum()
    return np.array([*rows, even])


def count_rows(probs: np.ndarray, n: int) -> np.ndarray:
    drawn = np.random.default_rng(0).multinomial(n, probs, size=40)
    return np.concatenate([drawn, edge_rows(probs, n)])


def scalar_results(plan: stats.Plan, rows: np.ndarray) -> list[stats.ChiSquareResult]:
    """The definition: each row spelled out as outcomes and tested alone."""
    outcomes = np.arange(rows.shape[1])
    return [stats.chi_square_test("counts", np.repeat(outcomes, row), plan) for row in rows]


@pytest.mark.parametrize("case", sorted(LAWS))
def test_counts_tested_at_once_equal_each_row_tested_as_outcomes(case):
    probs, n = LAWS[case]
    plan = stats.plan_at(probs, n, 1e-3)
    rows = count_rows(probs, n)
    results = scalar_results(plan, rows)
    statistics, impossible = stats.count_statistics(plan, rows)
    assert statistics.tolist() == [result.statistic for result in results]
    assert impossible.tolist() == [result.impossible_count for result in results]
    p_values = stats.p_values_of(statistics, plan.bin_probs, plan.n)
    assert p_values.tolist() == [result.p_value for result in results]
    assert stats.rejected_counts(plan, rows).tolist() == [not result.passed for result in results]


def test_binned_counts_equal_the_bincount_of_the_outcomes_on_many_bins():
    probs = np.random.default_rng(1).dirichlet(np.full(300, 0.3))
    plan = stats.make_plan(probs, alpha=1e-5)
    rows = np.random.default_rng(2).multinomial(plan.n, probs, size=25)
    observed, impossible = stats.binned_counts(plan, rows)
    for row, binned in zip(rows, observed):
        bins = plan.bin_of[np.repeat(np.arange(len(probs)), row)]
        assert binned.tolist() == np.bincount(bins, minlength=len(plan.bin_probs)).astype(np.float64).tolist()
    assert plan.pooled_bin is not None and not impossible.any()


def test_a_single_bin_and_a_single_row_keep_their_shapes():
    """One bin holding every outcome: each row's statistic is Pearson's of its one count."""
    plan = stats.Plan(10, 1e-3, np.zeros(3, dtype=np.int64), np.array([1.0]), 0.0, np.inf)
    rows = np.array([[10, 0, 0], [3, 3, 4], [0, 0, 10]])
    statistics, impossible = stats.count_statistics(plan, rows)
    assert statistics.tolist() == [stats.pearson_statistic(np.array([10.0]), np.array([10.0]))] * 3
    assert impossible.tolist() == [0, 0, 0]
    one, _ = stats.count_statistics(plan, rows[1])
    assert one.shape == (1,)


def test_p_values_of_repeated_exact_statistics_are_each_the_scalar_p_value():
    probs, n = np.array([0.2, 0.3, 0.5]), 128
    statistics = np.array([[0.0, 3.5, 0.0], [3.5, 12.25, 40.0]])
    p_values = stats.p_values_of(statistics, probs, n)
    assert p_values.shape == statistics.shape
    assert p_values.ravel().tolist() == [stats.p_value_of(float(s), probs, n) for s in statistics.ravel()]


def test_a_paired_mean_at_the_detectable_difference_stands_its_alphas_and_its_powers_t_quantiles_above_zero():
    rng = np.random.default_rng(7)
    difference = rng.normal(size=40)
    difference += stats.paired_detectable_difference(difference - difference.mean(), 1e-3) - difference.mean()
    t = stats.scipy_stats().t
    statistic = difference.mean() / (difference.std(ddof=1) / np.sqrt(len(difference)))
    assert statistic == pytest.approx(t.ppf(1 - 1e-3, 39) + t.ppf(stats.POWER, 39))
    assert stats.paired_improvement_p_value(difference, np.zeros(40)) < 1e-3
