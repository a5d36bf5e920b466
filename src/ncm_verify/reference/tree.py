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
    _as_float32,
    _check_floating,
    _check_ids_type,
    _check_probabilities,
    _check_shape,
    _check_tokens,
    _gather_last,
    _positions,
    _row_sums,
    _run_compiled_step,
    all_drafts,
    sample_residual,
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
    rest = mx.maximum(weights - mass * q_i, 0.0)
    left = _row_sums(rest)[:, None]
    kept = left > RESIDUAL_FLOOR * mass
    return mx.where(kept, rest, weights), mx.where(kept, left, mass)


def _correction_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return r


def _bonus_row(r: mx.array, p: mx.array, q: mx.array) -> mx.array:
    return p


def _draw(weights: mx.array, uniforms: mx.array) -> mx.array:
    """Inverse CDF over unnormalised `weights` (the chain's two-level sampler with q = 0)."""
    return sample_residual(weights, mx.zeros_like(weights), uniforms)


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

    Unvalidated and traceable by ``mx.compile``; one pass over the node index, vectorised over the batch.
    """
    _check_mode(mode)
    batch, count = tree_tokens.shape
    if num_nodes is None:
        num_nodes = all_drafts(batch, count)
    target, draft = _as_float32(target_probs), _as_float32(draft_probs)
    tokens, read_parents = tree_tokens.astype(mx.int32), rules.parents(parents.astype(mx.int32))
    vocab = target.shape[-1]
    current = mx.full((batch,), -1, dtype=mx.int32)
    p_row, q_row, r = target[:, 0], draft[:, 0], target[:, 0]
    # A target row counts as mass 1, as validation left it: the chain judges u q < p alike.
    mass = mx.ones((batch, 1), dtype=mx.float32)
    tried = mx.zeros((batch, vocab), dtype=mx.bool_)
    num_accepted = mx.zeros((batch,), dtype=mx.int32)
    path = mx.full((batch, count), PAD_TOKEN, dtype=mx.int32)
    has_children = mx.zeros((batch,), dtype=mx.bool_)
    for n in range(count):
        x = tokens[:, n]
        candidate = (read_parents[:, n] == current) & (n < num_nodes)
        q_i = rules.proposal(q_row, tried, x, mode)
        accepted = rules.accept(_gather_last(r, x), mass[:, 0] * _gather_last(q_i, x), uniforms[:, 0, n]) & candidate
        rejected = candidate & ~accepted
        updated, updated_mass = rules.update(r, mass, q_i)
        r = mx.where(rejected[:, None], updated, r)
        mass = mx.where(rejected[:, None], updated_mass, mass)
        tried = tried | (rejected[:, None] & (_positions(vocab)[None] == x[:, None]))
        # The accepted node becomes current: its rows, no sibling tried, its children not yet seen.
        moved = accepted[:, None]
        p_row = mx.where(moved, target[:, n + 1], p_row)
        q_row = mx.where(moved, draft[:, n + 1], q_row)
        r = mx.where(moved, target[:, n + 1], r)
        mass = mx.where(moved, 1.0, mass)
        tried = tried & ~moved
        has_children = (has_children | candidate) & ~accepted
        path = mx.where(accepted[:, None] & (_positions(count)[None] == num_accepted[:, None]), n, path)
        num_accepted = num_accepted + accepted.astype(mx.int32)
        current = mx.where(accepted, n, current)
    weights = mx.where(has_children[:, None], rules.correction(r, p_row, q_row), rules.bonus(r, p_row, q_row))
    last = rules.draw(weights, uniforms[:, 1, 0]).astype(mx.int32)
    kept = mx.take_along_axis(tokens, mx.maximum(path, 0), axis=1)
    position = _positions(count + 1)[None]
    padded = mx.concatenate([kept, mx.full((batch, 1), PAD_TOKEN, dtype=mx.int32)], axis=1)
    out = mx.where(position < num_accepted[:, None], padded, PAD_TOKEN)
    out = mx.where(position == num_accepted[:, None], last[:, None], out)
    return TreeOutcome(out, num_accepted, path)


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


@functools.lru_cache(maxsize=64)
def _apply_for(mode: str, rules: TreeRules, apply: Callable) -> Callable:
    """`apply` with its mode bound, made once per (mode, rules, apply) so its compiled step is cached."""

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
    if validate:
        num_nodes = _check_tree_inputs(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode)
    else:
        _check_mode(mode)
        if num_nodes is None:
            num_nodes = all_drafts(target_probs.shape[0], tree_tokens.shape[1])
    arrays = (target_probs, draft_probs, tree_tokens, parents, num_nodes)
    step = _apply_for(mode, rules, apply)
    # The chain's compiled step reads only `rules.uniforms` and hands `rules` on to `step`.
    return TreeOutcome(*_run_compiled_step(step, cast(Rules, rules), arrays, key, tree_tokens.shape[1] + 1))
