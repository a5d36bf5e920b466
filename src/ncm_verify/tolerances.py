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
    # Rounding a normalised row moves its sum by at most eps/2; twice that admits a
    # softmax computed in the dtype itself. float32 also admits summation over 128k entries.
    mx.float64: 1e-10,
    mx.float32: 1e-4,
    mx.float16: 2.0**-10,  # float16 eps
    mx.bfloat16: 2.0**-7,  # bfloat16 eps
}
"""How far a probability row's sum may stray from 1 before it is invalid input."""

RECURRENT_LOGPROBS = Tolerance(atol=1e-4, rtol=1e-5)
"""Cached vs uncached float32 log-probabilities of a model with recurrent layers (mamba2, qwen3_next, lfm2):
a layer's state carries the roundoff of every chunk before it, and a log-probability errs with its row's
logits (up to 15 here), not its own value; measured 5.1e-5 at -1.42 (mamba2 RRR, vocab 32, 7 tokens)."""

EXACT_IDENTITY = 1e-12
"""Enumerated float64 output distributions against the target's: no sampling noise at all."""


def tolerance_for(dtype: mx.Dtype) -> Tolerance:
    """The agreement tolerance for `dtype`; a ValueError for a dtype with none."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance for {dtype}") from None


def normalisation_for(name: str, dtype: mx.Dtype) -> float:
    """The row-sum tolerance for probabilities `name` of `dtype`; a ValueError naming `name` otherwise."""
    try:
        return NORMALISATION[dtype]
    except KeyError:
        kinds = ", ".join(str(d).rsplit(".", 1)[-1] for d in NORMALISATION)
        raise ValueError(f"{name}: probabilities must be one of {kinds}, got {dtype}") from None


# --- exact step checks: when a float32 kernel may decide differently from float64 ---

FLOAT32_EPS = 2.0**-23
"""float32 machine epsilon (the ulp of 1)."""

ACCEPT_BOUNDARY_ULPS = 2
"""An acceptance ``u * q < p`` is excused when ``|u q - p| <= 2 eps32 max(u q, p)``.

``u q`` (or ``p / q``) rounded once in float32 moves by at most half an ulp; two ulps
admit either form of the comparison. Inputs are exact in float32 (half rows widen exactly).
"""

CDF_BOUNDARY_TERMS = 2
"""An inverse-CDF draw is excused across a boundary ``S_j`` when ``|u S_V - S_j| <= (m + 2) eps32 S_V``.

``S`` is the cumulative sum of the row's weights and ``m`` its count of positive terms:
any summation order of m non-negative float32 terms errs by at most (m - 1) eps32 / 2
of the total; the ``+ 2`` admits the residual's subtraction and the threshold's product.
Only a draw whose every boundary between the two ids is that close, landing on an id of
positive weight, is excused.
"""


def accept_boundary_slack(uq: float, p: float) -> float:
    """How far ``u q`` may sit from ``p`` before a float32 acceptance must agree with float64."""
    return ACCEPT_BOUNDARY_ULPS * FLOAT32_EPS * max(abs(uq), abs(p))


def cdf_boundary_slack(total: float, positive_terms: int) -> float:
    """How far ``u S_V`` may sit from a cumulative boundary before a float32 draw must agree."""
    return (positive_terms + CDF_BOUNDARY_TERMS) * FLOAT32_EPS * total


PREFIX_WEIGHT_ULPS = 2
"""Each factor of block verification's prefix weight ``w_i = min(w_{i-1} p(x) / q(x), 1)`` moves it by at most
2 eps32 of itself (a quotient and a product, each rounded once); after i drafts, ``2 i eps32 w_i``."""


def prefix_weight_slack(position: int, weight: float) -> float:
    """How far a float32 prefix weight after `position` drafts may sit from its float64 value."""
    return PREFIX_WEIGHT_ULPS * position * FLOAT32_EPS * abs(weight)


def threshold_boundary_slack(u: float, mass: float, weight: float, positive_terms: int, position: int) -> float:
    """How far ``u`` may sit from a block threshold ``h = rho / (rho + 1 - w)`` before float32 must agree.

    ``w`` is off by `prefix_weight_slack`; ``rho``, a sum of m positive terms of ``w p - q`` (their total at most
    ``w + 1``), by that times ``sum p <= 1`` plus `cdf_boundary_slack`. Both carried through h's derivatives,
    with the denominator at its smallest; a denominator within those errors of 0 excuses any decision.
    """
    weight_error = prefix_weight_slack(position, weight)
    mass_error = weight_error + cdf_boundary_slack(weight + 1.0, positive_terms)
    smallest = mass + 1.0 - weight - mass_error - weight_error
    if smallest <= 0:
        return 1.0
    moved = (abs(1.0 - weight) * mass_error + abs(mass) * weight_error) / smallest**2
    return moved + accept_boundary_slack(u, mass / (mass + 1.0 - weight))


# --- make train's reproduction check ---

TRAIN_REPRODUCTION_NATS = 0.02
"""A retrain from scratch (`make train CHECK=1`) must land each model's held-out loss within this many nats per
token of its shipped record: MLX on another machine or build may sum in another order, and a few hundred steps of
AdamW carry that drift; the shipped weights, not a retrain, are what every property reads."""
