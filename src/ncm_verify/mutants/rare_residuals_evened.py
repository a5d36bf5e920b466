"""Planted bug: the correction evens out the rare tokens' residual mass (each below 1e-3 of it gets their mean).

The mass of the rare tokens together is unchanged, so a chi-square test that pools them sees nothing: a
deviation only inside the pooled remainder, which the exact step checks must catch.
"""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import RESIDUAL_FLOOR, sample_residual

RARE = 1e-3


def sample_with_rare_evened(p, q, u):
    p, q = p.astype(mx.float32), q.astype(mx.float32)
    residual = mx.maximum(p - q, 0.0)
    total = residual.sum(axis=-1, keepdims=True)
    rare = (residual > 0) & (residual < RARE * total)
    count = mx.maximum(rare.sum(axis=-1, keepdims=True), 1)
    mean = mx.where(rare, residual, 0.0).sum(axis=-1, keepdims=True) / count
    evened = mx.where(rare, mean, residual)
    usable = total > RESIDUAL_FLOOR  # else the reference's fallback to p, unchanged
    return sample_residual(mx.where(usable, evened, p), mx.where(usable, 0.0, q), u)


globals().update(with_rule(correct=sample_with_rare_evened))
