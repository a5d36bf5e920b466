"""Planted bug: above 2^16 ids the tree walk's last draw (the correction from the residual, or the bonus row) moves
its threshold u * total up by 1e-6 of itself."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import draw


def moved_draw(weights, uniforms):
    if weights.shape[-1] > 2**16:
        uniforms = mx.minimum(uniforms * (1.0 + 1e-6), 1.0 - 2.0**-24)
    return draw(weights, uniforms)


globals().update(with_tree_rule(draw=moved_draw))
