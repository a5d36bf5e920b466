"""The exact expected accepted length against brute-force enumeration over every drafted block."""

from itertools import product

import numpy as np
import pytest

from ncm_verify.oracles.exact_acceptance import Component, expected_accepted_length

V, K, CONTEXTS = 3, 3, 2


def _row(seed: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(list(seed) or [0])
    return rng.dirichlet(np.full(V, 0.7))


def _target(keys):
    return np.stack([_row((1, c, *prefix)) for c, prefix in keys])


def _draft(keys):
    return np.stack([_row((2, c, *prefix)) for c, prefix in keys])


def _brute(components, draft=None):
    """Sum over every block x of prod_j min(p_j, q_j) up to each depth, for each component."""
    total = np.zeros(CONTEXTS)
    for comp in components:
        for depth in range(1, K + 1):
            for block in product(range(V), repeat=depth):
                mass = comp.weight
                for j in range(depth):
                    p = _target([(comp.context, block[:j])])[0]
                    q = comp.rows[j] if comp.rows is not None else draft([(comp.context, block[:j])])[0]
                    mass *= min(p[block[j]], q[block[j]])
                total[comp.context] += mass
    return total


def _ncm_components():
    rng = np.random.default_rng(5)
    comps = []
    for c in range(CONTEXTS):
        weights = rng.dirichlet(np.ones(4))
        comps += [Component(c, float(w), rng.dirichlet(np.full(V, 0.7), size=K)) for w in weights]
    return comps


def test_factorised_mixture_drafter_matches_enumeration_when_nothing_is_truncated():
    comps = _ncm_components()
    result = expected_accepted_length(comps, CONTEXTS, K, _target, floor=0.0)
    np.testing.assert_allclose(result.lower, _brute(comps), rtol=1e-12)
    assert np.all(result.bound == 0)


def test_autoregressive_drafter_matches_enumeration_when_nothing_is_truncated():
    comps = [Component(c, 1.0) for c in range(CONTEXTS)]
    result = expected_accepted_length(comps, CONTEXTS, K, _target, _draft, floor=0.0)
    np.testing.assert_allclose(result.lower, _brute(comps, _draft), rtol=1e-12)


@pytest.mark.parametrize("floor", [0.01, 0.05, 0.2])
def test_truncated_recursion_brackets_the_exact_value_within_its_stated_bound(floor):
    comps = _ncm_components()
    exact = _brute(comps)
    result = expected_accepted_length(comps, CONTEXTS, K, _target, floor=floor)
    assert np.all(result.lower <= exact + 1e-12) and np.all(exact <= result.upper + 1e-12)
    assert np.any(result.bound > 0), "the floor truncated nothing: the bound went untested"


def test_one_token_block_accepts_with_one_minus_total_variation():
    comps = [Component(0, 1.0, np.array([[0.5, 0.3, 0.2]]))]
    result = expected_accepted_length(comps, 1, 1, lambda keys: np.array([[0.2, 0.3, 0.5]] * len(keys)))
    assert result.lower[0] == pytest.approx(1 - 0.3)
