"""Stepwise input checks: one check at a time, in argument order, each a ValueError naming its argument.

The fused pass (`fused`) answers the same checks in one host sync and falls back to these to name the problem.
"""

from __future__ import annotations

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import (
    PAD_TOKEN,
    all_drafts,
    as_blocks,
    as_float32,
    drafted_columns,
    gather_last,
    is_true,
    row_sums,
    select_code,
    size_operand,
)
from ncm_verify.tolerances import normalisation_for


def check_floating(name: str, array, ndim: int, what: str) -> None:
    """An ``mx.array`` of `ndim` (>= 1) floating-point dimensions: a batch and a vocabulary.

    An empty batch is refused: the kernels draw one key per sequence.
    """
    if not isinstance(array, mx.array):
        raise ValueError(f"{name}: expected an mx.array, got {type(array).__name__}")
    if array.ndim != ndim or ndim < 1:
        raise ValueError(f"{name}: expected {max(ndim, 1)} dimensions, got shape {tuple(array.shape)}")
    if not mx.issubdtype(array.dtype, mx.floating):
        raise ValueError(f"{name}: {what} must be floating point, got {array.dtype}")
    if array.shape[0] < 1 or array.shape[-1] < 1:
        raise ValueError(f"{name}: empty batch or vocabulary, got shape {tuple(array.shape)}")


MASKED_CHECK_MAX_ENTRIES = 2**21
"""Up to this many entries, one sum over a copy with bad entries masked to +inf is as fast as two reductions of
the input (measured equal at 1.2M entries on MLX's CPU); at 9M entries the copy's fresh pages made it 4x slower."""

FINITE_NON_NEGATIVE_BELOW = {
    mx.float32: (mx.uint32, 0x7F800000),
    mx.float16: (mx.uint16, 0x7C00),
    mx.bfloat16: (mx.uint16, 0x7F80),
}
"""Per dtype, the unsigned view of its bits and +inf's pattern: an entry is finite and >= +0 iff its bits lie below
(a sign bit or an all-ones exponent lies above). Other dtypes are cast to float32 first."""


def finite_non_negative(probs: mx.array) -> mx.array:
    """A lazy boolean: every entry finite and >= +0 (-0.0 counts as negative here), from one maximum of its bits.

    No copy is made: the bits are a view, their maximum one read (a minimum of the values would need a second
    reduction for NaN). A refused -0.0 goes to the stepwise checks, which accept it.
    """
    if probs.dtype not in FINITE_NON_NEGATIVE_BELOW:
        probs = probs.astype(mx.float32)
    view, infinity = FINITE_NON_NEGATIVE_BELOW[probs.dtype]
    return as_blocks(probs.view(view)).max(axis=-1).max() < infinity


def valid_rows(name: str, probs: mx.array, masked: bool | None = None) -> mx.array:
    """A lazy boolean: every entry finite and >= 0, and every row sums to 1 within tolerance.

    A NaN or infinite entry turns its row's sum into NaN or infinity; a negative one is masked
    to +inf (`masked`; by default for inputs up to `MASKED_CHECK_MAX_ENTRIES`) or shows in the maximum of the
    entries' bits (`finite_non_negative`).
    """
    tolerance = normalisation_for(name, probs.dtype, probs.shape[-1])
    as_float = as_float32(probs)
    if masked if masked is not None else probs.size <= MASKED_CHECK_MAX_ENTRIES:
        return mx.all(mx.abs(row_sums(mx.where(as_float >= 0, as_float, mx.inf)) - 1.0) <= tolerance)
    if probs.size == 0:
        return mx.array(True)
    return finite_non_negative(probs) & mx.all(mx.abs(row_sums(as_float) - 1.0) <= tolerance)


def check_probabilities(name: str, probs, ndim: int) -> mx.array:
    """Probability rows: floating, finite, non-negative, each summing to 1."""
    check_floating(name, probs, ndim, "probabilities")
    if is_true(valid_rows(name, probs)):  # one host sync; rows it refuses go through the checks below, which name why
        return probs
    tolerance = normalisation_for(name, probs.dtype, probs.shape[-1])
    as_float = probs.astype(mx.float32)
    if not is_true(mx.isfinite(as_float)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    if not is_true(as_float >= 0):
        raise ValueError(f"{name}: contains negative probabilities")
    gap = mx.abs(row_sums(as_float) - 1.0)
    if not is_true(gap <= tolerance):
        raise ValueError(f"{name}: rows do not sum to 1 (largest gap {gap.max().item():.3g})")
    return probs


def check_scores(name: str, scores, ndim: int) -> mx.array:
    """Logits or probabilities for greedy decoding: floating and free of NaN (-inf is fine)."""
    check_floating(name, scores, ndim, "scores")
    if not is_true(~mx.isnan(scores)):
        raise ValueError(f"{name}: contains NaN")
    return scores


def check_shape(name: str, array: mx.array, shape: tuple[int, ...]) -> None:
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(array.shape)}")


def check_ids_type(name: str, tokens, shape) -> None:
    """An integer ``mx.array`` of `shape` (its values are checked apart)."""
    if not isinstance(tokens, mx.array):
        raise ValueError(f"{name}: expected an mx.array, got {type(tokens).__name__}")
    if not mx.issubdtype(tokens.dtype, mx.integer):
        raise ValueError(f"{name}: token ids must be integers, got {tokens.dtype}")
    check_shape(name, tokens, shape)


def check_tokens(name: str, tokens, shape, vocab: int, valid=None) -> mx.array:
    """Integer ids in [0, vocab) where `valid`; -1 padding allowed elsewhere."""
    check_ids_type(name, tokens, shape)
    if tokens.size == 0:
        return tokens
    ids = tokens.astype(mx.int64)  # unsigned ids compare with the -1 padding too
    in_range = (ids >= 0) & (ids < vocab)
    if valid is not None:
        in_range = mx.where(valid, in_range, (ids >= PAD_TOKEN) & (ids < vocab))
    if not is_true(in_range):
        raise ValueError(f"{name}: token ids outside [0, {vocab}) (padding beyond num_draft may be -1)")
    return tokens


def lengths_valid(num_draft, max_draft: int) -> mx.array:
    """Every draft length in [0, G]: one lazy boolean."""
    return mx.all((num_draft >= 0) & (num_draft <= size_operand(max_draft)))


def draft_lengths_of(num_draft, batch: int, max_draft: int) -> mx.array:
    """`num_draft` after its type and shape checks (values unchecked: cast them only once checked); None: G each."""
    if num_draft is None:
        return all_drafts(batch, max_draft)
    if not isinstance(num_draft, mx.array) or not mx.issubdtype(num_draft.dtype, mx.integer):
        raise ValueError("num_draft: expected an integer mx.array of shape [B]")
    check_shape("num_draft", num_draft, (batch,))
    return num_draft


def check_num_draft(num_draft, batch: int, max_draft: int) -> mx.array:
    """Per-sequence draft lengths in [0, G]; None means G for every sequence."""
    if num_draft is None:
        return all_drafts(batch, max_draft)
    num_draft = draft_lengths_of(num_draft, batch, max_draft)
    if batch and not is_true(lengths_valid(num_draft, max_draft)):
        raise ValueError(f"num_draft: draft lengths must lie in [0, {max_draft}]")
    return num_draft.astype(mx.int32)


def check_drafted_under(name: str, draft_probs: mx.array, tokens: mx.array, valid) -> None:
    """A drafted token must have positive draft probability: q is what was sampled from."""
    q_x = gather_last(draft_probs, tokens).astype(mx.float32)  # the drafted entries cast, not every row
    if valid is not None:
        q_x = mx.where(valid, q_x, 1.0)
    if q_x.size and not is_true(q_x > 0):
        raise ValueError(f"{name}: a drafted token has draft probability 0; q must be the sampling distribution")


def check_key(key, batch: int) -> None:
    """One ``mx.random.key`` (shape (2,)) or one per sequence, ``[B, 2]``."""
    if not isinstance(key, mx.array) or key.dtype != mx.uint32:
        raise ValueError("key: expected an mx.random.key (uint32 array)")
    if key.shape not in ((2,), (batch, 2)):
        raise ValueError(f"key: expected shape (2,) or ({batch}, 2), got {tuple(key.shape)}")


def per_sequence_keys(key, batch: int) -> mx.array:
    """One key per sequence: `key` split B ways, or `key` itself when it is [B, 2]."""
    check_key(key, batch)
    if key.shape == (batch, 2):
        return key
    return mx.random.split(key, batch) if batch else mx.zeros((0, 2), dtype=mx.uint32)


def check_chain_inputs_stepwise(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Validate chain input one check at a time; returns the per-sequence draft lengths."""
    check_probabilities("target_probs", target_probs, 3)
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs G + 1 >= 1 rows (the bonus row at least)")
    check_probabilities("draft_probs", draft_probs, 3)
    check_shape("draft_probs", draft_probs, (batch, rows - 1, vocab))
    num_draft = check_num_draft(num_draft, batch, rows - 1)
    is_draft = drafted_columns(num_draft, rows - 1)
    check_tokens("draft_tokens", draft_tokens, (batch, rows - 1), vocab, is_draft)
    check_drafted_under("draft_tokens", draft_probs, draft_tokens, is_draft)
    return num_draft


def check_greedy_inputs_stepwise(target, draft_tokens, num_draft) -> mx.array:
    """Validate greedy input one check at a time; returns the per-sequence draft lengths."""
    check_scores("target", target, 3)
    batch, rows, vocab = target.shape
    if rows < 1:
        raise ValueError("target: needs G + 1 >= 1 rows (the bonus row at least)")
    num_draft = check_num_draft(num_draft, batch, rows - 1)
    is_draft = drafted_columns(num_draft, rows - 1)
    check_tokens("draft_tokens", draft_tokens, (batch, rows - 1), vocab, is_draft)
    return num_draft


def check_factorized_inputs_stepwise(target_probs, draft_probs, draft_tokens) -> None:
    """Validate factorised input one check at a time."""
    check_probabilities("target_probs", target_probs, 3)
    check_probabilities("draft_probs", draft_probs, 3)
    check_shape("draft_probs", draft_probs, target_probs.shape)
    check_tokens("draft_tokens", draft_tokens, target_probs.shape[:2], target_probs.shape[2])
    check_drafted_under("draft_tokens", draft_probs, draft_tokens, None)


def check_latent_chain_inputs(
    target_latent_probs, draft_latent_probs, draft_latent, target_token_probs, draft_token_probs, draft_tokens
) -> None:
    check_probabilities("target_latent_probs", target_latent_probs, 2)
    batch, codes = target_latent_probs.shape
    check_probabilities("draft_latent_probs", draft_latent_probs, 2)
    check_shape("draft_latent_probs", draft_latent_probs, (batch, codes))
    check_tokens("draft_latent", draft_latent, (batch,), codes)
    check_drafted_under("draft_latent", draft_latent_probs, draft_latent, None)
    check_probabilities("target_token_probs", target_token_probs, 4)
    if tuple(target_token_probs.shape[:2]) != (batch, codes):
        raise ValueError(
            f"target_token_probs: expected leading shape {(batch, codes)}, got {tuple(target_token_probs.shape)}"
        )
    check_probabilities("draft_token_probs", draft_token_probs, 4)
    check_shape("draft_token_probs", draft_token_probs, target_token_probs.shape)
    positions, vocab = target_token_probs.shape[2:]
    check_tokens("draft_tokens", draft_tokens, (batch, positions), vocab)
    check_drafted_under("draft_tokens", select_code(draft_token_probs, draft_latent), draft_tokens, None)
