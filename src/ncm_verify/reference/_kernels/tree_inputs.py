"""Tree input validation: stepwise (`check_tree_inputs`, naming the first bad node) and fused."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ncm_verify.reference._kernels.arrays import PAD_TOKEN, all_drafts, gather_last, positions, size_operand
from ncm_verify.reference._kernels.checks import (
    check_floating,
    check_ids_type,
    check_probabilities,
    check_shape,
    check_tokens,
    valid_rows,
)
from ncm_verify.reference._kernels.fused import clamped_counts, clamped_ids
from ncm_verify.reference._kernels.tree import check_mode, gather_entries
from ncm_verify.tolerances import normalisation_for


def check_num_nodes(num_nodes, batch: int, count: int) -> np.ndarray:
    """Real nodes per sequence in [0, N] as NumPy; None means N for every sequence."""
    if num_nodes is None:
        return np.full(batch, count, dtype=np.int64)
    if not isinstance(num_nodes, mx.array) or not mx.issubdtype(num_nodes.dtype, mx.integer):
        raise ValueError("num_nodes: expected an integer mx.array of shape [B]")
    check_shape("num_nodes", num_nodes, (batch,))
    counts = np.array(num_nodes.astype(mx.int64))
    if np.any((counts < 0) | (counts > count)):
        raise ValueError(f"num_nodes: node counts must lie in [0, {count}]")
    return counts


def on_a_cycle(parents: np.ndarray, node: int) -> bool:
    """Whether following parents up from `node` comes back to it."""
    seen, at = set(), node
    while 0 <= at < len(parents) and at not in seen:
        seen.add(at)
        at = int(parents[at])
        if at == node:
            return True
    return False


def first_where(problem: np.ndarray) -> tuple[int, int] | None:
    """The first (sequence, node) where `problem` holds, in batch then node order."""
    found = np.argwhere(problem)
    return (int(found[0][0]), int(found[0][1])) if len(found) else None


def check_parents(parents, batch: int, count: int, counts: np.ndarray) -> np.ndarray:
    """Each real node's parent is the root (-1) or an earlier real node; padded nodes hold -1.

    Checked over the whole batch at once; the first bad node in (sequence, node) order is named.
    """
    check_ids_type("parents", parents, (batch, count))
    table = np.array(parents.astype(mx.int64))
    node = np.arange(count)[None]
    real = node < counts[:, None]
    problems = (
        ("padding", ~real & (table != -1)),
        ("range", real & ((table < -1) | (table >= count))),
        ("padded parent", real & (table >= counts[:, None]) & (table < count)),
        ("order", real & (table >= node) & (table < counts[:, None])),
    )
    found = [(first, kind) for kind, mask in problems if (first := first_where(mask)) is not None]
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
    if parent == n or on_a_cycle(table[b, :real_count], n):
        raise ValueError(f"{where}: a cycle (a node is its own ancestor)")
    raise ValueError(f"{where}, after its child: nodes come in topological order (parent < child)")


def check_tree_tokens(tree_tokens, draft_probs, table, counts, mode: str) -> None:
    """Ids in [0, V) for real nodes (-1 for padding); drawn ones with q > 0; siblings distinct unless i.i.d."""
    batch, count = table.shape
    vocab = draft_probs.shape[-1]
    real = np.arange(count)[None] < counts[:, None]
    check_tokens("tree_tokens", tree_tokens, (batch, count), vocab, mx.array(real))
    ids = np.array(tree_tokens.astype(mx.int64))
    if mode != "top_k":
        rows = mx.array((np.maximum(table, -1) + 1).astype(np.int32))
        q_rows = mx.take_along_axis(draft_probs, rows[..., None], axis=1)  # gathered, then cast: not every row
        q_x = np.array(gather_last(q_rows, mx.array(np.maximum(ids, 0).astype(np.int32))).astype(mx.float32))
        found = first_where(real & ~(q_x > 0))
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
        found = first_where(repeats.any(axis=2))
        if found is not None:
            b, n = found
            m = int(np.argmax(repeats[b, n]))
            raise ValueError(
                f"tree_tokens: sequence {b} nodes {m} and {n} are siblings with one id {ids[b, n]}; "
                f"children drawn {mode} are distinct"
            )


def check_tree_inputs(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode) -> mx.array:
    """Validate tree input one check at a time, in argument order; returns the node counts as an mx.array."""
    check_mode(mode)
    check_probabilities("target_probs", target_probs, 3)
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs N + 1 >= 1 rows (the root's at least)")
    check_floating("draft_probs", draft_probs, 3, "probabilities")
    check_shape("draft_probs", draft_probs, (batch, rows, vocab))
    normalisation_for("draft_probs", draft_probs.dtype)
    check_probabilities("draft_probs", draft_probs, 3)
    check_ids_type("tree_tokens", tree_tokens, (batch, rows - 1))
    counts = check_num_nodes(num_nodes, batch, rows - 1)
    table = check_parents(parents, batch, rows - 1, counts)
    check_tree_tokens(tree_tokens, draft_probs, table, counts, mode)
    return mx.array(counts.astype(np.int32))


def tree_values_valid(target_probs, draft_probs, tree_tokens, parents, num_nodes, *, mode: str) -> mx.array:
    """Every value check of tree input as one lazy boolean (types and shapes already checked)."""
    batch, count = tree_tokens.shape
    vocab = target_probs.shape[-1]
    node = positions(count)[None]
    real = node < num_nodes[:, None]
    table, ids = parents.astype(mx.int64), tree_tokens.astype(mx.int64)
    ok = valid_rows("target_probs", target_probs) & valid_rows("draft_probs", draft_probs)
    ok = ok & mx.all((num_nodes >= 0) & (num_nodes <= size_operand(count)))
    # A real node's parent is -1 or an earlier (hence real) node; padding holds -1: no cycle can pass.
    ok = ok & mx.all(mx.where(real, (table >= -1) & (table < node), table == -1))
    ok = ok & mx.all(mx.where(real, ids >= 0, ids >= PAD_TOKEN) & (ids < size_operand(vocab)))
    safe = mx.clip(ids, 0, size_operand(vocab - 1)).astype(mx.int32)
    if mode != "top_k":
        q_x = gather_entries(draft_probs, mx.clip(table, -1, size_operand(count - 1)) + 1, safe)
        ok = ok & mx.all(mx.where(real, q_x > 0, True))
    if mode != "with_replacement":
        both = real[:, :, None] & real[:, None, :] & (node[:, None, :] < node[:, :, None])
        same = (table[:, :, None] == table[:, None, :]) & (safe[:, :, None] == safe[:, None, :])
        ok = ok & ~mx.any(both & same)
    return ok


def tree_guard(target_probs, draft_probs, tree_tokens, parents, num_nodes) -> tuple:
    """Ids and node counts clamped into range (parents need none: the walk reads only a real node's)."""
    vocab, count = target_probs.shape[-1], tree_tokens.shape[1]
    return (
        target_probs,
        draft_probs,
        clamped_ids(tree_tokens, PAD_TOKEN, vocab),
        parents,
        clamped_counts(num_nodes, count),
    )


def tree_types(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode) -> mx.array:
    """Tree input's types and shapes checked on the host; returns the node counts as given (values unchecked)."""
    check_mode(mode)
    check_floating("target_probs", target_probs, 3, "probabilities")
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs N + 1 >= 1 rows (the root's at least)")
    check_floating("draft_probs", draft_probs, 3, "probabilities")
    check_shape("draft_probs", draft_probs, (batch, rows, vocab))
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        normalisation_for(name, probs.dtype)
    check_ids_type("tree_tokens", tree_tokens, (batch, rows - 1))
    if num_nodes is None:
        counts = all_drafts(batch, rows - 1)
    elif not isinstance(num_nodes, mx.array) or not mx.issubdtype(num_nodes.dtype, mx.integer):
        raise ValueError("num_nodes: expected an integer mx.array of shape [B]")
    else:
        check_shape("num_nodes", num_nodes, (batch,))
        counts = num_nodes
    check_ids_type("parents", parents, (batch, rows - 1))
    return counts
