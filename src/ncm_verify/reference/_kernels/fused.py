"""Input validation fused into the step: host checks of types and shapes, then value checks as one lazy flag that
the step's own compiled graph computes, answered by the one host sync that evaluates the step
(`compiled.run_checked`). Input the flag refuses goes to the stepwise `checks`, which name the problem.

Each kernel has here its `*_types` (host checks, no sync), its `*_values_valid` (the flag) and its `*_guard`
(ids and counts clamped into range, so that refused input is never read out of bounds).
"""

from __future__ import annotations

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import (
    CDF_BLOCK,
    PAD_TOKEN,
    as_blocks,
    drafted_columns,
    gather_drafted,
    gather_last,
    select_code,
    size_operand,
)
from ncm_verify.reference._kernels.checks import (
    check_floating,
    check_ids_type,
    check_shape,
    draft_lengths_of,
    lengths_valid,
    valid_rows,
)
from ncm_verify.tolerances import normalisation_for


def ids_valid(draft_tokens, is_draft, vocab: int) -> mx.array:
    """Every id in [0, V), or -1 where not `is_draft`: one lazy boolean."""
    ids = draft_tokens.astype(mx.int64)
    return mx.all(mx.where(is_draft, ids >= 0, ids >= PAD_TOKEN) & (ids < size_operand(vocab)))


def clamped_ids(ids: mx.array, low: int, vocab: int) -> mx.array:
    """`ids` clamped into [low, V) in their own dtype: themselves when valid."""
    return mx.clip(ids.astype(mx.int64), low, size_operand(vocab - 1)).astype(ids.dtype)


def clamped_counts(counts: mx.array, most: int) -> mx.array:
    """Per-sequence counts clamped into [0, most], as int32 (the steps' lengths)."""
    return mx.clip(counts.astype(mx.int64), 0, size_operand(most)).astype(mx.int32)


def drafted_values_valid(target_probs, draft_probs, draft_tokens, is_draft) -> mx.array:
    """Rows valid, ids in [0, V) (or -1 where not `is_draft`), each drafted one with q > 0: one lazy boolean."""
    vocab = target_probs.shape[-1]
    ok = valid_rows("target_probs", target_probs) & valid_rows("draft_probs", draft_probs)
    ok = ok & ids_valid(draft_tokens, is_draft, vocab)
    # Ids are clamped so that a flag over bad ids stays a flag, never an out-of-range read.
    q_x = gather_drafted(draft_probs, clamped_ids(draft_tokens, 0, vocab).astype(mx.int32))
    return ok & mx.all(mx.where(is_draft, q_x > 0, True))


def chain_values_valid(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Every value check of chain input as one lazy boolean (types and shapes already checked)."""
    max_draft = target_probs.shape[1] - 1
    is_draft = drafted_columns(num_draft, max_draft)
    return lengths_valid(num_draft, max_draft) & drafted_values_valid(target_probs, draft_probs, draft_tokens, is_draft)


def chain_guard(target_probs, draft_probs, draft_tokens, num_draft) -> tuple:
    vocab, max_draft = target_probs.shape[-1], draft_tokens.shape[1]
    return target_probs, draft_probs, clamped_ids(draft_tokens, PAD_TOKEN, vocab), clamped_counts(num_draft, max_draft)


def nan_free(scores: mx.array) -> mx.array:
    """No NaN score, from the maxima of 32-entry blocks (MLX's maximum keeps a NaN): the very reduction the greedy
    step's `first_argmax` makes, which ``mx.compile`` computes once for both (an elementwise NaN test cost a pass)."""
    if scores.shape[-1] % CDF_BLOCK:
        return ~mx.any(mx.isnan(scores.max(axis=-1)))
    return ~mx.any(mx.isnan(as_blocks(scores).max(axis=-1)))


def greedy_values_valid(target, draft_tokens, num_draft) -> mx.array:
    """Every value check of greedy input as one lazy boolean: no NaN score, lengths and ids in range."""
    max_draft = target.shape[1] - 1
    is_draft = drafted_columns(num_draft, max_draft)
    ok = nan_free(target) & lengths_valid(num_draft, max_draft)
    return ok & ids_valid(draft_tokens, is_draft, target.shape[-1])


def greedy_guard(target, draft_tokens, num_draft) -> tuple:
    return target, draft_tokens, clamped_counts(num_draft, draft_tokens.shape[1])


def factorized_values_valid(target_probs, draft_probs, draft_tokens) -> mx.array:
    """Factorised input has no padding: every position is drafted."""
    return drafted_values_valid(target_probs, draft_probs, draft_tokens, True)


def factorized_guard(target_probs, draft_probs, draft_tokens) -> tuple:
    return target_probs, draft_probs, clamped_ids(draft_tokens, 0, target_probs.shape[-1])


def check_row_types(target_probs, draft_probs, draft_tokens, drafts_fewer: int) -> None:
    """Types and shapes of target and draft rows ``[B, R, V]`` / ``[B, R - drafts_fewer, V]`` and their ids.

    A dtype without a tolerance raises here, not inside a compiled trace.
    """
    check_floating("target_probs", target_probs, 3, "probabilities")
    batch, rows, vocab = target_probs.shape
    check_floating("draft_probs", draft_probs, 3, "probabilities")
    check_shape("draft_probs", draft_probs, (batch, rows - drafts_fewer, vocab))
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        normalisation_for(name, probs.dtype)
    check_ids_type("draft_tokens", draft_tokens, (batch, rows - drafts_fewer))


def chain_types(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Chain input's types and shapes checked on the host; returns the draft lengths as given (values unchecked)."""
    check_row_types(target_probs, draft_probs, draft_tokens, 1)
    batch, rows = target_probs.shape[:2]
    return draft_lengths_of(num_draft, batch, rows - 1)


def greedy_types(target, draft_tokens, num_draft) -> mx.array:
    """Greedy input's types and shapes checked on the host; returns the draft lengths as given."""
    check_floating("target", target, 3, "scores")
    batch, rows = target.shape[:2]
    check_ids_type("draft_tokens", draft_tokens, (batch, rows - 1))
    return draft_lengths_of(num_draft, batch, rows - 1)


def factorized_types(target_probs, draft_probs, draft_tokens) -> None:
    check_row_types(target_probs, draft_probs, draft_tokens, 0)


# --- the latent chain -------------------------------------------------------------------------------------------

LATENT_NAMES = ("target_latent_probs", "draft_latent_probs", "target_token_probs", "draft_token_probs")


def latent_types(
    target_latent_probs, draft_latent_probs, draft_latent, target_token_probs, draft_token_probs, draft_tokens
) -> None:
    """Latent-chain input's types and shapes checked on the host (values unchecked)."""
    check_floating("target_latent_probs", target_latent_probs, 2, "probabilities")
    batch, codes = target_latent_probs.shape
    check_floating("draft_latent_probs", draft_latent_probs, 2, "probabilities")
    check_shape("draft_latent_probs", draft_latent_probs, (batch, codes))
    check_ids_type("draft_latent", draft_latent, (batch,))
    check_floating("target_token_probs", target_token_probs, 4, "probabilities")
    if tuple(target_token_probs.shape[:2]) != (batch, codes):
        raise ValueError(
            f"target_token_probs: expected leading shape {(batch, codes)}, got {tuple(target_token_probs.shape)}"
        )
    check_floating("draft_token_probs", draft_token_probs, 4, "probabilities")
    check_shape("draft_token_probs", draft_token_probs, target_token_probs.shape)
    check_ids_type("draft_tokens", draft_tokens, (batch, target_token_probs.shape[2]))
    probs = (target_latent_probs, draft_latent_probs, target_token_probs, draft_token_probs)
    for name, array in zip(LATENT_NAMES, probs):
        normalisation_for(name, array.dtype)


def latent_values_valid(
    target_latent_probs, draft_latent_probs, draft_latent, target_token_probs, draft_token_probs, draft_tokens
) -> mx.array:
    """Every value check of latent-chain input as one lazy boolean (types and shapes already checked)."""
    probs = (target_latent_probs, draft_latent_probs, target_token_probs, draft_token_probs)
    ok = mx.array(True)
    for name, array in zip(LATENT_NAMES, probs):
        ok = ok & valid_rows(name, array)
    codes, vocab = target_latent_probs.shape[-1], target_token_probs.shape[-1]
    ok = ok & ids_valid(draft_latent, True, codes) & ids_valid(draft_tokens, True, vocab)
    latent = clamped_ids(draft_latent, 0, codes)
    ok = ok & mx.all(gather_last(draft_latent_probs, latent) > 0)
    tokens = clamped_ids(draft_tokens, 0, vocab)
    return ok & mx.all(gather_last(select_code(draft_token_probs, latent), tokens) > 0)


def latent_guard(
    target_latent_probs, draft_latent_probs, draft_latent, target_token_probs, draft_token_probs, draft_tokens
) -> tuple:
    codes, vocab = target_latent_probs.shape[-1], target_token_probs.shape[-1]
    return (
        target_latent_probs,
        draft_latent_probs,
        clamped_ids(draft_latent, 0, codes),
        target_token_probs,
        draft_token_probs,
        clamped_ids(draft_tokens, 0, vocab),
    )
