"""Planted bug: the residual mass is not reset when the walk reaches a node.

Its weights restart from the node's own target row, but its mass stays what the rejected siblings above left
(below 1), so the node's children are judged ``u * m * q_i(x) < p(x)`` and later rejections subtract ``m q_i``:
acceptance too likely at the next level, and a residual of the wrong shape.
"""

import mlx.core as mx

from ncm_verify.mutants import with_tree_levels
from ncm_verify.reference import *  # noqa: F401,F403


def start(p, mass, tried):
    return p, mass, mx.zeros_like(tried)


globals().update(with_tree_levels(start))
