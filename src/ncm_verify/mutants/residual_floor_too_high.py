"""Planted bug: a residual of mass below 1e-6 counts as zero, so the correction comes from p instead."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual

HIGH_FLOOR = 1e-6


def sample_with_high_floor(p, q, u):
    p, q = p.astype(mx.float32), q.astype(mx.float32)
    negligible = mx.maximum(p - q, 0.0).sum(axis=-1, keepdims=True) < HIGH_FLOOR
    return sample_residual(p, mx.where(negligible, p, q), u)  # q = p: the zero-mass fallback to p


globals().update(with_rule(correct=sample_with_high_floor))
