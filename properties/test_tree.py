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
from hypothesis import event, given, note
from hypothesis import strategies as st

from ncm_verify.harness import checks
from ncm_verify.harness.strategies import (
    REJECTING_RELATIONS,
    autoregressive_fixtures,
    draft_lengths,
    fresh_law_settings,
    seeds,
)
from ncm_verify.harness.tree_driver import run_tree
from ncm_verify.harness.tree_strategies import modes, sibling_cases, tree_shapes, tree_step_cases
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
def test_apply_tree_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, mode, data):
    """Boundary uniforms, half rows, nearly equal p and q, ids past 65 535; excused only within float32 drift."""
    case = data.draw(tree_step_cases(modes=st.just(mode)), label="step")
    event("vocabulary", vocabulary_band(case.args[0].shape[-1]))
    event("mode", case.mode)
    event("dtype", case.dtype)
    call = case.describe()
    outcome = case.apply(impl, case.uniforms)
    comparison = exact_tree.compare_tree_step(
        *case.exact_args, case.uniforms.astype(np.float64), outcome, mode=case.mode
    )
    checks.assert_step_matches(comparison, label="apply_tree vs float64 step", call=call)


@pytest.mark.parametrize("mode", exact_tree.MODES)
@given(data=st.data())
def test_each_sibling_is_judged_by_the_residual_the_earlier_ones_left_and_its_own_q(impl, mode, data):
    """Earlier siblings rejected, the last judged 0.1% above or below r(x)/q_i(x): no rounding can excuse it."""
    case = data.draw(sibling_cases(mode), label="siblings")
    event("vocabulary", vocabulary_band(case.args[0].shape[-1]))
    outcome = case.apply(impl, case.uniforms)
    comparison = exact_tree.compare_tree_step(
        *case.exact_args, case.uniforms.astype(np.float64), outcome, mode=case.mode
    )
    checks.assert_step_matches(comparison, label="apply_tree's sibling decisions vs float64", call=case.describe())


def assert_same_outcome(first, second, *, label: str, call: str) -> None:
    for field in ("tokens", "num_accepted", "path"):
        checks.assert_equal(getattr(first, field), getattr(second, field), label=f"{label}: {field}", call=call)


@pytest.mark.claim("C13", "C11")
@given(case=tree_step_cases(), seed=seeds)
def test_verify_tree_equals_apply_tree_on_the_uniforms_it_draws_compiled_or_not(impl, case, seed):
    """verify_tree(key) == apply_tree(draw_uniforms(key)) == mx.compile(apply_tree)(the same uniforms)."""
    key = mx.random.key(seed)
    uniforms = np.array(impl.draw_uniforms(key, case.batch, (2, case.exact_args[2].shape[1] + 1)))
    call = f"verify_tree(key=mx.random.key({seed})) vs apply_tree(draw_uniforms(key, ...)) on {case.describe()}"
    note(call)
    # Half and nearly equal rows need not pass float32's input checks: this property is about the uniforms.
    verified = case.verify(impl, key, validate=False)
    applied = case.apply(impl, uniforms)
    assert_same_outcome(verified, applied, label="verify vs apply", call=call)
    compiled = mx.compile(lambda *arrays: tuple(impl.apply_tree(*arrays, mode=case.mode)))
    assert_same_outcome(
        type(applied)(*compiled(*case.args, mx.array(uniforms))), applied, label="compiled vs eager", call=call
    )


def chain_case(case):
    """The chain a tree case would be with one child per node: the tree's nodes 0..N-1 made a path."""
    target, draft, tokens, parents, num_nodes = case.args
    count = tokens.shape[1]
    chain_parents = mx.where(mx.arange(count)[None] < num_nodes[:, None], mx.arange(-1, count - 1)[None], -1).astype(
        mx.int32
    )
    return target, draft, tokens, chain_parents, num_nodes


@given(case=tree_step_cases(modes=st.just("with_replacement")), seed=seeds)
def test_a_chain_is_verified_as_verify_chain_verifies_it(impl, case, seed):
    """parents [-1, 0, 1, ...] with num_nodes drafts: apply_chain's and verify_chain's outcome on the same uniforms."""
    target, draft, tokens, parents, num_nodes = chain_case(case)
    key = mx.random.key(seed)
    call = f"chain of {tokens.shape[1]} nodes, num_nodes={np.array(num_nodes).tolist()}: {case.describe()}"
    note(call)
    as_tree = impl.apply_tree(target, draft, tokens, parents, num_nodes, mx.array(case.uniforms))
    as_chain = impl.apply_chain(target, draft[:, :-1], tokens, num_nodes, mx.array(case.uniforms))
    for field in ("tokens", "num_accepted"):
        checks.assert_equal(getattr(as_tree, field), getattr(as_chain, field), label=f"apply: {field}", call=call)
    tree = impl.verify_tree(target, draft, tokens, parents, key=key, num_nodes=num_nodes, validate=False)
    chain = impl.verify_chain(target, draft[:, :-1], tokens, key=key, num_draft=num_nodes, validate=False)
    for field in ("tokens", "num_accepted"):
        checks.assert_equal(getattr(tree, field), getattr(chain, field), label=f"verify: {field}", call=call)


@given(case=tree_step_cases(), seed=seeds)
def test_a_batch_of_trees_gives_the_outputs_of_its_rows_one_at_a_time(impl, case, seed):
    keys = mx.random.split(mx.random.key(seed), case.batch)
    call = f"verify_tree(B={case.batch}, key=split(key({seed}), B)) on {case.describe()}"
    note(call)
    batched = case.verify(impl, keys, validate=False)
    for row in range(case.batch):
        alone = case.rows(row, row + 1).verify(impl, keys[row : row + 1], validate=False)
        picked = type(batched)(*(field[row : row + 1] for field in batched))
        assert_same_outcome(picked, alone, label=f"row {row}", call=call)


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
    "unnormalised target rows": (replaced("target_probs", lambda t: t * 1.5), "target_probs"),
    "unnormalised draft rows": (replaced("draft_probs", lambda d: d * 0.5), "draft_probs"),
    "NaN in the target": (replaced("target_probs", lambda t: mx.where(mx.arange(3) == 0, mx.nan, t)), "target_probs"),
    "NaN in the draft": (replaced("draft_probs", lambda d: mx.where(mx.arange(3) == 1, mx.nan, d)), "draft_probs"),
    "a negative probability": (
        replaced("draft_probs", lambda d: d + mx.array([-0.5, 0.25, 0.25])),
        "draft_probs",
    ),
    "an unknown mode": (replaced("mode", "beam"), "mode"),
    "draft rows of another shape": (replaced("draft_probs", lambda d: d[:, :3]), "draft_probs"),
    "draft rows of another vocabulary": (
        replaced("draft_probs", lambda d: mx.concatenate([d, mx.zeros_like(d[..., :1])], axis=-1)),
        "draft_probs",
    ),
    "tree tokens of another shape": (replaced("tree_tokens", lambda t: t[:, :2]), "tree_tokens"),
    "parents of another shape": (replaced("parents", lambda p: p[:1]), "parents"),
    "a token id equal to V": (with_entry("tree_tokens", 0, 0, 3), "tree_tokens"),
    "padding (-1) for a real node": (with_entry("tree_tokens", 0, 2, -1), "tree_tokens"),
    "float token ids": (replaced("tree_tokens", lambda t: t.astype(mx.float32)), "tree_tokens"),
    "repeated siblings drawn without replacement": (with_entry("tree_tokens", 0, 1, 0), "tree_tokens"),
    "a drawn token of draft probability 0": (
        replaced("draft_probs", lambda d: mx.array(np.array([[[0.5, 0.0, 0.5]] * 4] * 2), dtype=mx.float32)),
        "tree_tokens",
    ),
    "num_nodes above N": (replaced("num_nodes", mx.array([4, 2], dtype=mx.int32)), "num_nodes"),
    "num_nodes negative": (replaced("num_nodes", mx.array([-1, 2], dtype=mx.int32)), "num_nodes"),
    "a key of the wrong shape": (replaced("key", lambda k: mx.random.split(k, 3)), "key"),
}
"""Each class of bad input (issue 19 and the suite's contract), and the argument its ValueError must name."""


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_tree_input_is_refused_with_a_value_error_naming_the_argument(impl, what):
    corrupt, name = BAD_INPUTS[what]
    arguments = corrupt(valid_call())
    impl.verify_tree(**valid_call())  # the valid call stands: only the corruption is refused
    checks.assert_raises_naming(partial(impl.verify_tree, **arguments), [name], description=f"verify_tree with {what}")
