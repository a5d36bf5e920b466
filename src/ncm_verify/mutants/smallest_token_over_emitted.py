"""Planted bug: the correction gives its least likely possible token 5% of the residual mass more.

Mass moved into the smallest bin a chi-square test keeps: the shape its noncentral model overrates.
"""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import RESIDUAL_FLOOR, sample_residual

BOOST = 0.05


def sample_with_smallest_boosted(p, q, u):
    p, q = p.astype(mx.float32), q.astype(mx.float32)
    residual = mx.maximum(p - q, 0.0)
    total = residual.sum(axis=-1, keepdims=True)
    smallest = mx.argmin(mx.where(residual > 0, residual, mx.inf), axis=-1, keepdims=True)
    boosted = residual + BOOST * total * (mx.arange(residual.shape[-1]) == smallest)
    usable = total > RESIDUAL_FLOOR  # else the reference's fallback to p, unchanged
    return sample_residual(mx.where(usable, boosted, p), mx.where(usable, 0.0, q), u)


globals().update(with_rule(correct=sample_with_smallest_boosted))
