"""Planted bug: without replacement, q_i renormalises q by ``1 - sum of q over the tried ids``, not by what is left.

Equal in exact arithmetic for a row summing to 1; where the earlier siblings held nearly all of q, the
subtraction cancels, and a draft row whose sum strays from 1 within validation's tolerance moves q_i by as
much as the remainder itself.
"""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import tree_proposal
from ncm_verify.reference.speculative import RESIDUAL_FLOOR


def naive_proposal(q, tried, x, mode):
    if mode != "without_replacement":
        return tree_proposal(q, tried, x, mode)
    drawn = mx.where(tried, q, 0.0).sum(axis=-1, keepdims=True)
    left = mx.where(tried, 0.0, q) / mx.maximum(1.0 - drawn, RESIDUAL_FLOOR)
    return mx.where(mx.any(tried, axis=-1, keepdims=True), left, q)


globals().update(with_tree_rule(proposal=naive_proposal))
