"""The chain, greedy, factorised and latent-chain steps given their uniforms, and the rules they share."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import (
    count_accepted,
    drafted_columns,
    emit_tokens,
    gather_drafted,
    gather_last,
    gather_row,
    scale_rows,
    select_code,
)
from ncm_verify.reference._kernels.sampling import accept_drafts, first_argmax, make_uniforms, sample_residual


class Rules(NamedTuple):
    """The three sampling decisions every kernel shares; planted bugs swap one out.

    ``accept(p_x, q_x, u) -> bool``, ``correct(p, q, u) -> ids`` and
    ``uniforms(keys [B, 2], shape) -> [B, *shape]``.
    """

    accept: Callable
    correct: Callable
    uniforms: Callable


class ChainOutcome(NamedTuple):
    """``tokens [B, G+1]``: accepted drafts, one corrected or bonus token, then -1."""

    tokens: mx.array
    num_accepted: mx.array


class FactorizedOutcome(NamedTuple):
    """``tokens [B, N]`` emitted; ``accepted [B, N]`` whether each draft stood."""

    tokens: mx.array
    accepted: mx.array


class LatentChainOutcome(NamedTuple):
    """The level's latent and tokens, and which of the draft's choices stood."""

    latent: mx.array
    latent_accepted: mx.array
    tokens: mx.array
    accepted: mx.array


REFERENCE_RULES = Rules(accept=accept_drafts, correct=sample_residual, uniforms=make_uniforms)


def correct_emission_rows(rules: Rules, target_probs, draft_probs, num_accepted, num_draft, uniforms) -> mx.array:
    """Each sequence's corrected or bonus token, drawn from its emission row alone with ``uniforms [B]``."""
    max_draft = draft_probs.shape[1]
    # Only the emission row is read: the rejected position, or the bonus row (q = 0 there).
    p_row = gather_row(target_probs, num_accepted)
    if max_draft:
        # Any drafted row does where no draft was rejected (q scaled by 0): the last drafted one, no literal G - 1
        q_row = gather_row(draft_probs, mx.maximum(mx.minimum(num_accepted, num_draft - 1), 0))
        q_row = scale_rows(q_row, (num_accepted < num_draft).astype(q_row.dtype))
    else:
        q_row = mx.zeros_like(p_row)
    return rules.correct(p_row, q_row, uniforms)


CORRECTION_ENTRIES = 2**20
"""Emission-row entries per sequence group corrected together: their copies (12 MB at float32) stay within
MLX's 32 MiB CPU buffer cache, so a large batch does not page-fault fresh memory each step (4x slower at B = 32)."""


def apply_chain(
    target_probs, draft_probs, draft_tokens, num_draft, uniforms, *, rules: Rules = REFERENCE_RULES
) -> ChainOutcome:
    """`speculative.apply_chain`, deciding by `rules`."""
    max_draft = draft_tokens.shape[1]
    is_draft = drafted_columns(num_draft, max_draft)
    p_x = gather_drafted(target_probs, draft_tokens)
    q_x = gather_drafted(draft_probs, draft_tokens)
    accepted = rules.accept(p_x, q_x, uniforms[:, 0, :max_draft]) & is_draft
    num_accepted = count_accepted(accepted)
    batch, group = target_probs.shape[0], max(1, CORRECTION_ENTRIES // target_probs.shape[-1])
    inputs = (target_probs, draft_probs, num_accepted, num_draft, uniforms[:, 1, 0])
    if batch <= group:
        emitted = correct_emission_rows(rules, *inputs)
    else:
        emitted = mx.concatenate(
            [correct_emission_rows(rules, *(a[i : i + group] for a in inputs)) for i in range(0, batch, group)]
        )
    return ChainOutcome(emit_tokens(draft_tokens, num_accepted, emitted), num_accepted)


def apply_greedy(target, draft_tokens, num_draft, *, argmax: Callable = first_argmax) -> ChainOutcome:
    """Longest prefix where draft == argmax(target), then the target's argmax (`argmax`: a planted bug's swap)."""
    max_draft = draft_tokens.shape[1]
    best = argmax(target).astype(mx.int32)
    is_draft = drafted_columns(num_draft, max_draft)
    num_accepted = count_accepted((draft_tokens == best[:, :max_draft]) & is_draft)
    emitted = mx.take_along_axis(best, num_accepted[:, None], axis=1)[:, 0]
    return ChainOutcome(emit_tokens(draft_tokens, num_accepted, emitted), num_accepted)


def apply_factorized(
    target_probs, draft_probs, draft_tokens, uniforms, *, rules: Rules = REFERENCE_RULES, eligible=None
) -> FactorizedOutcome:
    """Each position accepted or corrected on its own, given uniforms ``[B, 2, N]``.

    Positions where `eligible` is False are never accepted (drafts that no longer count).
    """
    p_x = gather_last(target_probs, draft_tokens)
    q_x = gather_last(draft_probs, draft_tokens)
    accepted = rules.accept(p_x, q_x, uniforms[:, 0])
    if eligible is not None:
        accepted = accepted & eligible
    corrected = rules.correct(target_probs, draft_probs, uniforms[:, 1])
    return FactorizedOutcome(mx.where(accepted, draft_tokens.astype(mx.int32), corrected), accepted)


def apply_latent_chain(
    target_latent_probs,
    draft_latent_probs,
    draft_latent,
    target_token_probs,
    draft_token_probs,
    draft_tokens,
    uniforms,
    *,
    rules: Rules = REFERENCE_RULES,
) -> LatentChainOutcome:
    """`speculative.apply_latent_chain`, deciding by `rules`: a chain step over the codebook, then the level's
    tokens factorised given the latent (from the target alone if the latent changed)."""
    latent_step = apply_factorized(
        target_latent_probs[:, None],
        draft_latent_probs[:, None],
        draft_latent[:, None],
        uniforms[:, :, :1],
        rules=rules,
    )
    latent, latent_accepted = latent_step.tokens[:, 0], latent_step.accepted[:, 0]
    p_tokens = select_code(target_token_probs, latent)
    # A draft row of zeros makes the residual the target row: a fresh target draw.
    q_tokens = mx.where(latent_accepted[:, None, None], select_code(draft_token_probs, draft_latent), 0.0)
    token_step = apply_factorized(
        p_tokens, q_tokens, draft_tokens, uniforms[:, :, 1:], rules=rules, eligible=latent_accepted[:, None]
    )
    return LatentChainOutcome(latent, latent_accepted, token_step.tokens, token_step.accepted)
