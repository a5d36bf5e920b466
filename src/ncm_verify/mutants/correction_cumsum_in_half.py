"""Planted bug: the correction's inverse CDF accumulates its weights in float16."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import RESIDUAL_FLOOR


def sample_with_half_cumsum(p, q, u):
    p = p.astype(mx.float32)
    residual = mx.maximum(p - q.astype(mx.float32), 0.0)
    weights = mx.where(residual.sum(axis=-1, keepdims=True) > RESIDUAL_FLOOR, residual, p)
    cdf = mx.cumsum(weights.astype(mx.float16), axis=-1).astype(mx.float32)
    return (cdf < u[..., None] * cdf[..., -1:]).sum(axis=-1).astype(mx.int32)


globals().update(with_rule(correct=sample_with_half_cumsum))
