"""The float64 tree oracle: its enumeration tells planted-bug rules apart, its step is the chain's on chains."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ncm_verify.harness.strategies import make_autoregressive_fixture, make_rows
from ncm_verify.oracles import exact, exact_tree
from ncm_verify.oracles.numpy_steps import numpy_chain_step, numpy_uniforms

FIXTURE_SEEDS = range(6)
"""Fixtures each planted rule is enumerated on: a bug must show on at least one."""
VISIBLE = 1e-3
"""A total variation from the target this large is a bug, not rounding (the reference rules stay below 1e-15)."""


@dataclasses.dataclass(frozen=True)
class NoResidualUpdate(exact_tree.ResidualRule):
    def reject(self, state, i, x):
        return state


@dataclasses.dataclass(frozen=True)
class CorrectionFromTarget:
    """The reference rule but for its correction, drawn from the node's target row: a rule without `pair`."""

    mode: str

    def start(self, p_row, q_row):
        return exact_tree.reference_rule(self.mode).start(p_row, q_row), np.asarray(p_row, dtype=np.float64)

    def accept(self, state, i, x):
        return exact_tree.reference_rule(self.mode).accept(state[0], i, x)

    def reject(self, state, i, x):
        return exact_tree.reference_rule(self.mode).reject(state[0], i, x), state[1]

    def correction(self, state):
        return state[1]

    def bonus(self, p_row):
        return p_row


PLANTED = {
    "no residual update": (NoResidualUpdate("with_replacement"), "with_replacement", (3,)),
    "without replacement judged against q": (exact_tree.ResidualRule("with_replacement"), "without_replacement", (3,)),
    "top-k judged as sampled from q": (exact_tree.ResidualRule("with_replacement"), "top_k", (2,)),
    "correction from p": (CorrectionFromTarget("with_replacement"), "with_replacement", (2,)),
}
"""Issue 19's planted bugs as sibling rules, with the mode the children were drawn by and a tree shape."""


def worst_gap(rule, mode: str, shape) -> float:
    gaps = []
    for seed in FIXTURE_SEEDS:
        fixture = make_autoregressive_fixture(4, len(shape) + 1, "independent", False, seed)
        laws = exact_tree.tree_laws(rule, fixture, shape, mode)
        gaps.append(exact.total_variation(laws.emitted, exact.target_joint(fixture)))
    return max(gaps)


@pytest.mark.parametrize("mode", exact_tree.MODES)
def test_the_reference_rules_enumerate_to_the_target_on_every_fixture(mode):
    assert worst_gap(exact_tree.reference_rule(mode), mode, (2, 2)) < 1e-12


@pytest.mark.parametrize("bug", sorted(PLANTED))
def test_each_planted_rule_enumerates_to_another_law_than_the_target(bug):
    rule, mode, shape = PLANTED[bug]
    gap = worst_gap(rule, mode, shape)
    assert gap > VISIBLE, f"{bug}: total variation {gap:.3g} from the target on every fixture"


@pytest.mark.parametrize("mode", exact_tree.MODES)
def test_the_laws_are_distributions_and_tokens_per_pass_is_one_more_than_the_mean_accepted_length(mode):
    fixture = make_autoregressive_fixture(3, 3, "some_rows_equal", False, 1)
    laws = exact_tree.tree_laws(exact_tree.reference_rule(mode), fixture, (2, 1), mode)
    for name in ("round", "emitted", "accepted_length"):
        assert abs(sum(getattr(laws, name).values()) - 1.0) < 1e-12, name
    mean = sum(k * p for k, p in laws.accepted_length.items())
    assert laws.tokens_per_pass == pytest.approx(1.0 + mean, abs=1e-12)


@pytest.mark.parametrize("mode", exact_tree.MODES)
def test_children_laws_sum_to_one_and_draw_distinct_children_unless_with_replacement(mode):
    q = np.array([0.5, 0.0, 0.3, 0.2])
    laws = exact_tree.children_law(q, 3, mode)
    assert abs(sum(p for _, p in laws) - 1.0) < 1e-15
    if mode != "with_replacement":
        assert all(len(set(children)) == len(children) for children, _ in laws)


def test_the_step_on_a_chain_is_the_numpy_chain_step():
    rng = np.random.default_rng(7)
    for _ in range(100):
        batch, drafts, vocab = 3, 3, 5
        target = make_rows(rng, batch * (drafts + 1), vocab).reshape(batch, drafts + 1, vocab)
        draft = make_rows(rng, batch * (drafts + 1), vocab).reshape(batch, drafts + 1, vocab)
        tokens = np.array([[rng.choice(vocab, p=draft[b, i]) for i in range(drafts)] for b in range(batch)])
        uniforms = numpy_uniforms(rng, (batch, 2, drafts + 1)).astype(np.float64)
        parents = np.tile(exact_tree.chain_parents(drafts), (batch, 1))
        chain = numpy_chain_step(target, draft[:, :drafts], tokens, np.full(batch, drafts), uniforms)
        tree = exact_tree.step(target, draft, tokens, parents, None, uniforms, mode="with_replacement")
        np.testing.assert_array_equal(tree.tokens, chain[0])
        np.testing.assert_array_equal(tree.num_accepted, chain[1])


def test_a_shape_deeper_than_the_fixture_allows_is_refused_naming_shape():
    fixture = make_autoregressive_fixture(3, 2, "independent", False, 0)
    with pytest.raises(ValueError, match="^shape: "):
        exact_tree.tree_laws(exact_tree.reference_rule("top_k"), fixture, (1, 1), "top_k")


def test_without_replacement_rows_narrower_than_the_branching_enumerate_to_the_target():
    """Draft rows keeping one or two tokens under three children per node: each node drafts its support alone (as
    the tree loop does) and the round's law is still the target's."""
    fixture = make_autoregressive_fixture(4, 3, "independent", False, 0)
    keep = np.random.default_rng(0).random(fixture.draft.shape) < 0.4
    keep[np.arange(len(keep)), np.argmax(fixture.draft, axis=1)] = True
    draft = np.where(keep, fixture.draft, 0.0)
    sparse = dataclasses.replace(fixture, draft=draft / draft.sum(axis=1, keepdims=True))
    assert (np.count_nonzero(sparse.draft, axis=1) < 3).any()
    laws = exact_tree.tree_laws(exact_tree.reference_rule("without_replacement"), sparse, (3, 2), "without_replacement")
    assert exact.total_variation(laws.emitted, exact.target_joint(sparse)) < 1e-12
