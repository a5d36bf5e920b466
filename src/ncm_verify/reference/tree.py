"""Tree verification in MLX, batch-first: several drafted children per node.

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

This module is the public face, with the protocol's signatures; the walk is built in
:mod:`ncm_verify.reference._kernels.tree` from the decisions it is made of.
"""

from __future__ import annotations

from ncm_verify.reference._kernels.factory import REFERENCE_KERNELS
from ncm_verify.reference._kernels.tree import MODES, TreeOutcome

__all__ = ["MODES", "TreeOutcome", "apply_tree", "verify_tree"]


def apply_tree(
    target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, mode: str = "with_replacement"
) -> TreeOutcome:
    """Tree verification given uniforms ``[B, 2, N+1]``: ``u[b, 0, n]`` judges node n, ``u[b, 1, 0]`` draws the last.

    Unvalidated and traceable by ``mx.compile``, vectorised over the batch and, but for later siblings, the nodes.
    """
    return REFERENCE_KERNELS.apply_tree(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, mode=mode)


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
    return REFERENCE_KERNELS.verify_tree(
        target_probs, draft_probs, tree_tokens, parents, key=key, num_nodes=num_nodes, mode=mode, validate=validate
    )
