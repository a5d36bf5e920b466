"""Planted bug: the bonus after an accepted leaf is drawn from the residual max(p - q, 0) of the leaf's rows."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403


def bonus(weights, p, q):
    rest = mx.maximum(p - q, 0.0)
    return mx.where(rest.sum(axis=-1, keepdims=True) > 0, rest, p)


globals().update(with_tree_rule(bonus=bonus))
