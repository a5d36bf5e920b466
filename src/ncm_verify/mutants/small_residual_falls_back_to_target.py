"""Planted bug: a residual of mass below 1e-4 counts as zero, so the correction comes from p itself.

A floor meant to catch p == q set far too high: with p and q nearly equal the residual
max(p - q, 0) is tiny but real, and drawing from p instead moves the output by at most
that mass (1e-4 in total variation) — below what any affordable sample size sees.
"""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual

COARSE_FLOOR = 1e-4


def sample_residual_coarse_floor(p, q, uniforms):
    mass = mx.maximum(p.astype(mx.float32) - q.astype(mx.float32), 0.0).sum(axis=-1, keepdims=True)
    # A draft row of zeros makes the residual the target row.
    return sample_residual(p, mx.where(mass < COARSE_FLOOR, 0.0, q), uniforms)


globals().update(with_rule(correct=sample_residual_coarse_floor))
