"""Planted bug: the tree attention mask lets each node attend to its earlier siblings too (and so their K/V)."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.drafting.tree_loop import ancestors_mask


def mask_with_siblings(parents: list[int], offset: int) -> mx.array:
    seen = ancestors_mask(parents, offset)
    extra = [[False] * (offset + len(parents) + 1) for _ in range(len(parents) + 1)]
    for node, parent in enumerate(parents):
        for earlier in range(node):
            if parents[earlier] == parent:
                extra[node + 1][offset + earlier + 1] = True
    return seen | mx.array(extra)


globals().update(with_tree_loop_step(mask=mask_with_siblings))
