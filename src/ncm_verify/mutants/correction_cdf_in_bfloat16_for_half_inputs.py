"""Planted bug: for float16 or bfloat16 rows the correction's inverse CDF is accumulated in bfloat16 (float32 rows
are drawn right)."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.sampling import sample_residual
from ncm_verify.reference.speculative import RESIDUAL_FLOOR


def sample_with_bfloat16_cdf(p, q, u):
    if p.dtype not in (mx.float16, mx.bfloat16):
        return sample_residual(p, q, u)
    p, q = p.astype(mx.float32), q.astype(mx.float32)
    residual = mx.maximum(p - q, 0.0)
    weights = mx.where(residual.sum(axis=-1, keepdims=True) > RESIDUAL_FLOOR, residual, p)
    cdf = mx.cumsum(weights.astype(mx.bfloat16), axis=-1).astype(mx.float32)
    return (cdf < u[..., None] * cdf[..., -1:]).sum(axis=-1).astype(mx.int32)


globals().update(with_rule(correct=sample_with_bfloat16_cdf))
