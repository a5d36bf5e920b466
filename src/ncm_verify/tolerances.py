"""Every numeric tolerance of the suite, in one table keyed by dtype.

An override is a named constant with a one-line reason. Ill-conditioned
inputs are excluded by the strategies, never by loosening a tolerance here.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np


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
"""How far a probability row's sum may stray from 1 before it is invalid input (float32 rows of a large vocabulary:
at least `float32_softmax_normalisation`)."""

CHECK_SUM_DEPTH = 31 + 15
"""Additions on one path of the check's own sum (reference `row_sums`: blocks of 32, then of 16) before its last
level, which adds ceil(V / 512) more."""


def float32_softmax_normalisation(vocab: int) -> float:
    """How far a float32 softmax row of `vocab` entries may sum from 1, in the worst case.

    Whatever order a softmax sums its `vocab` float32 weights in, the sum errs by at most gamma_{V-1} of itself
    (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 4.4; gamma_n = n u / (1 - n u), u = 2^-24);
    dividing each weight by it (or multiplying by its rounded reciprocal) adds two roundings, and the check's own
    blocked sum gamma_{CHECK_SUM_DEPTH + ceil(V / 512)}. MLX's CPU `mx.softmax` sums sequentially: on SmolLM2's rows
    (V = 49 152, T = 1) its rows sum to 1 + 2.06e-4 (exact float64 sum of its outputs), 7 % of this bound (2.95e-3)
    and twice float32's 1e-4; a float64 softmax rounded to float32 sums within 3e-8.
    """
    vocab = max(vocab, 1)
    additions = (vocab - 1) + 2 + CHECK_SUM_DEPTH + -(-vocab // 512)
    unit = additions * 2.0**-24
    return unit / (1 - unit)


RECURRENT_LOGPROBS = Tolerance(atol=1e-4, rtol=1e-5)
"""Cached vs uncached float32 log-probabilities of a model with recurrent layers (mamba2, qwen3_next, lfm2):
a layer's state carries the roundoff of every chunk before it, and a log-probability errs with its row's
logits (up to 15 here), not its own value; measured 5.1e-5 at -1.42 (mamba2 RRR, vocab 32, 7 tokens)."""

EXACT_IDENTITY = 1e-12
"""Enumerated float64 output distributions against the target's: no sampling noise at all."""

LAW_FROM_FLOAT32_ROWS = 1e-5
"""A law enumerated in float64 from the float32 rows a loop handed its verifier, against the target's from float64
rows: each probability a product of a few rows rounded to float32 (a relative 1e-7 each), the mismatch of softmax
in float32 and in float64 included; a wrong row moves mass by 1e-2 or more."""


def tolerance_for(dtype: mx.Dtype) -> Tolerance:
    """The agreement tolerance for `dtype`; a ValueError for a dtype with none."""
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"dtype: no tolerance for {dtype}") from None


def normalisation_for(name: str, dtype: mx.Dtype, vocab: int = 1) -> float:
    """The row-sum tolerance for probabilities `name` of `dtype` over `vocab` entries (float32: NORMALISATION's, or
    `float32_softmax_normalisation` where larger); a ValueError naming `name` for a dtype without one."""
    try:
        tolerance = NORMALISATION[dtype]
    except KeyError:
        kinds = ", ".join(str(d).rsplit(".", 1)[-1] for d in NORMALISATION)
        raise ValueError(f"{name}: probabilities must be one of {kinds}, got {dtype}") from None
    return max(tolerance, float32_softmax_normalisation(vocab)) if dtype == mx.float32 else tolerance


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
    """How far ``u S_V`` may sit from a cumulative boundary before a float32 draw must agree, whatever the order."""
    return (positive_terms + CDF_BOUNDARY_TERMS) * FLOAT32_EPS * total


FLOAT32_SIGNIFICAND_BITS = 24
EXACT_SUM_ULPS = 2
"""A draw from an exactly summed row (`exactly_summed`) is excused only within 2 eps32 of its total.

Every cumulative sum is then exact in any order (blocked, pairwise, a GPU scan, sequential), and so is the
division by a power-of-two total; only ``u * S_V`` (exact too) or ``u`` against ``S_k / S_V`` remain: two ulps
admit either form. At V = 128 256 the any-order bound above is 1.5e-2 of the total; this one is 2.4e-7.
"""


def float32_exact(values) -> np.ndarray:
    """Per entry: whether the float64 value is a float32 value (so float32 holds it without rounding)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.isfinite(values) & (values.astype(np.float32).astype(np.float64) == values)


def sums_exactly(weights) -> bool:
    """Whether float32 sums every subset of `weights` exactly, in any order: all non-negative multiples of one power
    of two g with their total at most ``2^24 g`` (every partial sum is then a multiple of g below it)."""
    weights = np.asarray(weights, dtype=np.float64)
    positive = weights[weights > 0]
    if (weights < 0).any() or not np.isfinite(weights).all():
        return False
    if not len(positive):
        return True
    mantissa, exponent = np.frexp(positive)
    integers = (mantissa * 2.0**53).astype(np.int64)  # exact: every float64 significand
    lowest = integers & -integers  # the lowest set bit of each
    grid = np.ldexp(lowest.astype(np.float64), exponent - 53).min()
    total = float(positive.sum())  # exact in float64 when the row qualifies (24 bits of a 53-bit significand)
    return bool(total <= grid * 2.0**FLOAT32_SIGNIFICAND_BITS)


def exactly_summed(weights) -> bool:
    """Whether float32 sums every prefix of `weights` exactly in any order and normalises it exactly: `sums_exactly`
    with a positive power-of-two total (dividing by it is exact too)."""
    weights = np.asarray(weights, dtype=np.float64)
    if not sums_exactly(weights) or not (weights > 0).any():
        return False
    return bool(np.frexp(float(weights[weights > 0].sum()))[0] == 0.5)


def draw_boundary_slack(weights) -> float:
    """How far ``u S_V`` may sit from a cumulative boundary of `weights` before a float32 draw must agree:
    `EXACT_SUM_ULPS` of the total on an exactly summed row, else the any-order bound `cdf_boundary_slack`."""
    weights = np.asarray(weights, dtype=np.float64)
    total = float(weights.sum())
    if exactly_summed(weights):
        return EXACT_SUM_ULPS * FLOAT32_EPS * total
    return cdf_boundary_slack(total, int(np.count_nonzero(weights)))


PREFIX_WEIGHT_ULPS = 2
"""Each factor of block verification's prefix weight ``w_i = min(w_{i-1} p(x) / q(x), 1)`` moves it by at most
2 eps32 of itself (a quotient and a product, each rounded once); after i drafts, ``2 i eps32 w_i``."""


def prefix_weight_slack(position: int, weight: float) -> float:
    """How far a float32 prefix weight after `position` drafts may sit from its float64 value."""
    return PREFIX_WEIGHT_ULPS * position * FLOAT32_EPS * abs(weight)


def threshold_boundary_slack(
    u: float, mass: float, weight: float, mass_error: float, weight_error: float, denominator_error: float = 0.0
) -> float:
    """How far ``u`` may sit from a block threshold ``h = rho / (rho + 1 - w)`` before float32 must agree.

    ``w`` is off by `weight_error`, ``rho`` by `mass_error` and the denominator's own roundings by
    `denominator_error` (each from `exact_block.block_quantities`, which counts only the roundings its rows allow):
    carried through h's derivatives with the denominator at its smallest, plus the division's rounding. A
    denominator within those errors of 0 excuses any decision.
    """
    smallest = mass + 1.0 - weight - mass_error - weight_error - denominator_error
    if smallest <= 0:
        return 1.0
    moved = (abs(1.0 - weight) * mass_error + abs(mass) * (weight_error + denominator_error)) / smallest**2
    return moved + accept_boundary_slack(u, mass / (mass + 1.0 - weight))


# --- make train's reproduction check ---

TRAIN_REPRODUCTION_NATS = 0.02
"""A retrain from scratch (`make train CHECK=1`) must land each model's held-out loss within this many nats per
token of its shipped record: MLX on another machine or build may sum in another order, and a few hundred steps of
AdamW carry that drift; the shipped weights, not a retrain, are what every property reads."""


# --- SmolLM2-135M, a real target: mlx-lm's model against the float64 NumPy reading of the GGUF ---

SMOLLM2_LOGITS_RTOL = {
    # 30 layers of float32 sums (576- and 1536-long): measured 31-33 eps32 of max |logit| on three prompts.
    "float32": 128 * FLOAT32_EPS,
    # mlx-lm computes in the scales' dtype (float16): logits rounded to half an ulp; measured 0.45-0.65 eps16.
    "quantized": 2.0**-9,
}
"""max |logit - float64 logit| over a prompt's positions, as a fraction of its max |float64 logit|, per form."""


SERVED_LOGPROBS: dict[str, float] = {
    # float32: a served cache attends in chunks (cached rows + the rest) where the oracle runs one forward; summation
    # order moves a log-probability by ~1e-6 (measured 2.4e-7 on the sliding llama); recurrent layers carry it
    # further (RECURRENT_LOGPROBS' reasoning), so one bound for the three families.
    "float32": RECURRENT_LOGPROBS.atol,
    # bfloat16: the engine reports log-probabilities computed in bfloat16 from bfloat16 logits (|logit| < 16 in the
    # tiny models, ulp 2^-4 there): the logit and the log-sum-exp rounded to half an ulp each, 2^-4 in all; measured
    # 0.026 cached vs uncached on the tiny llama. A cache holding a wrong position moves them by 0.1 or more.
    "bfloat16": 2.0**-4,
}
"""Served (cached) against uncached log-probabilities of the same tokens, per model dtype
(`mlx_peer_properties/prefix_cache_machine.py`)."""

SERVED_NEAR_TIE: dict[str, float] = {"float32": 2 * RECURRENT_LOGPROBS.atol, "bfloat16": 2 * 2.0**-4}
"""A served greedy token may differ from the uncached argmax only where the oracle's top two log-probabilities lie
within this (twice `SERVED_LOGPROBS`: each side's error); the comparison stops there, the continuation being another
sequence."""
