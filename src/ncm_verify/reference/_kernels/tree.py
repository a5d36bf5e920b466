"""The tree walk given its uniforms, and the decisions it is built from (`TreeRules`, `Levels`).

The rule it computes is stated in :mod:`ncm_verify.reference.tree`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from ncm_verify.reference._kernels.arrays import (
    PAD_TOKEN,
    all_drafts,
    as_blocks,
    as_float32,
    count_accepted,
    gather_last,
    gather_row,
    positions,
    row_sums,
    scale_rows,
    size_operand,
)
from ncm_verify.reference._kernels.sampling import RESIDUAL_FLOOR, accept_drafts, draw_from_blocks, make_uniforms

MODES = ("with_replacement", "without_replacement", "top_k")
"""How a node's children were drawn from its draft row q: i.i.d., without replacement, or its top k."""


def check_mode(mode) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


class TreeRules(NamedTuple):
    """The decisions of the tree walk; a planted bug swaps one out.

    The residual is kept unnormalised, as weights w ``[B, V]`` and their mass m ``[B, 1]`` (r = w / m), so
    that one rejection computes max(p - q, 0) exactly as the chain does.
    ``accept(w_x, m q_x, u) -> bool``; ``proposal(q [B, V], tried [B, V], x [B], mode) -> q_i [B, V]``;
    ``update(w, m, q_i) -> (w, m)`` after a rejection; ``correction(w, p, q) -> weights`` once every child
    is rejected and ``bonus(w, p, q) -> weights`` after an accepted leaf (p, q: the node's own rows);
    ``parents(parents) -> parents`` as read; ``draw(weights, u) -> ids`` (inverse CDF);
    ``uniforms(keys [B, 2], shape) -> [B, *shape]``.
    """

    accept: Callable
    proposal: Callable
    update: Callable
    correction: Callable
    bonus: Callable
    parents: Callable
    draw: Callable
    uniforms: Callable


class TreeOutcome(NamedTuple):
    """``tokens [B, N+1]``: the accepted path's tokens, one corrected or bonus token, then -1;
    ``num_accepted [B]``; ``path [B, N]``: the accepted node indices, then -1."""

    tokens: mx.array
    num_accepted: mx.array
    path: mx.array


def tree_proposal(q: mx.array, tried: mx.array, x: mx.array, mode: str) -> mx.array:
    """q_i ``[B, V]``: the law the child with token `x` was drawn from, given the siblings `tried` before it."""
    if mode == "with_replacement":
        return q
    if mode == "without_replacement":
        left = mx.where(tried, 0.0, q)
        # Before any sibling was tried q_i is q itself: no division, the chain's arithmetic.
        mass = row_sums(left)[:, None]
        return mx.where(mx.any(tried, axis=-1, keepdims=True), left / mx.maximum(mass, RESIDUAL_FLOOR), q)
    if mode == "top_k":
        return (positions(q.shape[-1])[None] == x[:, None]).astype(mx.float32)
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def renormalised_residual(weights: mx.array, mass: mx.array, q_i: mx.array) -> tuple[mx.array, mx.array]:
    """norm(max(r - q_i, 0)) for r = weights / mass, as (weights, mass): ``max(weights - mass q_i, 0)``.

    Where that mass is zero (relative to the old one) the residual stays: the rejection had probability 0.
    """
    rest = mx.maximum(weights - scale_rows(q_i, mass[:, 0]), 0.0)
    left = row_sums(rest)[:, None]
    kept = left > RESIDUAL_FLOOR * mass
    return mx.where(per_row(kept), rest, weights), mx.where(kept, left, mass)


def per_row(flags: mx.array) -> mx.array:
    """``[B]`` or ``[B, 1]`` flags shaped to select whole ``[B, V]`` rows: one row's as a scalar, since MLX's CPU
    reads a column broadcast along V by its strided path (compiled, 4x slower at V = 128 256, B = 1)."""
    return flags.reshape(()) if flags.shape[0] == 1 else flags.reshape(-1, 1)


def correction_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return r


def bonus_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return p


def draw(weights: mx.array, uniforms: mx.array) -> mx.array:
    """Inverse CDF over unnormalised `weights`: the chain's two-level sampler with q = 0, whose residual is
    the weights themselves (no zero row made, no second block sum)."""
    blocks = as_blocks(as_float32(weights))
    block_cdf = mx.cumsum(blocks.sum(axis=-1, keepdims=True), axis=-2)
    return draw_from_blocks(
        block_cdf, lambda chosen: mx.take_along_axis(blocks, chosen, axis=-2), uniforms, weights.shape[-1]
    )


TREE_RULES = TreeRules(
    accept=accept_drafts,
    proposal=tree_proposal,
    update=renormalised_residual,
    correction=correction_row,
    bonus=bonus_row,
    parents=lambda parents: parents,
    draw=draw,
    uniforms=make_uniforms,
)


class Levels(NamedTuple):
    """How a level (the children of the node just reached) starts; a planted bug swaps it.

    ``start(p, mass, tried) -> (weights, mass, tried)``: from the reached node's target row p ``[B, V]`` and the
    mass ``[B, 1]`` and tried ids ``[B, V]`` it was itself judged under. `fresh`: whether `start` ignores those
    two (the law's fresh start), which lets first children be judged on their gathered entries alone.
    """

    start: Callable
    fresh: bool


def fresh_level(p: mx.array, mass: mx.array, tried: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    return p, mx.ones_like(mass), mx.zeros_like(tried)


FRESH_LEVELS = Levels(start=fresh_level, fresh=True)


def take(rows: mx.array, index: mx.array) -> mx.array:
    """``rows[b, index[b]]`` for ``[B, N]`` rows and ``[B]`` indices (clamped to 0)."""
    return mx.take_along_axis(rows, mx.maximum(index, 0)[:, None], axis=1)[:, 0]


def gather_entries(rows: mx.array, row: mx.array, ids: mx.array) -> mx.array:
    """``rows[b, row[b, n], ids[b, n]]`` ``[B, N]`` without copying any row (padded ids read index 0)."""
    batch, count, vocab = rows.shape
    wide = count * vocab >= 2**31
    flat = row.astype(mx.int64 if wide else mx.int32) * size_operand(vocab) + mx.maximum(ids, 0)
    return mx.take_along_axis(rows.reshape(batch, count * vocab), flat, axis=1)


def tree_structure(read_parents: mx.array, num_nodes: mx.array):
    """Per node: whether it is real, its parent (-1: root), its rank among its siblings and its previous sibling.

    A node whose parent is out of [-1, n) is never reached, as in a walk that meets it only by its parent.
    """
    count = read_parents.shape[1]
    node = positions(count)[None]
    real = (node < num_nodes[:, None]) & (read_parents >= -1) & (read_parents < node)
    parent = mx.where(real, read_parents, -1)
    earlier = (
        real[:, :, None]
        & real[:, None, :]
        & (parent[:, :, None] == parent[:, None, :])
        & (node[:, None, :] < node[:, :, None])
    )
    rank = earlier.astype(mx.int32).sum(axis=-1)
    if not count:
        return real, parent, rank, parent
    previous = mx.max(mx.where(earlier, node[:, None, :], -1), axis=-1)
    return real, parent, rank, previous


def walk_decisions(real, parent, accepted):
    """The walk from the root given every node's decision as if reached: path, count, the node where it stops.

    A node is on the path iff it is its parent's first accepted child and its parent is on the path; pointer
    jumping ANDs that over all ancestors in log2(N) steps instead of one step per node.
    """
    batch, count = parent.shape
    if not count:
        return parent, mx.zeros((batch,), dtype=mx.int32), mx.full((batch,), -1, dtype=mx.int32)
    node = positions(count)[None]
    owners = positions(count + 1)[None, :, None] - 1
    chosen_by = (parent[:, None, :] == owners) & (real & accepted)[:, None, :]
    beyond = size_operand(count)
    chosen = mx.min(mx.where(chosen_by, node[:, None, :], beyond), axis=-1)
    on_path = real & (mx.take_along_axis(chosen, parent + 1, axis=1) == node)
    jump = parent
    for _ in range(max(count - 1, 1).bit_length()):
        above = jump >= 0
        on_path = on_path & mx.where(above, mx.take_along_axis(on_path, mx.maximum(jump, 0), axis=1), True)
        jump = mx.where(above, mx.take_along_axis(jump, mx.maximum(jump, 0), axis=1), -1)
    num_accepted = on_path.astype(mx.int32).sum(axis=1)
    # Ancestors come first (topological order): the path is the on-path nodes in increasing index.
    path = mx.sort(mx.where(on_path, node, beyond), axis=1)
    stop = mx.max(mx.where(on_path, node, -1), axis=1)
    return mx.where(path < beyond, path, PAD_TOKEN), num_accepted, stop


CHAINS = -1
"""`later` when every tree of the batch is a chain (node n's parent n - 1): no later sibling, and the path is
the leading run of accepted nodes."""


def walk(
    target_probs,
    draft_probs,
    tree_tokens,
    parents,
    num_nodes,
    uniforms,
    *,
    mode: str,
    rules: TreeRules,
    later: int | None = None,
    levels: Levels = FRESH_LEVELS,
) -> TreeOutcome:
    """The walk, every decision taken as if its node were reached, then the path those decisions pick.

    A first child is judged against its parent's target row with mass 1: on two gathered entries, no row
    touched. Only a later sibling needs the residual its earlier siblings left; those are worked through in
    (parent, index) order, `later` of them (at most that many per sequence; None: N - 1, any tree; `CHAINS`: none,
    every tree a chain), each one
    full-row update, vectorised over the batch. Rows are copied only for them and for the one emitted token.
    """
    batch, count = tree_tokens.shape
    if num_nodes is None:
        num_nodes = all_drafts(batch, count)
    target, draft = as_float32(target_probs), as_float32(draft_probs)
    vocab = target.shape[-1]
    tokens = tree_tokens.astype(mx.int32)
    real, parent, rank, previous = tree_structure(rules.parents(parents.astype(mx.int32)), num_nodes)
    row = parent + 1
    judge_u = uniforms[:, 0, :count]
    # First children, from their gathered entries: q_i as `proposal` gives it on a one-entry row, nothing tried.
    column = (batch * count, 1)
    q_first = rules.proposal(
        gather_entries(draft, row, tokens).reshape(column),
        mx.zeros(column, dtype=mx.bool_),
        mx.zeros((batch * count,), dtype=mx.int32),
        mode,
    ).reshape(batch, count)
    ones = mx.ones((batch, count), dtype=mx.float32)
    accepted = rules.accept(gather_entries(target, row, tokens), ones * q_first, judge_u)
    # Nodes whose residual needs a full row, in (parent, index) order so that each sibling list runs unbroken.
    full = real & ((rank > 0) | (not levels.fresh))
    slots = (count if not levels.fresh else max(count - 1, 0)) if later is None else min(max(later, 0), count)
    key = mx.where(full, (parent + 1) * size_operand(count), size_operand((count + 1) * count)) + positions(count)[None]
    order = mx.argsort(key, axis=1)[:, :slots]  # lazy: never run when no slot reads it
    ids = positions(vocab)[None]
    judged_mass = mx.ones((batch, count + 1), dtype=mx.float32)
    judged_tried = mx.zeros((batch, count + 1, vocab), dtype=mx.bool_)
    held: list[tuple[mx.array, ...]] = []
    carried: tuple[mx.array, ...] = ()
    for j in range(slots):
        at = order[:, j]
        used, at_rank, parent_row = take(full, at), take(rank, at), take(row, at)
        x, x_before = take(tokens, at), take(tokens, take(previous, at))
        p_row, q_row = gather_row(target, parent_row), gather_row(draft, parent_row)
        start = levels.start(p_row, *level_state(judged_mass, judged_tried, parent_row))
        # The state the previous sibling was judged under: its level's start if it is a first child (or, with
        # every node a slot, none: this one is), else what the previous slot carried.
        from_start = per_row(at_rank == 1 if levels.fresh else at_rank == 0)
        q_start = rules.proposal(q_row, start[2], x_before, mode)
        state = (
            (*start, q_start)
            if j == 0
            else tuple(mx.where(from_start, a, c) for a, c in zip((*start, q_start), carried))
        )
        weights, mass, tried, q_before = state
        updated, updated_mass = rules.update(weights, mass, q_before)
        first = per_row(at_rank == 0)
        weights = mx.where(first, weights, updated)
        mass = mx.where(first, mass, updated_mass)
        tried = mx.where(first, tried, tried | (ids == x_before[:, None]))
        q_i = rules.proposal(q_row, tried, x, mode)
        decision = rules.accept(gather_last(weights, x), mass[:, 0] * gather_last(q_i, x), take(judge_u, at))
        accepted = mx.where(used[:, None] & (positions(count)[None] == at[:, None]), decision[:, None], accepted)
        if not levels.fresh:
            own_row = used[:, None] & (positions(count + 1)[None] == (at + 1)[:, None])
            judged_mass = mx.where(own_row, mass, judged_mass)
            judged_tried = mx.where(own_row[..., None], tried[:, None], judged_tried)
        carried = (weights, mass, tried, q_i)
        held.append((at, used, weights, mass, q_i))
    if later == CHAINS and levels.fresh:
        # Every tree a chain 0 <- 1 <- ...: the path is the leading run of accepted nodes, as verify_chain's.
        num_accepted = count_accepted(accepted & real)
        path = mx.where(positions(count)[None] < num_accepted[:, None], positions(count)[None], PAD_TOKEN)
        stop, last_child = num_accepted - 1, num_accepted
        has_children = num_accepted < num_nodes
    else:
        path, num_accepted, stop = walk_decisions(real, parent, accepted)
        # The emitted token: the correction after the stop node's last child is rejected, or the leaf's bonus.
        children = real & (parent == stop[:, None])
        last_child = mx.max(mx.where(children, positions(count)[None], -1), axis=1) if count else stop
        has_children = last_child >= 0
    p_row, q_row = gather_row(target, stop + 1), gather_row(draft, stop + 1)
    weights, mass, before = levels.start(p_row, *level_state(judged_mass, judged_tried, stop + 1))
    q_last = rules.proposal(q_row, before, take(tokens, last_child), mode)
    for at, used, held_weights, held_mass, held_q in held:
        it = per_row(used & (at == last_child))
        weights, mass = mx.where(it, held_weights, weights), mx.where(it, held_mass, mass)
        q_last = mx.where(it, held_q, q_last)
    rest, _ = rules.update(weights, mass, q_last)
    weights = mx.where(per_row(has_children), rules.correction(rest, p_row, q_row), rules.bonus(p_row, p_row, q_row))
    last = rules.draw(weights, uniforms[:, 1, 0]).astype(mx.int32)
    kept = mx.take_along_axis(tokens, mx.maximum(path, 0), axis=1)
    position = positions(count + 1)[None]
    padded = mx.concatenate([kept, mx.full((batch, 1), PAD_TOKEN, dtype=mx.int32)], axis=1)
    out = mx.where(position < num_accepted[:, None], padded, PAD_TOKEN)
    out = mx.where(position == num_accepted[:, None], last[:, None], out)
    return TreeOutcome(out, num_accepted, path)


def level_state(judged_mass: mx.array, judged_tried: mx.array, row: mx.array) -> tuple[mx.array, mx.array]:
    """The mass ``[B, 1]`` and tried ids ``[B, V]`` the node of `row` (node + 1; 0: the root) was judged under."""
    return take(judged_mass, row)[:, None], mx.take_along_axis(judged_tried, row[:, None, None], axis=1)[:, 0]


def later_siblings(parents: np.ndarray, counts: np.ndarray) -> int:
    """The most nodes of one sequence that have an earlier sibling: the full-row updates its walk may need;
    `CHAINS` where every tree is a chain (each real node's parent the node before it)."""
    count = parents.shape[1]
    node = np.arange(count)[None]
    real = (node < counts[:, None]) & (parents >= -1) & (parents < node)
    if np.all(real == (node < counts[:, None])) and np.all(np.where(real, parents == node - 1, True)):
        return CHAINS
    same = (parents[:, :, None] == parents[:, None, :]) & real[:, :, None] & real[:, None, :]
    earlier = same & (node[:, None, :] < node[:, :, None])
    return int(earlier.any(axis=2).sum(axis=1).max(initial=0))
