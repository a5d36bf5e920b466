"""The tree bench's exact figures and drawn trees: what `make bench` reports for trees rests on these."""

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify import reference
from ncm_verify.bench.trees import (
    BUDGET_SHAPES,
    TREE_UNVALIDATED,
    TreeLatencyCase,
    eagle_tree,
    exact_tokens_per_pass,
    format_latency,
    latency_grid,
    latency_row,
    tree_depths,
    tree_inputs,
    truncated,
)
from ncm_verify.harness.strategies import make_autoregressive_fixture
from ncm_verify.oracles.exact import chain_round

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


def test_eagle_trees_hold_top_k_siblings_on_each_of_their_levels():
    parents = eagle_tree(4, 3)
    assert len(parents) == 12 and max(tree_depths(parents)) == 3
    assert parents[:4] == (-1,) * 4 and parents[4:8] == (0,) * 4 and parents[8:] == (4,) * 4


def test_the_full_latency_grid_covers_the_issues_node_counts_vocabularies_and_batches():
    cases = latency_grid("full")
    eagle = {(c.nodes, c.vocab, c.batch) for c in cases if c.label.startswith("eagle")}
    assert {(n, v, b) for n in (16, 32, 64) for v in (32_000, 128_256) for b in (1, 8)} <= eagle
    assert all(c.depth <= 8 for c in cases) and {c.mode for c in cases} == {"top_k", "with_replacement"}
    assert len(latency_grid("quick")) < len(cases)
    with pytest.raises(ValueError, match="grid"):
        latency_grid("huge")


def test_tree_inputs_are_valid_top_k_trees_whose_chain_is_the_trees_depth():
    case = TreeLatencyCase("eagle", eagle_tree(3, 2), 96, 2)
    inputs = tree_inputs(case)
    tokens = np.array(inputs["tokens"])
    for b in range(case.batch):
        for parent in set(case.parents):
            siblings = [tokens[b, n] for n, p in enumerate(case.parents) if p == parent]
            assert len(set(siblings)) == len(siblings)
    outcome = reference.verify_tree(
        inputs["target"], inputs["draft"], inputs["tokens"], inputs["parents"], key=mx.random.key(0), mode="top_k"
    )
    assert np.array(outcome.num_accepted).max() <= case.depth
    assert inputs["chain"][2].shape == (case.batch, case.depth)


def test_a_latency_row_times_tree_chain_numpy_walk_and_floor_on_the_recorded_device():
    case = TreeLatencyCase("eagle", eagle_tree(2, 2), 64, 1)
    row = latency_row(reference, case, rounds=1, budget_s=0.0)
    assert set(row["contenders"]) == {"verify_tree", TREE_UNVALIDATED, "verify_chain", "numpy walk", "mlx floor"}
    ratios = row["contenders"]["verify_tree"]["ratios"]
    assert set(ratios) == {"x unvalidated", "x mlx reduction floor", "x numpy walk"}, "a goal's ratio is missing"
    assert row["device"] == str(mx.default_device()) and row["nodes"] == 4 and row["depth"] == 2
    assert row["contenders"]["verify_chain"]["x verify_chain"] == 1.0
    assert "verify_tree" in format_latency([row])
