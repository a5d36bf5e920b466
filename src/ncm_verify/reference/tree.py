"""Tree verification in MLX, batch-first: several drafted children per node (issue 19).

A sequence's draft tree is given in topological order: node n holds a token and its parent's
index (-1 for the root, else an index below n). Row 0 of the target and draft rows belongs to
the root, row n + 1 to node n. Starting at the root with residual r = its target row, the
children of the current node are tried in increasing index: child i (token x) drawn from q_i is
accepted iff ``u * q_i(x) < r(x)``; on acceptance the walk moves to it (r = its target row),
on rejection ``r <- norm(max(r - q_i, 0))`` and the next sibling is tried. Once every child is
rejected one token is drawn from r (the correction); an accepted leaf draws its bonus from its
target row. q_i depends on how the children were drawn (`MODES`): q itself (i.i.d.), q
renormalised over the tokens not drawn by earlier siblings (without replacement), or a point
mass at x (deterministic top-k).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple, cast

import mlx.core as mx
import numpy as np

from ncm_verify.reference.speculative import (
    PAD_TOKEN,
    REFERENCE_RULES,
    RESIDUAL_FLOOR,
    Rules,
    _accept_drafts,
    _as_blocks,
    _as_float32,
    _check_floating,
    _check_ids_type,
    _check_probabilities,
    _check_shape,
    _check_tokens,
    _checked_in_one_pass,
    _count_accepted,
    _gather_last,
    _gather_row,
    _positions,
    _row_sums,
    _run_compiled_step,
    _scale_rows,
    _size_operand,
    all_drafts,
    draw_from_blocks,
    valid_rows,
)
from ncm_verify.tolerances import normalisation_for

__all__ = [
    "MODES",
    "TreeRules",
    "TreeOutcome",
    "tree_proposal",
    "renormalised_residual",
    "TREE_RULES",
    "apply_tree",
    "verify_tree",
]

MODES = ("with_replacement", "without_replacement", "top_k")
"""How a node's children were drawn from its draft row q: i.i.d., without replacement, or its top k."""


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


def _check_mode(mode) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def tree_proposal(q: mx.array, tried: mx.array, x: mx.array, mode: str) -> mx.array:
    """q_i ``[B, V]``: the law the child with token `x` was drawn from, given the siblings `tried` before it."""
    if mode == "with_replacement":
        return q
    if mode == "without_replacement":
        left = mx.where(tried, 0.0, q)
        # Before any sibling was tried q_i is q itself: no division, the chain's arithmetic.
        mass = _row_sums(left)[:, None]
        return mx.where(mx.any(tried, axis=-1, keepdims=True), left / mx.maximum(mass, RESIDUAL_FLOOR), q)
    if mode == "top_k":
        return (_positions(q.shape[-1])[None] == x[:, None]).astype(mx.float32)
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def renormalised_residual(weights: mx.array, mass: mx.array, q_i: mx.array) -> tuple[mx.array, mx.array]:
    """norm(max(r - q_i, 0)) for r = weights / mass, as (weights, mass): ``max(weights - mass q_i, 0)``.

    Where that mass is zero (relative to the old one) the residual stays: the rejection had probability 0.
    """
    rest = mx.maximum(weights - _scale_rows(q_i, mass[:, 0]), 0.0)
    left = _row_sums(rest)[:, None]
    kept = left > RESIDUAL_FLOOR * mass
    return mx.where(_per_row(kept), rest, weights), mx.where(kept, left, mass)


def _per_row(flags: mx.array) -> mx.array:
    """``[B]`` or ``[B, 1]`` flags shaped to select whole ``[B, V]`` rows: one row's as a scalar, since MLX's CPU
    reads a column broadcast along V by its strided path (compiled, 4x slower at V = 128 256, B = 1)."""
    return flags.reshape(()) if flags.shape[0] == 1 else flags.reshape(-1, 1)


def _correction_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return r


def _bonus_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return p


def _draw(weights: mx.array, uniforms: mx.array) -> mx.array:
    """Inverse CDF over unnormalised `weights`: the chain's two-level sampler with q = 0, whose residual is
    the weights themselves (no zero row made, no second block sum)."""
    blocks = _as_blocks(_as_float32(weights))
    block_cdf = mx.cumsum(blocks.sum(axis=-1, keepdims=True), axis=-2)
    return draw_from_blocks(
        block_cdf, lambda chosen: mx.take_along_axis(blocks, chosen, axis=-2), uniforms, weights.shape[-1]
    )


TREE_RULES = TreeRules(
    accept=_accept_drafts,
    proposal=tree_proposal,
    update=renormalised_residual,
    correction=_correction_row,
    bonus=_bonus_row,
    parents=lambda parents: parents,
    draw=_draw,
    uniforms=REFERENCE_RULES.uniforms,
)


class _Levels(NamedTuple):
    """How a level (the children of the node just reached) starts; a planted bug swaps it.

    ``start(p, mass, tried) -> (weights, mass, tried)``: from the reached node's target row p ``[B, V]`` and the
    mass ``[B, 1]`` and tried ids ``[B, V]`` it was itself judged under. `fresh`: whether `start` ignores those
    two (the law's fresh start), which lets first children be judged on their gathered entries alone.
    """

    start: Callable
    fresh: bool


def _fresh_level(p: mx.array, mass: mx.array, tried: mx.array) -> tuple[mx.array, mx.array, mx.array]:
    return p, mx.ones_like(mass), mx.zeros_like(tried)


FRESH_LEVELS = _Levels(start=_fresh_level, fresh=True)


def _take(rows: mx.array, index: mx.array) -> mx.array:
    """``rows[b, index[b]]`` for ``[B, N]`` rows and ``[B]`` indices (clamped to 0)."""
    return mx.take_along_axis(rows, mx.maximum(index, 0)[:, None], axis=1)[:, 0]


def _gather_entries(rows: mx.array, row: mx.array, ids: mx.array) -> mx.array:
    """``rows[b, row[b, n], ids[b, n]]`` ``[B, N]`` without copying any row (padded ids read index 0)."""
    batch, count, vocab = rows.shape
    wide = count * vocab >= 2**31
    flat = row.astype(mx.int64 if wide else mx.int32) * _size_operand(vocab) + mx.maximum(ids, 0)
    return mx.take_along_axis(rows.reshape(batch, count * vocab), flat, axis=1)


def _tree_structure(read_parents: mx.array, num_nodes: mx.array):
    """Per node: whether it is real, its parent (-1: root), its rank among its siblings and its previous sibling.

    A node whose parent is out of [-1, n) is never reached, as in a walk that meets it only by its parent.
    """
    count = read_parents.shape[1]
    node = _positions(count)[None]
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


def _walk_decisions(real, parent, accepted):
    """The walk from the root given every node's decision as if reached: path, count, the node where it stops.

    A node is on the path iff it is its parent's first accepted child and its parent is on the path; pointer
    jumping ANDs that over all ancestors in log2(N) steps instead of one step per node.
    """
    batch, count = parent.shape
    if not count:
        return parent, mx.zeros((batch,), dtype=mx.int32), mx.full((batch,), -1, dtype=mx.int32)
    node = _positions(count)[None]
    owners = _positions(count + 1)[None, :, None] - 1
    chosen_by = (parent[:, None, :] == owners) & (real & accepted)[:, None, :]
    beyond = _size_operand(count)
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


def _apply_tree_with(
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
    levels: _Levels = FRESH_LEVELS,
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
    target, draft = _as_float32(target_probs), _as_float32(draft_probs)
    vocab = target.shape[-1]
    tokens = tree_tokens.astype(mx.int32)
    real, parent, rank, previous = _tree_structure(rules.parents(parents.astype(mx.int32)), num_nodes)
    row = parent + 1
    judge_u = uniforms[:, 0, :count]
    # First children, from their gathered entries: q_i as `proposal` gives it on a one-entry row, nothing tried.
    column = (batch * count, 1)
    q_first = rules.proposal(
        _gather_entries(draft, row, tokens).reshape(column),
        mx.zeros(column, dtype=mx.bool_),
        mx.zeros((batch * count,), dtype=mx.int32),
        mode,
    ).reshape(batch, count)
    ones = mx.ones((batch, count), dtype=mx.float32)
    accepted = rules.accept(_gather_entries(target, row, tokens), ones * q_first, judge_u)
    # Nodes whose residual needs a full row, in (parent, index) order so that each sibling list runs unbroken.
    full = real & ((rank > 0) | (not levels.fresh))
    slots = (count if not levels.fresh else max(count - 1, 0)) if later is None else min(max(later, 0), count)
    key = (
        mx.where(full, (parent + 1) * _size_operand(count), _size_operand((count + 1) * count))
        + _positions(count)[None]
    )
    order = mx.argsort(key, axis=1)[:, :slots]  # lazy: never run when no slot reads it
    ids = _positions(vocab)[None]
    judged_mass = mx.ones((batch, count + 1), dtype=mx.float32)
    judged_tried = mx.zeros((batch, count + 1, vocab), dtype=mx.bool_)
    held: list[tuple[mx.array, ...]] = []
    carried: tuple[mx.array, ...] = ()
    for j in range(slots):
        at = order[:, j]
        used, at_rank, parent_row = _take(full, at), _take(rank, at), _take(row, at)
        x, x_before = _take(tokens, at), _take(tokens, _take(previous, at))
        p_row, q_row = _gather_row(target, parent_row), _gather_row(draft, parent_row)
        start = levels.start(p_row, *_level_state(judged_mass, judged_tried, parent_row))
        # The state the previous sibling was judged under: its level's start if it is a first child (or, with
        # every node a slot, none: this one is), else what the previous slot carried.
        from_start = _per_row(at_rank == 1 if levels.fresh else at_rank == 0)
        q_start = rules.proposal(q_row, start[2], x_before, mode)
        state = (
            (*start, q_start)
            if j == 0
            else tuple(mx.where(from_start, a, c) for a, c in zip((*start, q_start), carried))
        )
        weights, mass, tried, q_before = state
        updated, updated_mass = rules.update(weights, mass, q_before)
        first = _per_row(at_rank == 0)
        weights = mx.where(first, weights, updated)
        mass = mx.where(first, mass, updated_mass)
        tried = mx.where(first, tried, tried | (ids == x_before[:, None]))
        q_i = rules.proposal(q_row, tried, x, mode)
        decision = rules.accept(_gather_last(weights, x), mass[:, 0] * _gather_last(q_i, x), _take(judge_u, at))
        accepted = mx.where(used[:, None] & (_positions(count)[None] == at[:, None]), decision[:, None], accepted)
        if not levels.fresh:
            own_row = used[:, None] & (_positions(count + 1)[None] == (at + 1)[:, None])
            judged_mass = mx.where(own_row, mass, judged_mass)
            judged_tried = mx.where(own_row[..., None], tried[:, None], judged_tried)
        carried = (weights, mass, tried, q_i)
        held.append((at, used, weights, mass, q_i))
    if later == CHAINS and levels.fresh:
        # Every tree a chain 0 <- 1 <- ...: the path is the leading run of accepted nodes, as verify_chain's.
        num_accepted = _count_accepted(accepted & real)
        path = mx.where(_positions(count)[None] < num_accepted[:, None], _positions(count)[None], PAD_TOKEN)
        stop, last_child = num_accepted - 1, num_accepted
        has_children = num_accepted < num_nodes
    else:
        path, num_accepted, stop = _walk_decisions(real, parent, accepted)
        # The emitted token: the correction after the stop node's last child is rejected, or the leaf's bonus.
        children = real & (parent == stop[:, None])
        last_child = mx.max(mx.where(children, _positions(count)[None], -1), axis=1) if count else stop
        has_children = last_child >= 0
    p_row, q_row = _gather_row(target, stop + 1), _gather_row(draft, stop + 1)
    weights, mass, before = levels.start(p_row, *_level_state(judged_mass, judged_tried, stop + 1))
    q_last = rules.proposal(q_row, before, _take(tokens, last_child), mode)
    for at, used, held_weights, held_mass, held_q in held:
        it = _per_row(used & (at == last_child))
        weights, mass = mx.where(it, held_weights, weights), mx.where(it, held_mass, mass)
        q_last = mx.where(it, held_q, q_last)
    rest, _ = rules.update(weights, mass, q_last)
    weights = mx.where(_per_row(has_children), rules.correction(rest, p_row, q_row), rules.bonus(p_row, p_row, q_row))
    last = rules.draw(weights, uniforms[:, 1, 0]).astype(mx.int32)
    kept = mx.take_along_axis(tokens, mx.maximum(path, 0), axis=1)
    position = _positions(count + 1)[None]
    padded = mx.concatenate([kept, mx.full((batch, 1), PAD_TOKEN, dtype=mx.int32)], axis=1)
    out = mx.where(position < num_accepted[:, None], padded, PAD_TOKEN)
    out = mx.where(position == num_accepted[:, None], last[:, None], out)
    return TreeOutcome(out, num_accepted, path)


def _level_state(judged_mass: mx.array, judged_tried: mx.array, row: mx.array) -> tuple[mx.array, mx.array]:
    """The mass ``[B, 1]`` and tried ids ``[B, V]`` the node of `row` (node + 1; 0: the root) was judged under."""
    return _take(judged_mass, row)[:, None], mx.take_along_axis(judged_tried, row[:, None, None], axis=1)[:, 0]


def apply_tree(
    target_probs,
    draft_probs,
    tree_tokens,
    parents,
    num_nodes,
    uniforms,
    *,
    mode: str = "with_replacement",
    rules: TreeRules = TREE_RULES,
) -> TreeOutcome:
    """Tree verification given uniforms ``[B, 2, N+1]``: ``u[b, 0, n]`` judges node n, ``u[b, 1, 0]`` draws the last.

    Unvalidated and traceable by ``mx.compile``, vectorised over the batch and, but for later siblings, the nodes.
    """
    _check_mode(mode)
    return _apply_tree_with(
        target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, mode=mode, rules=rules
    )


# --- validation --------------------------------------------------------------------------


def _check_num_nodes(num_nodes, batch: int, count: int) -> np.ndarray:
    """Real nodes per sequence in [0, N] as NumPy; None means N for every sequence."""
    if num_nodes is None:
        return np.full(batch, count, dtype=np.int64)
    if not isinstance(num_nodes, mx.array) or not mx.issubdtype(num_nodes.dtype, mx.integer):
        raise ValueError("num_nodes: expected an integer mx.array of shape [B]")
    _check_shape("num_nodes", num_nodes, (batch,))
    counts = np.array(num_nodes.astype(mx.int64))
    if np.any((counts < 0) | (counts > count)):
        raise ValueError(f"num_nodes: node counts must lie in [0, {count}]")
    return counts


def _on_a_cycle(parents: np.ndarray, node: int) -> bool:
    """Whether following parents up from `node` comes back to it."""
    seen, at = set(), node
    while 0 <= at < len(parents) and at not in seen:
        seen.add(at)
        at = int(parents[at])
        if at == node:
            return True
    return False


def _first(problem: np.ndarray) -> tuple[int, int] | None:
    """The first (sequence, node) where `problem` holds, in batch then node order."""
    found = np.argwhere(problem)
    return (int(found[0][0]), int(found[0][1])) if len(found) else None


def _check_parents(parents, batch: int, count: int, counts: np.ndarray) -> np.ndarray:
    """Each real node's parent is the root (-1) or an earlier real node; padded nodes hold -1.

    Checked over the whole batch at once; the first bad node in (sequence, node) order is named.
    """
    _check_ids_type("parents", parents, (batch, count))
    table = np.array(parents.astype(mx.int64))
    node = np.arange(count)[None]
    real = node < counts[:, None]
    problems = (
        ("padding", ~real & (table != -1)),
        ("range", real & ((table < -1) | (table >= count))),
        ("padded parent", real & (table >= counts[:, None]) & (table < count)),
        ("order", real & (table >= node) & (table < counts[:, None])),
    )
    found = [(first, kind) for kind, mask in problems if (first := _first(mask)) is not None]
    if not found:
        return table
    (b, n), kind = min(found)
    parent, real_count = int(table[b, n]), int(counts[b])
    where = f"parents: sequence {b} node {n} has parent {parent}"
    if kind == "padding":
        raise ValueError(f"{where}, but it is padding (num_nodes {real_count}): padded nodes hold -1")
    if kind == "range":
        raise ValueError(f"{where}, out of range [-1, {count})")
    if kind == "padded parent":
        raise ValueError(f"{where}, a padded node (num_nodes {real_count}): padding has no children")
    if parent == n or _on_a_cycle(table[b, :real_count], n):
        raise ValueError(f"{where}: a cycle (a node is its own ancestor)")
    raise ValueError(f"{where}, after its child: nodes come in topological order (parent < child)")


def _check_tree_tokens(tree_tokens, draft_probs, table, counts, mode: str) -> None:
    """Ids in [0, V) for real nodes (-1 for padding); drawn ones with q > 0; siblings distinct unless i.i.d."""
    batch, count = table.shape
    vocab = draft_probs.shape[-1]
    real = np.arange(count)[None] < counts[:, None]
    _check_tokens("tree_tokens", tree_tokens, (batch, count), vocab, mx.array(real))
    ids = np.array(tree_tokens.astype(mx.int64))
    if mode != "top_k":
        rows = mx.array((np.maximum(table, -1) + 1).astype(np.int32))
        q_rows = mx.take_along_axis(draft_probs.astype(mx.float32), rows[..., None], axis=1)
        q_x = np.array(_gather_last(q_rows, mx.array(np.maximum(ids, 0).astype(np.int32))))
        found = _first(real & ~(q_x > 0))
        if found is not None:
            b, n = found
            raise ValueError(
                f"tree_tokens: sequence {b} node {n} (id {ids[b, n]}) has draft probability 0 in its parent's row; "
                "q must be the sampling distribution"
            )
    if mode != "with_replacement":
        # Node n repeats an earlier sibling m: same parent, same id, both real.
        same = (table[:, :, None] == table[:, None, :]) & (ids[:, :, None] == ids[:, None, :])
        earlier = np.tril(np.ones((count, count), dtype=bool), k=-1)[None]
        repeats = same & earlier & real[:, :, None] & real[:, None, :]
        found = _first(repeats.any(axis=2))
        if found is not None:
            b, n = found
            m = int(np.argmax(repeats[b, n]))
            raise ValueError(
                f"tree_tokens: sequence {b} nodes {m} and {n} are siblings with one id {ids[b, n]}; "
                f"children drawn {mode} are distinct"
            )


def _check_tree_inputs(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode) -> mx.array:
    """Validate tree input one check at a time, in argument order; returns the node counts as an mx.array."""
    _check_mode(mode)
    _check_probabilities("target_probs", target_probs, 3)
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs N + 1 >= 1 rows (the root's at least)")
    _check_floating("draft_probs", draft_probs, 3, "probabilities")
    _check_shape("draft_probs", draft_probs, (batch, rows, vocab))
    normalisation_for("draft_probs", draft_probs.dtype)
    _check_probabilities("draft_probs", draft_probs, 3)
    _check_ids_type("tree_tokens", tree_tokens, (batch, rows - 1))
    counts = _check_num_nodes(num_nodes, batch, rows - 1)
    table = _check_parents(parents, batch, rows - 1, counts)
    _check_tree_tokens(tree_tokens, draft_probs, table, counts, mode)
    return mx.array(counts.astype(np.int32))


def _tree_values_valid(target_probs, draft_probs, tree_tokens, parents, num_nodes, *, mode: str) -> mx.array:
    """Every value check of tree input as one lazy boolean (types and shapes already checked)."""
    batch, count = tree_tokens.shape
    vocab = target_probs.shape[-1]
    node = _positions(count)[None]
    real = node < num_nodes[:, None]
    table, ids = parents.astype(mx.int32), tree_tokens.astype(mx.int64)
    ok = valid_rows("target_probs", target_probs) & valid_rows("draft_probs", draft_probs)
    ok = ok & mx.all((num_nodes >= 0) & (num_nodes <= _size_operand(count)))
    # A real node's parent is -1 or an earlier (hence real) node; padding holds -1: no cycle can pass.
    ok = ok & mx.all(mx.where(real, (table >= -1) & (table < node), table == -1))
    ok = ok & mx.all(mx.where(real, ids >= 0, ids >= PAD_TOKEN) & (ids < _size_operand(vocab)))
    safe = mx.clip(ids, 0, _size_operand(vocab - 1)).astype(mx.int32)
    if mode != "top_k":
        q_x = _gather_entries(draft_probs, mx.clip(table, -1, _size_operand(count - 1)) + 1, safe)
        ok = ok & mx.all(mx.where(real, q_x > 0, True))
    if mode != "with_replacement":
        both = real[:, :, None] & real[:, None, :] & (node[:, None, :] < node[:, :, None])
        same = (table[:, :, None] == table[:, None, :]) & (safe[:, :, None] == safe[:, None, :])
        ok = ok & ~mx.any(both & same)
    return ok


TREE_VALUES_VALID = {mode: mx.compile(functools.partial(_tree_values_valid, mode=mode)) for mode in MODES}
"""Compiled once per mode: one fused pass whose one host sync answers every value check, as the chain's."""


def _tree_input_flags(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode) -> tuple[mx.array, mx.array]:
    """Check tree input's types and shapes; returns the node counts and a lazy "all values valid"."""
    _check_mode(mode)
    _check_floating("target_probs", target_probs, 3, "probabilities")
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs N + 1 >= 1 rows (the root's at least)")
    _check_floating("draft_probs", draft_probs, 3, "probabilities")
    _check_shape("draft_probs", draft_probs, (batch, rows, vocab))
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        normalisation_for(name, probs.dtype)
    _check_ids_type("tree_tokens", tree_tokens, (batch, rows - 1))
    if num_nodes is None:
        counts = all_drafts(batch, rows - 1)
    elif not isinstance(num_nodes, mx.array) or not mx.issubdtype(num_nodes.dtype, mx.integer):
        raise ValueError("num_nodes: expected an integer mx.array of shape [B]")
    else:
        _check_shape("num_nodes", num_nodes, (batch,))
        counts = num_nodes.astype(mx.int32)
    _check_ids_type("parents", parents, (batch, rows - 1))
    flag = TREE_VALUES_VALID[mode](target_probs, draft_probs, tree_tokens, parents, counts)
    return counts, flag


def _check_tree_inputs_fast(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode) -> mx.array:
    """Validate tree input in one fused pass and one host sync; returns the node counts.

    Input the fused pass doubts goes to the stepwise checks, which name the first problem in argument order.
    """
    arguments = (target_probs, draft_probs, tree_tokens, parents, num_nodes, mode)
    return _checked_in_one_pass(
        functools.partial(_tree_input_flags, *arguments), functools.partial(_check_tree_inputs, *arguments)
    )


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


@functools.lru_cache(maxsize=64)
def _apply_for(mode: str, rules: TreeRules, apply: Callable, later: int | None = None) -> Callable:
    """`apply` with its mode bound, made once per (mode, rules, apply, later) so its compiled step is cached.

    The reference walk is given `later`, the later siblings it works through (None: as many as any tree has).
    """
    if apply is apply_tree:
        apply = functools.partial(_apply_tree_with, later=later)

    def step(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, rules):
        return apply(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, mode=mode, rules=rules)

    return step


def verify_tree(
    target_probs,
    draft_probs,
    tree_tokens,
    parents,
    *,
    key,
    num_nodes=None,
    mode: str = "with_replacement",
    validate: bool = True,
    rules: TreeRules = TREE_RULES,
    apply=apply_tree,
) -> TreeOutcome:
    """Tree speculative verification, exact for each child-drawing mode.

    Args:
        target_probs: ``[B, N+1, V]`` target rows: the root's, then the row after each node's token.
        draft_probs: ``[B, N+1, V]`` the rows each node's children were drawn from (row 0: the root's).
        tree_tokens: ``[B, N]`` node tokens (-1 for padded nodes).
        parents: ``[B, N]`` parent of each node: -1 the root, else an earlier node; padded nodes -1.
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
        num_nodes: ``[B]`` real nodes per sequence (nodes 0..num_nodes-1); default N.
        mode: "with_replacement", "without_replacement" or "top_k": how children were drawn.
        validate: check the input (set False only under ``mx.compile``).

    Returns:
        TreeOutcome: tokens ``[B, N+1]``, accepted counts ``[B]`` and the accepted path ``[B, N]``.
    """
    later = None
    if validate:
        num_nodes = _check_tree_inputs_fast(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode)
        if apply is apply_tree:
            # Read once validated: the walk works through as many later siblings as this batch has.
            ids = parents if parents.dtype == mx.int32 else parents.astype(mx.int32)  # no op to run for int32
            read = np.array(rules.parents(ids))
            later = later_siblings(read, np.array(num_nodes))
    else:
        _check_mode(mode)
        if num_nodes is None:
            num_nodes = all_drafts(target_probs.shape[0], tree_tokens.shape[1])
    arrays = (target_probs, draft_probs, tree_tokens, parents, num_nodes)
    step = _apply_for(mode, rules, apply, later)
    # The chain's compiled step reads only `rules.uniforms` and hands `rules` on to `step`.
    return TreeOutcome(*_run_compiled_step(step, cast(Rules, rules), arrays, key, tree_tokens.shape[1] + 1))
