"""The draw slack of exactly summed rows: exact in every float32 order, and tight enough to fail a moved threshold."""

import mlx.core as mx
import numpy as np

from ncm_verify.harness.strategies import make_exact_mass_moved_rows, make_exactly_summed_rows, make_tiny_q_rows
from ncm_verify.mlx_lm_real.models import SUCCESSOR_STEPS, TinySpec, make_successor_draft
from ncm_verify.oracles import exact
from ncm_verify.tolerances import cdf_boundary_slack, draw_boundary_slack, exactly_summed

REAL_VOCAB = 128_256


def test_an_exactly_summed_row_sums_to_the_same_float32_totals_in_every_order():
    rng = np.random.default_rng(0)
    row = make_exactly_summed_rows(rng, 1, REAL_VOCAB)[0]
    assert exactly_summed(row) and row.sum() == 1.0
    single = row.astype(np.float32)
    sequential = np.cumsum(single, dtype=np.float32)
    assert np.array_equal(sequential.astype(np.float64), np.cumsum(row))  # a scan, left to right
    assert np.float32(single.sum()) == 1.0  # NumPy's pairwise reduction
    assert np.cumsum(single[::-1], dtype=np.float32)[-1] == 1.0  # right to left
    blocks = single.reshape(-1, 32).sum(axis=1, dtype=np.float32)  # a blocked scan's block totals
    assert np.cumsum(blocks, dtype=np.float32)[-1] == 1.0


def test_rows_off_the_grid_or_with_a_total_not_a_power_of_two_are_not_exactly_summed():
    row = make_exactly_summed_rows(np.random.default_rng(1), 1, 64)[0]
    assert not exactly_summed(row / 3)  # the total is not a power of two
    assert not exactly_summed(np.array([0.5, 0.25, 0.25 - 2.0**-40, 2.0**-40]))  # 2^40 grid steps: past 2^24
    assert not exactly_summed(np.array([0.5, -0.25, 0.75]))
    assert exactly_summed(np.array([0.0, 1.0]))


def test_a_moved_mass_leaves_a_residual_of_exactly_a_power_of_two_and_exactly_summed():
    rng = np.random.default_rng(2)
    target = make_exactly_summed_rows(rng, 8, 4096)
    draft = make_exact_mass_moved_rows(rng, target)
    assert (draft >= 0).all() and np.array_equal(draft.sum(axis=1), np.ones(8))
    for p, q in zip(target, draft):
        mass = np.maximum(p - q, 0.0).sum()
        assert np.frexp(mass)[0] == 0.5, mass
        assert exactly_summed(exact.residual(p, q))
        assert q[np.argmax(p)] < p[np.argmax(p)]  # taken from the likeliest id first


def test_a_moved_mass_smaller_than_the_likeliest_weight_still_leaves_a_residual_with_steps_in_some_rows():
    """Taken greedily it comes from one id: a residual without steps, where no correction's uniform can sit."""
    rng = np.random.default_rng(4)
    target = make_exactly_summed_rows(rng, 64, 4096)
    draft = make_exact_mass_moved_rows(rng, target)
    residuals = np.maximum(target - draft, 0.0)
    small = residuals.sum(axis=1) < target.max(axis=1)
    stepped = np.count_nonzero(residuals[small], axis=1) >= 2
    assert small.sum() >= 16 and stepped.mean() > 1 / 3, (small.sum(), stepped.mean())


def test_the_slack_of_an_exactly_summed_row_at_V_128256_fails_a_threshold_moved_by_1e_6():
    """The any-order bound excused this draw (1.5e-2 of the total); two ulps do not."""
    rng = np.random.default_rng(3)
    weights = make_exactly_summed_rows(rng, 1, REAL_VOCAB)[0]
    cumulative = np.cumsum(weights)
    k = int(np.searchsorted(cumulative, 0.6))
    u = np.nextafter(np.float32(cumulative[k]), np.float32(0))  # just below the boundary: draws id k
    exact_id = exact.inverse_cdf(weights, float(u))
    moved_id = exact.inverse_cdf(weights, float(np.float32(u * (1 + 1e-6))))
    assert exact_id == k < moved_id  # 6e-7 past it: over the boundary (and any weights below 6e-7 after it)
    assert draw_boundary_slack(weights) < 1e-6 * float(u)
    assert not exact.draw_is_excused(weights, float(u), moved_id, exact_id)
    assert cdf_boundary_slack(1.0, int(np.count_nonzero(weights))) > 1e-2  # what the any-order bound excuses


def test_tiny_q_rows_keep_a_sliver_of_p_at_its_likeliest_ids_and_sum_to_one():
    rng = np.random.default_rng(4)
    target = make_exactly_summed_rows(rng, 6, 8)
    draft = make_tiny_q_rows(rng, target)
    top = np.argmax(target, axis=1)
    ratio = draft[np.arange(6), top] / target[np.arange(6), top]
    assert ((ratio >= 1e-7 * 0.999) & (ratio <= 1e-3 * 1.001)).all()
    assert np.allclose(draft.sum(axis=1), 1.0) and (draft >= 0).all()


def test_a_successor_draft_puts_mass_on_the_successors_of_the_last_token_only():
    spec = TinySpec(vocab_size=8, seed=5)
    model = make_successor_draft(spec)
    for temperature in (0.7, 1.5):
        rows = np.array(mx.softmax(model(mx.array([[3, 1, 6, 0]])).astype(mx.float32) / temperature, axis=-1))[0]
        for token, row in zip((3, 1, 6, 0), rows):
            assert set(np.flatnonzero(row > 0)) == {(token + s) % 8 for s in SUCCESSOR_STEPS}
