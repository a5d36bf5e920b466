"""The kernel registry: one `KernelSpec` per kernel of the protocol, read by drivers, strategies and properties.

Adding a kernel is its spec here (arguments, uniforms, outcome, how to build inputs, its oracle),
its kernel in the reference and its oracle in `ncm_verify.oracles`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import strategies as st

from ncm_verify.harness.checks import assert_chain_outcome_well_formed
from ncm_verify.harness.drivers import (
    draft_caps,
    factorized_draw,
    first_round_inputs,
    latent_chain_inputs,
    sample_categorical,
)
from ncm_verify.harness.kernel_spec import Argument, BorrowingKernel, KernelSpec, SteppedKernel
from ncm_verify.harness.strategies import autoregressive_fixtures, latent_fixtures, make_drafting_rows
from ncm_verify.harness.tree_driver import TreeInputs, assert_tree_outcome_well_formed, fixture_rows, grow_trees
from ncm_verify.harness.tree_strategies import (
    TREE_DRAFTINGS,
    node_count,
    shapes_up_to,
    small_tree_shapes,
    tree_relations,
    tree_shapes,
)
from ncm_verify.oracles import exact, exact_block, exact_tree


def _pick(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``rows[..., ids]`` per row (padding ids read column 0)."""
    return np.take_along_axis(rows, np.maximum(ids, 0)[..., None], axis=-1)[..., 0]


def _assert_ids_in_range(ids: np.ndarray, vocab: int, what: str) -> None:
    """Emitted ids lie in [-1, V): an id out of range fails here by assertion, never as an IndexError."""
    bad = np.argwhere((ids < -1) | (ids >= vocab))
    assert not len(bad), f"{what}: id {ids[tuple(bad[0])]} at {tuple(bad[0].tolist())} outside [-1, {vocab})"


def _emitted_token_probability(case, outcome) -> np.ndarray:
    """p of every emitted token, for kernels whose first argument holds the target rows of the tokens."""
    target, tokens = case.arrays()[0], np.array(outcome.tokens)
    _assert_ids_in_range(tokens, target.shape[-1], f"{case.spec.verify}: tokens")
    return _pick(target[:, : tokens.shape[1]], tokens)[tokens >= 0]


# --- chain: G drafts judged in order, then one corrected or bonus token (C5) ---


def _chain_arguments(fixture, *, batch: int, rng, max_draft: int) -> tuple:
    caps = draft_caps(batch, max_draft, mixed=True)
    return first_round_inputs(fixture, caps=caps, max_draft=max_draft, rng=rng)


def _chain_step_arrays(draw, tables, rng, *, batch: int, vocab: int, small: bool, over_drafted: bool):
    max_draft = draw(st.integers(0, 4), label="max drafts")
    lengths = draw(st.lists(st.integers(0, max_draft), min_size=batch, max_size=batch), label="draft lengths")
    target, draft = tables((batch, max_draft + 1, vocab))
    draft = draft[:, :max_draft]
    drafting = make_drafting_rows(target[:, :max_draft], draft, over_drafted)
    drafts = sample_categorical(rng, drafting) if max_draft else np.zeros((batch, 0), np.int64)
    num_draft = np.array(lengths, dtype=np.int64)
    drafts = np.where(np.arange(max_draft)[None] < num_draft[:, None], drafts, -1)
    return (target, draft, drafts, num_draft), max_draft + 1


def _chain_acceptance_view(case, outcome) -> tuple:
    target, draft, drafts = case.arrays()
    position = np.arange(drafts.shape[1])[None]
    count = np.array(outcome.num_accepted)[:, None]
    judged = (position <= count) & (position < np.array(case.num_draft)[:, None])
    return _pick(target[:, :-1], drafts), _pick(draft, drafts), judged, position < count


def _chain_corrections(case, outcome) -> np.ndarray:
    """The token at the first rejected draft, where one was rejected."""
    tokens, count = np.array(outcome.tokens), np.array(outcome.num_accepted)
    drafts = case.args[2].shape[1]
    position = np.arange(drafts)[None]
    rejected = (position == count[:, None]) & (position < np.array(case.num_draft)[:, None])
    return np.where(rejected, tokens[:, :drafts], -1)


def _chain_well_formed(case, outcome) -> None:
    assert_chain_outcome_well_formed(outcome, np.array(case.args[2]), np.array(case.num_draft), case.vocab)


CHAIN = SteppedKernel(
    name="chain",
    arguments=(
        Argument("target_probs"),
        Argument("draft_probs"),
        Argument("draft_tokens", "ids"),
        Argument("num_draft", "lengths"),
        Argument("key", "key"),
    ),
    verify="verify_chain",
    apply="apply_chain",
    bonus_row=True,
    least_read=lambda drafts: (2, 2 * drafts),  # the drafted p(x), q(x); one target and one draft row to draw from
    uniform_columns=lambda args: args[0].shape[1],
    outcome_shapes=lambda b, c: {"tokens": (b, c), "num_accepted": (b,)},
    fixtures=lambda drafting: autoregressive_fixtures(max_outcomes=512, min_length=2 if drafting else 1),
    make_arguments=_chain_arguments,
    step_arrays=_chain_step_arrays,
    compare_step=exact.compare_chain_step,
    boundaries=exact.decision_boundaries(exact.chain_judged_pair, exact.chain_drawn_weights),
    acceptance_view=_chain_acceptance_view,
    corrections=_chain_corrections,
    emitted_target_probability=_emitted_token_probability,
    well_formed=_chain_well_formed,
)


# --- greedy: the chain's deterministic counterpart on scores (C7); cases borrowed from the chain ---

GREEDY = BorrowingKernel(
    name="greedy",
    arguments=(Argument("target", "scores"), Argument("draft_tokens", "ids"), Argument("num_draft", "lengths")),
    verify="verify_greedy",
    bonus_row=True,
    least_read=lambda drafts: (drafts + 1, 0),  # the argmax needs every target row
    cases_from="chain",
    valid_arguments=lambda case: (case.args[0], case.args[2], case.num_draft),
)


# --- factorised: each position accepted or corrected on its own (C6) ---


def _factorized_arguments(fixture, *, batch: int, rng, max_draft: int) -> tuple:
    return factorized_draw(fixture, batch=batch, rng=rng)[1]


def _factorized_step_arrays(draw, tables, rng, *, batch: int, vocab: int, small: bool, over_drafted: bool):
    positions = draw(st.integers(1, 3 if small else 2), label="positions")
    target, draft = tables((batch, positions, vocab))
    drafts = sample_categorical(rng, make_drafting_rows(target, draft, over_drafted))
    return (target, draft, drafts), positions


def _factorized_acceptance_view(case, outcome) -> tuple:
    target, draft, tokens = case.arrays()
    return _pick(target, tokens), _pick(draft, tokens), np.ones(tokens.shape, bool), np.array(outcome.accepted)


FACTORIZED = SteppedKernel(
    name="factorized",
    arguments=(
        Argument("target_probs"),
        Argument("draft_probs"),
        Argument("draft_tokens", "ids"),
        Argument("key", "key"),
    ),
    verify="verify_factorized",
    apply="apply_factorized",
    least_read=lambda drafts: (2 * drafts, 0),  # every position may be corrected: all of p and q
    uniform_columns=lambda args: args[0].shape[1],
    outcome_shapes=lambda b, c: {"tokens": (b, c), "accepted": (b, c)},
    fixtures=lambda drafting: latent_fixtures(),
    make_arguments=_factorized_arguments,
    step_arrays=_factorized_step_arrays,
    compare_step=exact.compare_factorized_step,
    boundaries=exact.decision_boundaries(exact.factorized_judged_pair, exact.factorized_drawn_weights),
    acceptance_view=_factorized_acceptance_view,
    corrections=lambda case, outcome: np.where(np.array(outcome.accepted), -1, np.array(outcome.tokens)),
    emitted_target_probability=_emitted_token_probability,
)


# --- latent chain: a latent judged first, its tokens under it (C6) ---


def _latent_chain_arguments(fixture, *, batch: int, rng, max_draft: int) -> tuple:
    return latent_chain_inputs(fixture, batch=batch, rng=rng)


def _latent_chain_step_arrays(draw, tables, rng, *, batch: int, vocab: int, small: bool, over_drafted: bool):
    codes = draw(st.integers(1, 4 if small else 2), label="codebook size")
    positions = draw(st.integers(1, 3 if small else 2), label="positions")
    target_latent, draft_latent = tables((batch, codes))
    drafted_latent = sample_categorical(rng, make_drafting_rows(target_latent, draft_latent, over_drafted))
    target_tokens, draft_tokens = tables((batch, codes, positions, vocab))
    under = (np.arange(batch), drafted_latent)
    drafts = sample_categorical(rng, make_drafting_rows(target_tokens[under], draft_tokens[under], over_drafted))
    return (target_latent, draft_latent, drafted_latent, target_tokens, draft_tokens, drafts), positions + 1


def _latent_chain_acceptance_view(case, outcome) -> tuple:
    p_z, q_z, z = case.arrays()[:3]
    return _pick(p_z, z), _pick(q_z, z), np.ones(len(z), bool), np.array(outcome.latent_accepted)


def _latent_chain_corrections(case, outcome) -> np.ndarray:
    """The latent drawn where the drafted latent was rejected."""
    return np.where(np.array(outcome.latent_accepted), -1, np.array(outcome.latent))[:, None]


def _latent_chain_emitted_probability(case, outcome) -> np.ndarray:
    p_latent, _, _, p_tokens = case.arrays()[:4]
    latent, rows = np.array(outcome.latent), np.arange(case.batch)
    _assert_ids_in_range(latent, p_latent.shape[-1], "verify_latent_chain: latent")
    assert (latent >= 0).all(), f"verify_latent_chain: latent {latent.tolist()} holds padding"
    _assert_ids_in_range(np.array(outcome.tokens), p_tokens.shape[-1], "verify_latent_chain: tokens")
    p_emitted = _pick(p_tokens[rows, latent], np.array(outcome.tokens))
    return np.concatenate([p_latent[rows, latent][:, None], p_emitted], axis=1).ravel()


LATENT_CHAIN = SteppedKernel(
    name="latent_chain",
    arguments=(
        Argument("target_latent_probs", over="latents"),
        Argument("draft_latent_probs", over="latents"),
        Argument("draft_latent", "ids", over="latents"),
        Argument("target_token_probs", partners=("draft_token_probs",)),
        Argument("draft_token_probs"),
        Argument("draft_tokens", "ids"),
        Argument("key", "key"),
    ),
    verify="verify_latent_chain",
    apply="apply_latent_chain",
    uniform_columns=lambda args: args[-1].shape[1] + 1,
    outcome_shapes=lambda b, c: {
        "latent": (b,),
        "latent_accepted": (b,),
        "tokens": (b, c - 1),
        "accepted": (b, c - 1),
    },
    fixtures=lambda drafting: latent_fixtures(),
    make_arguments=_latent_chain_arguments,
    step_arrays=_latent_chain_step_arrays,
    compare_step=exact.compare_latent_chain_step,
    boundaries=exact.decision_boundaries(exact.latent_chain_judged_pair, exact.latent_chain_drawn_weights),
    acceptance_view=_latent_chain_acceptance_view,
    corrections=_latent_chain_corrections,
    emitted_target_probability=_latent_chain_emitted_probability,
)


# --- the residual itself: normalised max(p - q, 0), a protocol function; cases borrowed ---

RESIDUAL_DISTRIBUTION = BorrowingKernel(
    name="residual_distribution",
    arguments=(Argument("p"), Argument("q")),
    verify="residual_distribution",
    cases_from="factorized",
    valid_arguments=lambda case: case.args[:2],
)


# --- tree: several drafted children per node, each mode exact (C13) ---


def _tree_inputs(case) -> TreeInputs:
    target, draft, tokens, parents = case.arrays()
    return TreeInputs(target, draft, tokens, parents, np.array(case.num_draft))


def _tree_arguments(fixture, *, batch: int, rng, max_draft: int, mode: str) -> tuple:
    """Trees of up to 2 * `max_draft` nodes that fit the fixture's depth, sequences keeping 0..N of them."""
    shapes = [s for s in shapes_up_to(2 * max(max_draft, 1)) if len(s) < fixture.length] or [(1,)]
    shape = shapes[int(rng.integers(len(shapes)))]
    caps = np.arange(batch) % (node_count(shape) + 1)
    return grow_trees(rng, shape, mode, caps, fixture_rows(fixture)).kernel_args()


def _tree_step_arrays(draw, tables, rng, *, batch: int, vocab: int, small: bool, over_drafted: bool, mode: str):
    """A padded batch of trees; whole half the time (a cut tree often loses the siblings a decision depends on)."""
    shape = draw(tree_shapes if small else small_tree_shapes, label="tree shape")
    drafting = draw(st.sampled_from(TREE_DRAFTINGS), label="children drawn from")
    count = node_count(shape)
    kept = st.one_of(st.just(count), st.integers(0, count))
    caps = np.array(draw(st.lists(kept, min_size=batch, max_size=batch), label="nodes kept"))
    target, draft = tables((batch, count + 1, vocab))

    def rows_of(node: int, context: np.ndarray):
        p, q = target[:, node + 1], draft[:, node + 1]
        first = make_drafting_rows(p, q, drafting != "q")
        deficit = np.where(p > q, q, 0.0)
        later = np.where(deficit.sum(axis=1, keepdims=True) > 0, deficit, q) if drafting.endswith("p > q") else q
        return p, q, first, later

    inputs = grow_trees(rng, shape, mode, caps, rows_of)
    return (inputs.target, inputs.draft, inputs.tokens, inputs.parents, inputs.num_nodes), count + 1


def _tree_boundaries(args: tuple, uniforms: np.ndarray, b: int, row: int, column: int, mode: str) -> np.ndarray:
    target, draft, tokens, parents, num_nodes = args
    return exact_tree.boundaries(target, draft, tokens, parents, num_nodes, uniforms, b, row, column, mode=mode)


def _tree_emitted_probability(case, outcome) -> np.ndarray:
    """p of every emitted token under the row it was emitted from: the root's, then each path node's."""
    assert_tree_outcome_well_formed(outcome, _tree_inputs(case), case.vocab)  # a path out of range fails here
    target, tokens = case.arrays()[0], np.array(outcome.tokens)
    path = np.array(outcome.path)
    rows = np.concatenate([np.zeros((case.batch, 1), dtype=np.int64), path + 1], axis=1)
    p = _pick(target[np.arange(case.batch)[:, None], rows], tokens)
    return p[tokens >= 0]


TREE = SteppedKernel(
    name="tree",
    arguments=(
        Argument("target_probs"),
        Argument("draft_probs"),
        Argument("tree_tokens", "ids", partners=("parents",)),
        Argument("parents", "nodes"),
        Argument("num_nodes", "lengths"),
        Argument("key", "key"),
        Argument("mode", "option", values=exact_tree.MODES),
    ),
    verify="verify_tree",
    apply="apply_tree",
    uniform_columns=lambda args: args[2].shape[1] + 1,
    outcome_shapes=lambda b, c: {"tokens": (b, c), "num_accepted": (b,), "path": (b, c - 1)},
    fixtures=lambda drafting: autoregressive_fixtures(max_outcomes=512, min_length=2),
    make_arguments=_tree_arguments,
    step_arrays=_tree_step_arrays,
    step_relations=tree_relations,
    compare_step=exact_tree.compare_tree_step,
    boundaries=_tree_boundaries,
    emitted_target_probability=_tree_emitted_probability,
    well_formed=lambda case, outcome: assert_tree_outcome_well_formed(outcome, _tree_inputs(case), case.vocab),
)


# --- block: the chain's arguments, the drafted block judged jointly (Sun et al., arXiv 2403.10444; C16) ---

BLOCK = dataclasses.replace(
    CHAIN,
    name="block",
    verify="verify_block",
    apply="apply_block",
    least_read=lambda drafts: (drafts + 1, 2 * drafts),  # every drafted row's residual mass, and the bonus row
    compare_step=exact_block.compare_block_step,
    boundaries=exact_block.boundaries,
    acceptance_view=None,  # a draft is not judged by p(x) / q(x) alone
    corrections=None,  # corrected from max(w p - q, 0), not the chain's residual
)


KERNEL_SPECS: dict[str, KernelSpec] = {
    spec.name: spec for spec in (CHAIN, GREEDY, FACTORIZED, LATENT_CHAIN, RESIDUAL_DISTRIBUTION, TREE, BLOCK)
}
"""Every kernel the harness drives, by name."""
SAMPLING_KERNELS = tuple(spec for spec in KERNEL_SPECS.values() if isinstance(spec, SteppedKernel))
"""Kernels that draw with a key and build cases of their own."""
STEP_KERNELS = SAMPLING_KERNELS
"""Kernels with an apply step and a float64 oracle to compare it with: every sampling kernel (`SteppedKernel`)."""
SINGLE_ROW_KERNELS = tuple(
    spec
    for spec in SAMPLING_KERNELS
    if [(a.role, a.over) for a in spec.positional] == [("probs", "tokens"), ("probs", "tokens"), ("ids", "tokens")]
    and spec.corrections is not None
)
"""Kernels taking (target rows, draft rows, draft ids) per position: one residual per rejected draft."""
