"""Block verification's step given its uniforms, and the decisions it is built from (`BlockRules`).

The algorithm is stated in :mod:`ncm_verify.reference.block`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import (
    all_drafts,
    as_float32,
    drafted_columns,
    emit_tokens,
    gather_drafted,
    gather_row,
    positions,
    row_sums,
    scale_rows,
)
from ncm_verify.reference._kernels.chain import ChainOutcome
from ncm_verify.reference._kernels.sampling import make_uniforms, sample_residual


class BlockRules(NamedTuple):
    """The decisions of block verification; a planted bug swaps one out.

    ``weight(w_prev, p_x, q_x) -> w``: the prefix weight after one draft; ``residual_weights(w [B, G+1]) ->
    [B, G]``: the weight scaling p in each row's residual; ``threshold(rho, w) -> h``; ``judged(num_draft, G) ->
    lengths`` the thresholds are built for; ``passes(u, h, p_x, q_x) -> bool``; ``length(passed [B, G]) -> tau``;
    ``correction(p, q, w, u) -> ids`` (w: the residual's weight); ``uniforms(keys [B, 2], shape) -> [B, *shape]``.
    """

    weight: Callable
    residual_weights: Callable
    threshold: Callable
    judged: Callable
    passes: Callable
    length: Callable
    correction: Callable
    uniforms: Callable


def prefix_weight(previous: mx.array, p_x: mx.array, q_x: mx.array) -> mx.array:
    """``min(w p(x) / q(x), 1)``: a drafted token has q(x) > 0 (validated)."""
    return mx.minimum(previous * p_x / mx.maximum(q_x, 1e-38), 1.0)


def threshold(mass: mx.array, weight: mx.array) -> mx.array:
    """``rho / (rho + 1 - w)``; 1 where the denominator is 0 (rho = 0 and w = 1)."""
    denominator = mass + (1.0 - weight)
    return mx.where(denominator > 0, mass / mx.maximum(denominator, 1e-38), 1.0)


def longest_passing(passed: mx.array) -> mx.array:
    """The last passing position (1-based), 0 if none passed."""
    return mx.max(mx.where(passed, positions(passed.shape[1]) + 1, 0), axis=1)


def block_correction(p_row: mx.array, q_row: mx.array, weight: mx.array, uniforms: mx.array) -> mx.array:
    return sample_residual(scale_rows(p_row, weight), q_row, uniforms)


BLOCK_RULES = BlockRules(
    weight=prefix_weight,
    residual_weights=lambda weights: weights[:, :-1],
    threshold=threshold,
    judged=lambda num_draft, max_draft: num_draft,
    passes=lambda uniforms, thresholds, p_x, q_x: uniforms < thresholds,
    length=longest_passing,
    correction=block_correction,
    uniforms=make_uniforms,
)


def apply_block(
    target_probs, draft_probs, draft_tokens, num_draft, uniforms, *, rules: BlockRules = BLOCK_RULES
) -> ChainOutcome:
    """`block.apply_block` (the public face), deciding by `rules`."""
    batch, max_draft = draft_tokens.shape
    target, draft = as_float32(target_probs), as_float32(draft_probs)
    if num_draft is None:
        num_draft = all_drafts(batch, max_draft)
    num_draft = num_draft.astype(mx.int32)
    judged = rules.judged(num_draft, max_draft)
    p_x, q_x = gather_drafted(target, draft_tokens), gather_drafted(draft, draft_tokens)
    weights = [mx.ones((batch,), dtype=mx.float32)]
    for i in range(max_draft):
        weights.append(rules.weight(weights[-1], p_x[:, i], q_x[:, i]))
    weight = mx.stack(weights, axis=1)  # [B, G+1]: w_0 .. w_G
    scale = rules.residual_weights(weight)  # [B, G]: the weight of each row's residual
    if max_draft:
        residual = mx.maximum(scale[..., None] * target[:, :max_draft] - draft, 0.0)
        # rho_{i+1} of row i; the row past the drafts has none (h_g = w_g replaces it).
        mass = mx.concatenate([row_sums(residual)[:, 1:], mx.zeros((batch, 1))], axis=1)
        position = positions(max_draft)[None] + 1
        last = position == judged[:, None]
        thresholds = mx.where(last, weight[:, 1:], rules.threshold(mass, weight[:, 1:]))
        passed = rules.passes(uniforms[:, 0, :max_draft], thresholds, p_x, q_x)
        passed = passed & drafted_columns(judged, max_draft)
        num_accepted = mx.minimum(rules.length(passed).astype(mx.int32), num_draft)
        corrected = num_accepted < num_draft
        # Uncorrected sequences replace both below, so any drafted row serves them: no literal G - 1 (a kernel per G)
        emission = mx.maximum(mx.minimum(num_accepted, num_draft - 1), 0)
        p_weight = mx.take_along_axis(scale, emission[:, None], axis=1)[:, 0]
        p_weight = mx.where(corrected, p_weight, 1.0)
        q_row = gather_row(draft, emission)
        q_row = scale_rows(q_row, corrected.astype(mx.float32))
    else:
        num_accepted = mx.zeros((batch,), dtype=mx.int32)
        p_weight = mx.ones((batch,), dtype=mx.float32)
        q_row = mx.zeros_like(target[:, 0])
    p_row = gather_row(target, num_accepted)
    last_token = rules.correction(p_row, q_row, p_weight, uniforms[:, 1, 0])
    return ChainOutcome(emit_tokens(draft_tokens, num_accepted, last_token), num_accepted)
