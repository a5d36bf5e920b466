"""C13: tree verification (multi-draft with and without replacement, deterministic top-k) preserves the target law.

Proven by enumeration (every draft tree a mode draws, every acceptance branch), by the kernel's
sampled outcomes against the target's joint law, and by each `apply_tree` decision against the
float64 step on drawn uniforms; relations tie verify to apply, a chain to `verify_chain`, and a
batch to its rows.
"""

from functools import partial

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import event, given, note, reject
from hypothesis import strategies as st

from ncm_verify.harness import checks
from ncm_verify.harness.kernels import TREE
from ncm_verify.harness.strategies import (
    REJECTING_RELATIONS,
    autoregressive_fixtures,
    draft_lengths,
    fresh_law_settings,
    seeds,
    step_cases,
)
from ncm_verify.harness.tree_driver import assert_chain_tree_agree, run_tree
from ncm_verify.harness.tree_strategies import modes, sibling_cases, tree_shapes, walk_cases, walk_offsets
from ncm_verify.oracles import exact, exact_tree

pytestmark = pytest.mark.claim("C13")

SAMPLED_OUTCOMES = 512
"""Largest V^T a sampling property tests (as the chain's): n near 1e5 at TV 0.02."""
ENUMERATED_OUTCOMES = 1296
"""Largest V^T an enumeration takes: the with-replacement tree of 8 nodes stays under a second."""


def tree_call(fixture, shape, mode) -> str:
    return f"tree_laws(reference_rule({mode!r}), fixture(V={fixture.vocab}, T={fixture.length}), shape={shape})"


@given(shape=tree_shapes, mode=modes, data=st.data())
def test_tree_verification_enumerates_to_the_target_joint(shape, mode, data):
    fixture = data.draw(
        autoregressive_fixtures(
            max_vocab=6,
            min_length=len(shape) + 1,
            max_length=len(shape) + 1,
            max_outcomes=ENUMERATED_OUTCOMES,
            salt=(*shape, exact_tree.MODES.index(mode)),
        ),
        label="fixture",
    )
    laws = exact_tree.tree_laws(exact_tree.reference_rule(mode), fixture, shape, mode)
    call = tree_call(fixture, shape, mode)
    checks.assert_distributions_equal(
        laws.emitted, exact.target_joint(fixture), label="enumerated tree output vs target joint", call=call
    )
    lengths = {k: p for k, p in laws.accepted_length.items() if p > 0}
    assert set(lengths) <= set(range(len(shape) + 1)), (
        f"accepted lengths {sorted(lengths)} beyond depth\n  call: {call}"
    )
    event("mode", mode)


@given(max_draft=draft_lengths, data=st.data())
def test_a_chain_shaped_tree_enumerates_to_the_chains_round_law(max_draft, data):
    """The tree of one child per depth drawn i.i.d. is a chain: its round law is `exact.chain_round`'s."""
    fixture = data.draw(autoregressive_fixtures(min_length=max_draft + 1, max_length=max_draft + 1), label="fixture")
    shape = (1,) * max_draft
    laws = exact_tree.tree_laws(exact_tree.reference_rule("with_replacement"), fixture, shape, "with_replacement")
    checks.assert_distributions_equal(
        laws.round,
        exact.chain_round(fixture, (), max_draft),
        label="chain-shaped tree round vs chain round",
        call=tree_call(fixture, shape, "with_replacement"),
    )


@pytest.mark.statistical(tests=1)
@fresh_law_settings()
@given(shape=tree_shapes, mode=modes, mixed=st.booleans(), seed=seeds, data=st.data())
def test_tree_verification_samples_the_target_joint(impl, shape, mode, mixed, seed, data):
    # One-hot targets make the joint a single outcome: the enumeration covers them.
    fixture = data.draw(
        autoregressive_fixtures(
            max_outcomes=SAMPLED_OUTCOMES,
            min_length=len(shape) + 1,
            one_hot_targets=st.just(False),
            relations=st.sampled_from(REJECTING_RELATIONS),
            salt=(*shape, exact_tree.MODES.index(mode), mixed, seed),
        ),
        label="fixture",
    )
    outcomes = (fixture.vocab,) * fixture.length
    probs = exact.as_vector(exact.target_joint(fixture), outcomes)
    call = f"run_tree(V={fixture.vocab}, T={fixture.length}, shape={shape}, mode={mode!r}, mixed={mixed}, seed={seed})"
    note(call)
    event("mode", mode)

    def sample(n):
        run = run_tree(impl, fixture, shape=shape, mode=mode, batch=n, mixed=mixed, seed=seed)
        return np.ravel_multi_index(tuple(run.sequences.T), outcomes)

    checks.assert_sampler_matches(
        "tree output", probs, sample, seed=seed, call=call, label_outcome=checks.outcome_labels(outcomes, "tokens")
    )


def vocabulary_band(vocab: int) -> str:
    return "V > 2^16" if vocab > 2**16 else "V <= 8" if vocab <= 8 else "8 < V <= 2^16"


@pytest.mark.parametrize("mode", exact_tree.MODES)
@given(data=st.data())
def test_each_sibling_is_judged_by_the_residual_the_earlier_ones_left_and_its_own_q(impl, mode, data):
    """Earlier siblings rejected, the last judged 0.1% above or below r(x)/q_i(x): no rounding can excuse it."""
    step = data.draw(sibling_cases(TREE, mode), label="siblings")
    event("vocabulary", vocabulary_band(step.case.vocab))
    outcome = step.case.apply(impl, mx.array(step.uniforms))
    comparison = exact_tree.compare_tree_step(*step.exact_args, step.uniforms.astype(np.float64), *outcome, mode=mode)
    checks.assert_step_matches(comparison, label="apply_tree's sibling decisions vs float64", call=step.describe())


@given(step=step_cases(TREE, options={"mode": "with_replacement"}), seed=seeds)
def test_a_chain_is_verified_as_verify_chain_verifies_it(impl, step, seed):
    """parents [-1, 0, 1, ...] with num_nodes drafts: apply_chain's and verify_chain's outcome on the same uniforms.

    Equal, or apart only where both stand within float32 rounding of a boundary of the float64 chain step
    (the exact checks' one rule): a port's own chain may round a draw apart from the tree it inherits.
    """
    assert_chain_tree_agree(impl, step, mx.random.key(seed), provenance=impl.provenance)


# --- walks where tree bugs live: later siblings undecided, levels below rejected siblings, half rows ---


@pytest.mark.parametrize("mode", exact_tree.MODES)
@given(data=st.data())
def test_walks_below_rejected_siblings_take_the_float64_walks_decisions_at_every_level(impl, mode, data):
    """2-3 levels of siblings drafted from most of q and rejected, each level's last judged 2^-k from its boundary:
    the decisions and the correction of the float64 walk, the residual and tried ids carried sibling to sibling."""
    step = data.draw(walk_cases(TREE, mode), label="walks")
    event("dtype", step.dtype)
    outcome = step.case.apply(impl, mx.array(step.uniforms))
    TREE.well_formed(step.case, outcome)
    comparison = exact_tree.compare_tree_step(*step.exact_args, step.uniforms.astype(np.float64), *outcome, mode=mode)
    checks.assert_step_matches(comparison, label="apply_tree's walk vs float64", call=step.describe())


def subtree_below(step, b: int, node: int):
    """Sequence b's subtree under `node` as a tree of its own: its rows, tokens, parents and uniforms."""
    target, draft, tokens, parents, _ = (np.asarray(a) for a in step.exact_args)
    below = [node]
    for m in range(node + 1, tokens.shape[1]):
        if parents[b, m] in below:
            below.append(m)
    nodes = below[1:]
    index = {old: new for new, old in enumerate(nodes)}
    rows = [node + 1] + [m + 1 for m in nodes]
    columns = nodes + [tokens.shape[1]]
    uniforms = step.uniforms[b : b + 1][:, :, columns].copy()
    uniforms[:, 1] = step.uniforms[b : b + 1, 1, : len(columns)]
    args = tuple(a[b : b + 1][:, mx.array(rows)] for a in step.case.args[:2])
    return (
        *args,
        mx.array(tokens[b : b + 1, nodes].astype(np.int32)),
        mx.array(np.array([[index.get(int(parents[b, m]), -1) for m in nodes]], np.int32)),
        mx.array([len(nodes)], dtype=mx.int32),
        mx.array(uniforms),
    )


@given(mode=modes, data=st.data())
def test_a_walk_that_reaches_a_node_goes_on_as_a_fresh_walk_from_it(impl, mode, data):
    """After an accepted node, residual, mass and tried ids start afresh: the walk below it is that subtree's own,
    so nothing the rejected siblings above left (their residual, their ids) carries into the next level."""
    step = data.draw(walk_cases(TREE, mode), label="walks")
    outcome = step.case.apply(impl, mx.array(step.uniforms))
    TREE.well_formed(step.case, outcome)
    tokens, accepted, path = (np.array(a) for a in outcome)
    reached = [b for b in range(step.case.batch) if accepted[b] > 0]
    if not reached:
        reject()
    for b in reached:
        node = int(path[b, 0])
        alone = impl.apply_tree(*subtree_below(step, b, node), mode=mode)
        call = f"sequence {b}'s subtree under node {node} alone vs the walk through it: {step.describe()}"
        checks.assert_equal(np.array(alone.num_accepted), accepted[b : b + 1] - 1, label="accepted below", call=call)
        checks.assert_equal(
            np.array(alone.tokens)[0], tokens[b, 1 : 1 + alone.tokens.shape[1]], label="tokens below", call=call
        )


@given(mode=modes, data=st.data())
def test_the_first_child_of_a_node_reached_past_rejected_siblings_is_judged_by_its_parents_rows_alone(impl, mode, data):
    """The state carried into the next level, checked exactly: a node reached after its earlier siblings were
    rejected starts its level with mass 1 and nothing tried, so its first child c is accepted iff
    u q_c(x) < p(x) on the node's own rows; u is set 2^-k above or below that float64 boundary."""
    step = data.draw(walk_cases(TREE, mode), label="walks")
    target, draft, tokens, parents, _ = (np.asarray(a) for a in step.exact_args)
    walked = exact_tree.step(*step.exact_args, step.uniforms, mode=mode)
    uniforms, judged = step.uniforms.copy(), {}
    for b in range(step.case.batch):
        node = int(walked.path[b, 0])
        children = [n for n in range(tokens.shape[1]) if parents[b, n] == node] if node >= 0 else []
        if not children or not any(parents[b, m] == parents[b, node] for m in range(node)):
            continue  # not reached, a leaf, or reached as the level's first child (nothing rejected before it)
        c, x = children[0], int(tokens[b, children[0]])
        q_x = 1.0 if mode == "top_k" else float(draft[b, node + 1, x])
        ratio = float(target[b, node + 1, x]) / q_x
        if not 0 < ratio < 1:
            continue
        below = data.draw(st.booleans(), label=f"sequence {b}: u below the boundary")
        offset = 2.0 ** -data.draw(walk_offsets, label="offset exponent")
        uniforms[b, 0, c] = np.float32(ratio * (1.0 + (-offset if below else offset)))
        judged[b] = (node, c, below)
    if not judged:
        reject()
    tokens_out, accepted, path = (np.array(a) for a in step.case.apply(impl, mx.array(uniforms)))
    for b, (node, c, below) in judged.items():
        call = f"sequence {b}, node {node} reached, its first child {c} judged {'below' if below else 'above'} its "
        call += f"boundary u q_c(x) = p(x): {step.describe()}"
        checks.assert_equal(path[b, 0], node, label="node reached", call=call)
        checks.assert_equal(path[b, 1] == c, below, label="first child accepted", call=call)


@given(mode=modes, data=st.data())
def test_a_batch_of_walks_decides_as_each_walk_alone(impl, mode, data):
    """Walks sharing ids, each sequence's residual and tried set its own: state shared across a batch shows."""
    step = data.draw(walk_cases(TREE, mode, min_batch=2), label="walks")
    batched = step.case.apply(impl, mx.array(step.uniforms))
    for b in range(step.case.batch):
        alone = step.case.rows(b, b + 1).apply(impl, mx.array(step.uniforms[b : b + 1]))
        for field in batched._fields:
            call = f"sequence {b} of {step.describe()}"
            checks.assert_equal(getattr(batched, field)[b : b + 1], getattr(alone, field), label=field, call=call)


@given(mode=modes, data=st.data())
def test_half_precision_walks_decide_as_their_float32_values(impl, mode, data):
    """Half rows, several rejected siblings per level, uniforms 2^-k from their boundaries: the walk of the same
    numbers widened to float32, exactly (a residual kept in half precision between siblings shows here)."""
    step = data.draw(walk_cases(TREE, mode, dtypes=("float16", "bfloat16")), label="walks")
    uniforms = mx.array(step.uniforms)
    half = step.case.apply(impl, uniforms)
    widened = step.case.cast(mx.float32).apply(impl, uniforms)
    for field in half._fields:
        label = f"{step.dtype} vs float32 of the same values: {field}"
        checks.assert_equal(getattr(half, field), getattr(widened, field), label=label, call=step.describe())


# --- bad input ------------------------------------------------------------------------------


def valid_call():
    """A valid batch of two trees: a fork at the root (sequence 0) and a chain cut to two nodes (sequence 1)."""
    target = mx.array(np.full((2, 4, 3), 1 / 3), dtype=mx.float32)
    draft = mx.array(np.full((2, 4, 3), 1 / 3), dtype=mx.float32)
    return dict(
        target_probs=target,
        draft_probs=draft,
        tree_tokens=mx.array([[0, 1, 2], [1, 2, -1]], dtype=mx.int32),
        parents=mx.array([[-1, -1, 0], [-1, 0, -1]], dtype=mx.int32),
        num_nodes=mx.array([3, 2], dtype=mx.int32),
        key=mx.random.key(0),
        mode="without_replacement",
    )


def with_entry(name: str, b: int, n, value):
    def corrupt(arguments):
        values = np.array(arguments[name])
        values[b, n] = value
        return {**arguments, name: mx.array(values, dtype=arguments[name].dtype)}

    return corrupt


def replaced(name: str, value):
    return lambda arguments: {**arguments, name: value(arguments[name]) if callable(value) else value}


BAD_INPUTS = {
    "a parent after its child": (with_entry("parents", 0, 1, 2), "parents"),
    "a cycle (a node its own parent)": (with_entry("parents", 0, 2, 2), "parents"),
    "a cycle through a later node": (
        lambda a: with_entry("parents", 0, 2, 1)(with_entry("parents", 0, 1, 2)(a)),
        "parents",
    ),
    "a parent above N": (with_entry("parents", 0, 2, 7), "parents"),
    "a parent below -1": (with_entry("parents", 0, 2, -2), "parents"),
    "children of a padded node": (
        lambda a: with_entry("parents", 1, 2, 1)(replaced("num_nodes", mx.array([3, 1], dtype=mx.int32))(a)),
        "parents",
    ),
    "a parent that is padding": (replaced("num_nodes", mx.array([3, 1], dtype=mx.int32)), "parents"),
    "draft rows of another shape": (replaced("draft_probs", lambda d: d[:, :3]), "draft_probs"),
    "tree tokens of another shape": (replaced("tree_tokens", lambda t: t[:, :2]), "tree_tokens"),
    "parents of another shape": (replaced("parents", lambda p: p[:1]), "parents"),
    "padding (-1) for a real node": (with_entry("tree_tokens", 0, 2, -1), "tree_tokens"),
    "repeated siblings drawn without replacement": (with_entry("tree_tokens", 0, 1, 0), "tree_tokens"),
    "a drawn token of draft probability 0": (
        replaced("draft_probs", lambda d: mx.array(np.array([[[0.5, 0.0, 0.5]] * 4] * 2), dtype=mx.float32)),
        "tree_tokens",
    ),
}
"""Each class of bad tree structure, and the argument its ValueError must name. The classes every
kernel meets (NaN, unnormalised rows, shapes, ids out of range, dtypes, keys, an unknown mode) are drawn
for the tree too by test_bad_input.py, from its spec in the kernel registry."""


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_tree_input_is_refused_with_a_value_error_naming_the_argument(impl, what):
    corrupt, name = BAD_INPUTS[what]
    arguments = corrupt(valid_call())
    impl.verify_tree(**valid_call())  # the valid call stands: only the corruption is refused
    checks.assert_raises_naming(partial(impl.verify_tree, **arguments), [name], description=f"verify_tree with {what}")
