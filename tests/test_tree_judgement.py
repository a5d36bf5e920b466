"""The published tree rules, judged by the exact enumerator: the findings the report states, computed."""

import numpy as np
import pytest

from ncm_verify.oracles.exact import AutoregressiveFixture
from ncm_verify.oracles.exact_tree import MODES, reference_rule, round_law
from ncm_verify.peers.tree_judgement import Finding, format_table, judge, shapes_by_size
from ncm_verify.peers.tree_rules import EagleRule, SGLangRule, SpecInferRule, walk_tree
from ncm_verify.tolerances import EXACT_IDENTITY

SMALL = {"max_nodes": 3, "per_size": 6}
"""Every shape up to 3 nodes, vocabularies 2-4, 6 fixtures each: 108 enumerations per exact verdict."""


def judged(rule, mode: str) -> Finding:
    return judge(getattr(rule, "name", mode), rule, mode, **SMALL)


def test_shapes_come_fewest_nodes_first():
    assert shapes_by_size(3) == [(1,), (1, 1), (2,), (1, 1, 1), (1, 2), (3,)]


@pytest.mark.parametrize("mode", MODES)
def test_the_reference_rule_of_each_mode_is_exact(mode):
    finding = judged(reference_rule(mode), mode)
    assert finding.exact, format_table([finding])
    assert finding.tried == 108 and finding.largest_tv <= EXACT_IDENTITY


@pytest.mark.parametrize(
    ("rule", "mode"),
    [(SpecInferRule(), "with_replacement"), (EagleRule(), "top_k"), (SGLangRule(1.0, 1.0), "top_k")],
    ids=["specinfer", "eagle", "sglang-defaults"],
)
def test_each_published_rule_is_exact_in_the_mode_it_targets(rule, mode):
    finding = judged(rule, mode)
    assert finding.exact, format_table([finding])


@pytest.mark.parametrize(("single", "acc"), [(0.5, 0.5), (1.0, 0.5), (0.5, 1.0)])
def test_sglang_below_its_default_thresholds_fails_on_one_node(single, acc):
    finding = judged(SGLangRule(single, acc), "top_k")
    assert not finding.exact
    assert (finding.parents, finding.vocab) == ((-1,), 2), format_table([finding])
    # One top-1 child x: the law emits x with P(accept) where the target says p(x).
    p, q = finding.target[0], finding.draft[0]
    x = int(np.argmax(q))
    accept = 1.0 if p[x] >= single else min(1.0, p[x] / acc)
    assert finding.largest_tv == pytest.approx(abs(accept - p[x]), abs=1e-12)
    assert finding.largest_tv > 0.1


def test_specinfer_over_a_trie_needs_two_siblings_and_three_tokens_to_fail():
    finding = judged(SpecInferRule(merge=True), "with_replacement")
    assert not finding.exact
    assert (finding.parents, finding.vocab) == ((-1, -1), 3), format_table([finding])
    assert finding.largest_tv > EXACT_IDENTITY


def test_sglang_at_its_defaults_fails_when_siblings_repeat_a_token():
    # i.i.d. children repeat tokens; prob_acc counts a repeated token's mass twice.
    finding = judged(SGLangRule(1.0, 1.0), "with_replacement")
    assert not finding.exact
    assert (finding.parents, finding.vocab) == ((-1, -1), 2), format_table([finding])


def test_eagle_skips_repeated_tokens_and_so_stays_exact_for_sampled_children():
    assert judged(EagleRule(), "with_replacement").exact


def test_specinfer_ratio_on_top_k_children_fails_on_one_node():
    finding = judged(SpecInferRule(), "top_k")
    assert not finding.exact and finding.parents == (-1,)


@pytest.mark.parametrize(("single", "acc"), [(1.0, 1.0), (0.5, 0.5), (1.0, 0.3), (0.35, 1.0)])
def test_the_sglang_walk_with_one_coin_per_node_has_the_enumerated_acceptance_law(single, acc):
    # A fan of the top 3 children of q; the first child's uniform is the node's coin, swept over a grid.
    rule = SGLangRule(single, acc)
    p, q = np.array([0.1, 0.3, 0.2, 0.4]), np.array([0.1, 0.2, 0.3, 0.4])
    fixture = AutoregressiveFixture(target=np.vstack([p] * 5), draft=np.vstack([q] * 5), vocab=4, length=2)
    tokens, parents = np.array([3, 2, 1]), np.array([-1, -1, -1])  # top_k's children of q, in order
    grid = 2000
    walked = np.zeros(4)
    for k in range(grid):
        uniforms = np.full((2, 4), 0.5)
        uniforms[0, 0] = (k + 0.5) / grid
        uniforms[0, 1:] = 0.999  # later siblings' own uniforms must not matter
        path, emitted = walk_tree(rule, fixture.target, fixture.draft, tokens, parents, 3, uniforms)
        if path:
            walked[emitted[0]] += 1 / grid
    exact = np.zeros(4)
    for outcome, probability in round_law(rule, fixture, (3,), "top_k").items():
        if len(outcome) == 2:  # an accepted child, then its bonus
            exact[outcome[0]] += probability
    # Each child's coin interval has two ends, each off by at most half a grid step.
    assert np.abs(walked - exact).max() <= 1 / grid, (walked, exact)


def test_the_specinfer_module_steps_as_the_float64_reference_step_on_i_i_d_children():
    # SpecInfer's MSS is the with-replacement reference rule: same uniforms, same outcome, node for node.
    from ncm_verify.harness.tree_driver import fixture_rows, grow_trees
    from ncm_verify.oracles.exact_tree import step
    from ncm_verify.peers import specinfer

    rng = np.random.default_rng(5)
    fixture = AutoregressiveFixture(
        rng.dirichlet(np.ones(4), size=21), rng.dirichlet(np.ones(4), size=21), vocab=4, length=3
    )
    inputs = grow_trees(rng, (2, 2), "with_replacement", rng.integers(0, 7, size=64), fixture_rows(fixture))
    uniforms = rng.uniform(1e-6, 1 - 1e-6, size=(64, 2, 7))
    args = inputs.kernel_args()
    expected = step(*(np.array(a) for a in args), uniforms, mode="with_replacement")
    outcome = specinfer.apply_tree(*args, uniforms, mode="with_replacement")
    assert len(set(expected.num_accepted.tolist())) >= 3  # rejections and acceptances at several depths
    for name, want, got in zip(("tokens", "num_accepted", "path"), expected, outcome):
        assert np.array_equal(np.array(got), want), name
