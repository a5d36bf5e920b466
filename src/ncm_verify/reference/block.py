"""Block verification in MLX, batch-first, on the chain's arguments (issue 27).

Sun et al., "Block Verification Accelerates Speculative Decoding" (arXiv 2403.10444, ICLR 2025),
Algorithm 2. With the prefix weights ``w_0 = 1``, ``w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)`` and the
residual masses ``rho_i = sum_x max(w_{i-1} p_i(x) - q_i(x), 0)`` (row i - 1 of the inputs is position i),
position i of a block of g drafts passes iff ``u_i < h_i``, where ``h_i = rho_{i+1} / (rho_{i+1} + 1 - w_i)``
for i < g (1 where that is 0 / 0, as vllm-project/vllm-ascend#11985 does) and ``h_g = w_g``. The *longest*
passing prefix stands (tau = the last passing i, 0 if none; the rule vllm-project/vllm#46781 merged). Then
one token: from ``norm(max(w_tau p - q, 0))`` at row tau when tau < g, else the bonus from the target's row g.
Exact (their Theorem 1) and never fewer accepted drafts in expectation than the chain rule (Theorem 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, cast

import mlx.core as mx

from ncm_verify.reference.speculative import (
    REFERENCE_RULES,
    ChainOutcome,
    Rules,
    _as_float32,
    _drafted_columns,
    _emit_tokens,
    _gather_drafted,
    _gather_row,
    _positions,
    _row_sums,
    _scale_rows,
    all_drafts,
    sample_residual,
    verify_chain,
)

__all__ = ["BlockRules", "BLOCK_RULES", "apply_block", "verify_block"]


class BlockRules(NamedTuple):
    """The decisions of block verification; a planted bug swaps one out.

    ``weight(w_prev, p_x, q_x) -> w``: the prefix weight after one draft; ``residual_weights(w [B, G+1]) ->
    [B, G]``: the weight scaling p in each row's residual; ``judged(num_draft, G) -> lengths`` the thresholds
    are built for; ``passes(u, h, p_x, q_x) -> bool``; ``length(passed [B, G]) -> tau``; ``correction(p, q, w,
    u) -> ids`` (w: the residual's weight); ``uniforms(keys [B, 2], shape) -> [B, *shape]``.
    """

    weight: Callable
    residual_weights: Callable
    judged: Callable
    passes: Callable
    length: Callable
    correction: Callable
    uniforms: Callable


def _prefix_weight(previous: mx.array, p_x: mx.array, q_x: mx.array) -> mx.array:
    """``min(w p(x) / q(x), 1)``: a drafted token has q(x) > 0 (validated)."""
    return mx.minimum(previous * p_x / mx.maximum(q_x, 1e-38), 1.0)


def _threshold(mass: mx.array, weight: mx.array) -> mx.array:
    """``rho / (rho + 1 - w)``; 1 where the denominator is 0 (rho = 0 and w = 1)."""
    denominator = mass + (1.0 - weight)
    return mx.where(denominator > 0, mass / mx.maximum(denominator, 1e-38), 1.0)


def _longest_passing(passed: mx.array) -> mx.array:
    """The last passing position (1-based), 0 if none passed."""
    return mx.max(mx.where(passed, _positions(passed.shape[1]) + 1, 0), axis=1)


def _block_correction(p_row: mx.array, q_row: mx.array, weight: mx.array, uniforms: mx.array) -> mx.array:
    return sample_residual(_scale_rows(p_row, weight), q_row, uniforms)


BLOCK_RULES = BlockRules(
    weight=_prefix_weight,
    residual_weights=lambda weights: weights[:, :-1],
    judged=lambda num_draft, max_draft: num_draft,
    passes=lambda uniforms, thresholds, p_x, q_x: uniforms < thresholds,
    length=_longest_passing,
    correction=_block_correction,
    uniforms=REFERENCE_RULES.uniforms,
)


def apply_block(
    target_probs, draft_probs, draft_tokens, num_draft, uniforms, *, rules: BlockRules = BLOCK_RULES
) -> ChainOutcome:
    """Block verification given uniforms ``[B, 2, G+1]``: ``u[b, 0, i]`` judges position i + 1, ``u[b, 1, 0]``
    draws the last token. Unvalidated and traceable by ``mx.compile``; the chain's outcome."""
    batch, max_draft = draft_tokens.shape
    target, draft = _as_float32(target_probs), _as_float32(draft_probs)
    if num_draft is None:
        num_draft = all_drafts(batch, max_draft)
    num_draft = num_draft.astype(mx.int32)
    judged = rules.judged(num_draft, max_draft)
    p_x, q_x = _gather_drafted(target, draft_tokens), _gather_drafted(draft, draft_tokens)
    weights = [mx.ones((batch,), dtype=mx.float32)]
    for i in range(max_draft):
        weights.append(rules.weight(weights[-1], p_x[:, i], q_x[:, i]))
    weight = mx.stack(weights, axis=1)  # [B, G+1]: w_0 .. w_G
    scale = rules.residual_weights(weight)  # [B, G]: the weight of each row's residual
    if max_draft:
        residual = mx.maximum(scale[..., None] * target[:, :max_draft] - draft, 0.0)
        # rho_{i+1} of row i; the row past the drafts has none (h_g = w_g replaces it).
        mass = mx.concatenate([_row_sums(residual)[:, 1:], mx.zeros((batch, 1))], axis=1)
        position = _positions(max_draft)[None] + 1
        last = position == judged[:, None]
        thresholds = mx.where(last, weight[:, 1:], _threshold(mass, weight[:, 1:]))
        passed = rules.passes(uniforms[:, 0, :max_draft], thresholds, p_x, q_x)
        passed = passed & _drafted_columns(judged, max_draft)
        num_accepted = mx.minimum(rules.length(passed).astype(mx.int32), num_draft)
        corrected = num_accepted < num_draft
        # Uncorrected sequences replace both below, so any drafted row serves them: no literal G - 1 (a kernel per G)
        emission = mx.maximum(mx.minimum(num_accepted, num_draft - 1), 0)
        p_weight = mx.take_along_axis(scale, emission[:, None], axis=1)[:, 0]
        p_weight = mx.where(corrected, p_weight, 1.0)
        q_row = _gather_row(draft, emission)
        q_row = _scale_rows(q_row, corrected.astype(mx.float32))
    else:
        num_accepted = mx.zeros((batch,), dtype=mx.int32)
        p_weight = mx.ones((batch,), dtype=mx.float32)
        q_row = mx.zeros_like(target[:, 0])
    p_row = _gather_row(target, num_accepted)
    last_token = rules.correction(p_row, q_row, p_weight, uniforms[:, 1, 0])
    return ChainOutcome(_emit_tokens(draft_tokens, num_accepted, last_token), num_accepted)


def verify_block(
    target_probs,
    draft_probs,
    draft_tokens,
    *,
    key,
    num_draft=None,
    validate: bool = True,
    rules: BlockRules = BLOCK_RULES,
    apply=apply_block,
) -> ChainOutcome:
    """Block speculative verification (Sun et al., arXiv 2403.10444): the longest prefix the block's
    thresholds pass stands, then one corrected or bonus token. Exact; accepts at least the chain's drafts.

    Args:
        target_probs: ``[B, G+1, V]`` target distributions; row i follows draft i-1.
        draft_probs: ``[B, G, V]`` the distributions the drafts were sampled from.
        draft_tokens: ``[B, G]`` drafted ids (-1 allowed beyond ``num_draft``).
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
        num_draft: ``[B]`` per-sequence draft lengths in [0, G]; default G.
        validate: check the input (set False only under ``mx.compile``).

    Returns:
        ChainOutcome: emitted tokens ``[B, G+1]`` and accepted counts ``[B]``.
    """
    # The chain's entry point: the same validation, uniforms and compiled step, with this apply and its rules.
    return verify_chain(
        target_probs,
        draft_probs,
        draft_tokens,
        key=key,
        num_draft=num_draft,
        validate=validate,
        rules=cast(Rules, rules),
        apply=apply,
    )
