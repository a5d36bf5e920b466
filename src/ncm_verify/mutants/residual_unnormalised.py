"""Planted bug: inverse-CDF draw from the residual's unnormalised cumulative sum."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403


def correct_unnormalised(p, q, u):
    cdf = mx.cumsum(mx.maximum(p.astype(mx.float32) - q.astype(mx.float32), 0.0), axis=-1)
    return mx.minimum((cdf < u[..., None]).sum(axis=-1), p.shape[-1] - 1).astype(mx.int32)


globals().update(with_rule(correct=correct_unnormalised))
