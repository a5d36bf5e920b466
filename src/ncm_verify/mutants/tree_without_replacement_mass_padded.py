"""Planted bug: for children drawn without replacement the tree walk divides q by the mass left plus 1e-5, so each
later sibling's q_i is about 1e-5 of itself too small."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.arrays import row_sums
from ncm_verify.reference._kernels.tree import tree_proposal


def padded_proposal(q, tried, x, mode):
    if mode != "without_replacement":
        return tree_proposal(q, tried, x, mode)
    left = mx.where(tried, 0.0, q)
    return mx.where(mx.any(tried, axis=-1, keepdims=True), left / (row_sums(left)[:, None] + 1e-5), q)


globals().update(with_tree_rule(proposal=padded_proposal))
