"""Planted bug: residual_distribution normalises by MLX's one-pass (sequential on the CPU) float32 sum."""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import residual_distribution as _reference_residual
from ncm_verify.reference.speculative import RESIDUAL_FLOOR


def residual_distribution(p, q):
    _reference_residual(p, q)  # the reference's input checks
    residual = mx.maximum(p.astype(mx.float32) - q.astype(mx.float32), 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    return mx.where(mass > RESIDUAL_FLOOR, residual / mx.maximum(mass, RESIDUAL_FLOOR), p.astype(mx.float32))
