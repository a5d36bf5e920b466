"""Planted bug: the correction draws from max(q - p, 0) when max(p - q, 0) has mass below 1e-4."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual

SMALL_MASS = 1e-4


def sample_swapped_when_small(p, q, u):
    p, q = p.astype(mx.float32), q.astype(mx.float32)
    small = mx.maximum(p - q, 0.0).sum(axis=-1, keepdims=True) < SMALL_MASS
    return sample_residual(mx.where(small, q, p), mx.where(small, p, q), u)


globals().update(with_rule(correct=sample_swapped_when_small))
