"""Every numeric tolerance of the suite, in one table keyed by dtype.

An override is a named constant with a one-line reason. Ill-conditioned
inputs are excluded by the strategies, never by loosening a tolerance here.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx


@dataclasses.dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


TOLERANCES: dict[mx.Dtype, Tolerance] = {
    mx.float32: Tolerance(atol=1e-5, rtol=1e-5),
    mx.float16: Tolerance(atol=2e-3, rtol=2e-3),
    mx.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}
"""Logit and state agreement between two computations that may differ in kernel shapes."""

NORMALISATION: dict[mx.Dtype, float] = {
    mx.float32: 1e-4,
    mx.float16: 1e-2,
    mx.bfloat16: 4e-2,
}
"""How far a probability row's sum may stray from 1 before it is invalid input."""

EXACT_IDENTITY = 1e-12
"""Enumerated float64 output distributions against the target's: no sampling noise at all."""


def tolerance_for(dtype: mx.Dtype) -> Tolerance:
    """The agreement tolerance for `dtype`; a ValueError for a dtype with none."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance for {dtype}") from None


def normalisation_for(dtype: mx.Dtype) -> float:
    try:
        return NORMALISATION[dtype]
    except KeyError:
        raise ValueError(f"dtype: probabilities must be floating point, got {dtype}") from None
