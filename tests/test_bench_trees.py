"""The tree bench's exact figures and drawn trees: what `make bench` reports for trees rests on these."""

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.bench.trees import BUDGET_SHAPES, exact_tokens_per_pass, truncated
from ncm_verify.harness.strategies import make_autoregressive_fixture
from ncm_verify.harness.tree_drivers import draw_trees
from ncm_verify.oracles.exact import chain_round
from ncm_verify.oracles.exact_tree import MODES, children_law, tree_nodes
from ncm_verify.reference import tree

FIXTURE = make_autoregressive_fixture(4, 5, "independent", False, 3)


def test_the_chain_of_the_budget_has_the_chain_enumerators_tokens_per_pass():
    # The chain oracle is a separate enumeration: its mean round length is the chain's tokens per pass.
    law = chain_round(FIXTURE, (), 4)
    expected = sum(len(tokens) * probability for tokens, probability in law.items())
    assert exact_tokens_per_pass(FIXTURE, BUDGET_SHAPES["chain 1-1-1-1"], "with_replacement") == pytest.approx(
        expected, abs=1e-12
    )


def test_truncated_fixtures_keep_the_rows_of_the_shorter_contexts():
    short = truncated(FIXTURE, 2)
    assert short.length == 2 and short.target.shape == (1 + 4, 4)
    assert np.array_equal(short.row(short.draft, (3,)), FIXTURE.row(FIXTURE.draft, (3,)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", list(BUDGET_SHAPES.values()), ids=list(BUDGET_SHAPES))
def test_drawn_trees_have_the_shape_and_pass_the_reference_checks(shape, mode):
    arrays = draw_trees(FIXTURE, shape, mode, batch=16, seed=1)
    counts = arrays["num_nodes"]
    assert np.all(counts <= len(tree_nodes(shape)))
    full = counts == len(tree_nodes(shape))
    assert np.array_equal(arrays["parents"][full], np.tile(tree_nodes(shape), (int(full.sum()), 1)))
    inputs = (mx.array(arrays[name]) for name in ("target", "draft", "tokens", "parents"))
    outcome = tree.verify_tree(*inputs, key=mx.random.key(0), num_nodes=mx.array(counts), mode=mode)
    assert np.all(np.array(outcome.num_accepted) <= counts)


def test_drawn_top_k_children_are_the_enumerators():
    arrays = draw_trees(FIXTURE, (3,), "top_k", batch=2, seed=0)
    ((children, _),) = children_law(FIXTURE.row(FIXTURE.draft, ()), 3, "top_k")
    assert arrays["tokens"][0].tolist() == list(children)
