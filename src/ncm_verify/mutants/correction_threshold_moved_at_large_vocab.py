"""Planted bug: above 2^16 ids the correction's inverse CDF moves its threshold u * total up by 1e-6 of itself."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.sampling import sample_residual


def sample_with_moved_threshold(p, q, u):
    if p.shape[-1] <= 2**16:
        return sample_residual(p, q, u)
    return sample_residual(p, q, mx.minimum(u * (1.0 + 1e-6), 1.0 - 2.0**-24))


globals().update(with_rule(correct=sample_with_moved_threshold))
