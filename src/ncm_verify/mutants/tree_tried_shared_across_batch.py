"""Planted bug: without replacement, the set of tried sibling ids is one set for the whole batch.

A sequence's later sibling is renormalised over the ids no sequence of the batch has tried yet: a batch of one
is walked exactly, so only a batch whose sequences try different ids shows it.
"""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import tree_proposal


def shared_proposal(q, tried, x, mode):
    shared = mx.broadcast_to(mx.any(tried, axis=0, keepdims=True), tried.shape)
    return tree_proposal(q, shared, x, mode)


globals().update(with_tree_rule(proposal=shared_proposal))
