"""Speculative accept/reject kernels in MLX, batch-first.

Each public ``verify_*`` validates its input (a ``ValueError`` naming the
argument), draws its uniforms from an explicit ``mx.random`` key and calls a
pure ``apply_*`` kernel that ``mx.compile`` can trace. Ratios and uniforms are
float32 whatever the input dtype; uniforms lie strictly inside (0, 1).

A ``key`` is one ``mx.random.key`` (split into one key per sequence) or one key
per sequence, shape ``[B, 2]``; with per-sequence keys, a batch gives the same
result as its rows one at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from ncm_verify.tolerances import normalisation_for

__all__ = [
    "UNIFORM_GRID_BITS",
    "RESIDUAL_FLOOR",
    "PAD_TOKEN",
    "CDF_BLOCK",
    "SMALLEST_NORMAL",
    "Rules",
    "ChainOutcome",
    "FactorizedOutcome",
    "LatentChainOutcome",
    "all_drafts",
    "per_sequence_keys",
    "make_uniforms",
    "draw_uniforms",
    "index_in_block",
    "sample_residual",
    "draw_from_blocks",
    "residual_distribution",
    "REFERENCE_RULES",
    "CORRECTION_ENTRIES",
    "apply_chain",
    "first_argmax",
    "apply_greedy",
    "apply_factorized",
    "select_code",
    "apply_latent_chain",
    "MASKED_CHECK_MAX_ENTRIES",
    "valid_rows",
    "CHAIN_VALUES_VALID",
    "FACTORIZED_VALUES_VALID",
    "GREEDY_VALUES_VALID",
    "verify_chain",
    "GREEDY_STEP",
    "verify_greedy",
    "verify_factorized",
    "verify_latent_chain",
]

UNIFORM_GRID_BITS = 23
"""Uniforms sit at the centres of a 2^-23 grid: exact in float32 and never 0 or 1."""
RESIDUAL_FLOOR = 1e-30
"""A residual mass below this is numerically zero (p == q); then the target row is used."""
PAD_TOKEN = -1
CDF_BLOCK = 32
"""Entries per block of the two-level inverse CDF: MLX's CPU sums blocks this short fastest (20 GB/s measured)."""
SMALLEST_NORMAL = 2.0**-126
"""The smallest normal float32: an inverse-CDF threshold never goes below it (nor flushes to zero)."""


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


# --- validation -------------------------------------------------------------


def _is_true(condition: mx.array) -> bool:
    return bool(mx.all(condition).item())


def _check_floating(name: str, array, ndim: int, what: str) -> None:
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


def _check_probabilities(name: str, probs, ndim: int) -> mx.array:
    """Probability rows: floating, finite, non-negative, each summing to 1."""
    _check_floating(name, probs, ndim, "probabilities")
    tolerance = normalisation_for(name, probs.dtype)
    as_float = probs.astype(mx.float32)
    if not _is_true(mx.isfinite(as_float)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    if not _is_true(as_float >= 0):
        raise ValueError(f"{name}: contains negative probabilities")
    gap = mx.abs(_row_sums(as_float) - 1.0)
    if not _is_true(gap <= tolerance):
        raise ValueError(f"{name}: rows do not sum to 1 (largest gap {gap.max().item():.3g})")
    return probs


def _row_sums(rows: mx.array) -> mx.array:
    """Sums over the last axis in three levels: blocks of 32, blocks of 16 of those, then the rest.

    One float32 pass over 65 536 entries errs by 3e-4 here (beyond the 1e-4 a row may
    stray); blocks keep it near 1e-6 at any vocabulary, and blocks of 32 stream fastest.
    """
    return _as_blocks(_as_blocks(rows).sum(axis=-1), 16).sum(axis=-1).sum(axis=-1)


def _check_scores(name: str, scores, ndim: int) -> mx.array:
    """Logits or probabilities for greedy decoding: floating and free of NaN (-inf is fine)."""
    _check_floating(name, scores, ndim, "scores")
    if not _is_true(~mx.isnan(scores)):
        raise ValueError(f"{name}: contains NaN")
    return scores


def _check_shape(name: str, array: mx.array, shape: tuple[int, ...]) -> None:
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(array.shape)}")


def _check_ids_type(name: str, tokens, shape) -> None:
    """An integer ``mx.array`` of `shape` (its values are checked apart)."""
    if not isinstance(tokens, mx.array):
        raise ValueError(f"{name}: expected an mx.array, got {type(tokens).__name__}")
    if not mx.issubdtype(tokens.dtype, mx.integer):
        raise ValueError(f"{name}: token ids must be integers, got {tokens.dtype}")
    _check_shape(name, tokens, shape)


def _check_tokens(name: str, tokens, shape, vocab: int, valid=None) -> mx.array:
    """Integer ids in [0, vocab) where `valid`; -1 padding allowed elsewhere."""
    _check_ids_type(name, tokens, shape)
    if tokens.size == 0:
        return tokens
    ids = tokens.astype(mx.int64)  # unsigned ids compare with the -1 padding too
    in_range = (ids >= 0) & (ids < vocab)
    if valid is not None:
        in_range = mx.where(valid, in_range, (ids >= PAD_TOKEN) & (ids < vocab))
    if not _is_true(in_range):
        raise ValueError(f"{name}: token ids outside [0, {vocab}) (padding beyond num_draft may be -1)")
    return tokens


@functools.lru_cache(maxsize=256)
def all_drafts(batch: int, max_draft: int) -> mx.array:
    """The default draft lengths, G for every sequence (a cached constant, not a kernel per call)."""
    return mx.array(np.full(batch, max_draft, dtype=np.int32))


@functools.lru_cache(maxsize=1024)
def _size_vector(value: int) -> mx.array:
    return mx.array([value], dtype=mx.int32)


def _size_operand(value: int) -> mx.array:
    """`value` (a size: V, G, a block count) as a 0-d int32 array that reaches a fused kernel as an operand.

    ``mx.compile`` writes a scalar constant into the fused kernel's source, so on the CPU each new size cost a
    C++ compile of its own (~0.8 s of CPU); sliced from a cached array it is an input, and one kernel serves all.
    """
    return _size_vector(value)[0]


def _lengths_valid(num_draft, max_draft: int) -> mx.array:
    """Every draft length in [0, G]: one lazy boolean."""
    return mx.all((num_draft >= 0) & (num_draft <= _size_operand(max_draft)))


def _draft_lengths_of(num_draft, batch: int, max_draft: int) -> mx.array:
    """`num_draft` after its type and shape checks (values unchecked: cast them only once checked); None: G each."""
    if num_draft is None:
        return all_drafts(batch, max_draft)
    if not isinstance(num_draft, mx.array) or not mx.issubdtype(num_draft.dtype, mx.integer):
        raise ValueError("num_draft: expected an integer mx.array of shape [B]")
    _check_shape("num_draft", num_draft, (batch,))
    return num_draft


def _check_num_draft(num_draft, batch: int, max_draft: int) -> mx.array:
    """Per-sequence draft lengths in [0, G]; None means G for every sequence."""
    if num_draft is None:
        return all_drafts(batch, max_draft)
    num_draft = _draft_lengths_of(num_draft, batch, max_draft)
    if batch and not _is_true(_lengths_valid(num_draft, max_draft)):
        raise ValueError(f"num_draft: draft lengths must lie in [0, {max_draft}]")
    return num_draft.astype(mx.int32)


def _check_drafted_under(name: str, draft_probs: mx.array, tokens: mx.array, valid) -> None:
    """A drafted token must have positive draft probability: q is what was sampled from."""
    q_x = _gather_last(draft_probs.astype(mx.float32), tokens)
    if valid is not None:
        q_x = mx.where(valid, q_x, 1.0)
    if q_x.size and not _is_true(q_x > 0):
        raise ValueError(f"{name}: a drafted token has draft probability 0; q must be the sampling distribution")


def _check_key(key, batch: int) -> None:
    """One ``mx.random.key`` (shape (2,)) or one per sequence, ``[B, 2]``."""
    if not isinstance(key, mx.array) or key.dtype != mx.uint32:
        raise ValueError("key: expected an mx.random.key (uint32 array)")
    if key.shape not in ((2,), (batch, 2)):
        raise ValueError(f"key: expected shape (2,) or ({batch}, 2), got {tuple(key.shape)}")


def per_sequence_keys(key, batch: int) -> mx.array:
    """One key per sequence: `key` split B ways, or `key` itself when it is [B, 2]."""
    _check_key(key, batch)
    if key.shape == (batch, 2):
        return key
    return mx.random.split(key, batch) if batch else mx.zeros((0, 2), dtype=mx.uint32)


# --- pure kernels -------------------------------------------------------------


def make_uniforms(keys: mx.array, shape: tuple[int, ...]) -> mx.array:
    """Float32 uniforms ``[B, *shape]`` strictly inside (0, 1), one key per row."""
    if keys.shape[0] == 1:  # the same draw without vmap, whose broadcasts cost 6 graph nodes a call
        return _on_uniform_grid(mx.random.uniform(shape=shape, key=keys.reshape(2)))[None]
    return _on_uniform_grid(mx.vmap(lambda key: mx.random.uniform(shape=shape, key=key))(keys))


def _on_uniform_grid(raw: mx.array) -> mx.array:
    """Uniforms in [0, 1) moved to the centres of the 2^-23 grid: never 0 or 1."""
    scale = float(2**UNIFORM_GRID_BITS)
    return (mx.floor(raw * scale) + 0.5) / scale


def draw_uniforms(key, batch: int, shape: tuple[int, ...], *, rules: Rules | None = None) -> mx.array:
    """The uniforms ``[B, *shape]`` a ``verify_*`` call with `key` hands its ``apply_*`` (a protocol name)."""
    return (rules or REFERENCE_RULES).uniforms(per_sequence_keys(key, batch), shape)


def _gather_last(rows: mx.array, ids: mx.array) -> mx.array:
    """``rows[..., ids]`` along the last axis; padded ids (-1) read index 0."""
    safe = mx.maximum(ids, 0).astype(mx.int32)
    return mx.take_along_axis(rows, safe[..., None], axis=-1)[..., 0]


@functools.lru_cache(maxsize=256)
def _positions(count: int) -> mx.array:
    """``arange(count)`` as int32, made once per length: under ``mx.compile`` a constant, not a kernel per call."""
    return mx.array(np.arange(count, dtype=np.int32))


@functools.lru_cache(maxsize=256)
def _row_offsets(used: int, vocab: int, wide: bool) -> mx.array:
    """Flat offsets ``i * vocab`` of rows ``i < used`` (a cached constant, int64 when `wide`).

    Target and draft rows share it, so ``mx.compile`` computes their drafted entries' index once.
    """
    return mx.array((np.arange(used) * vocab).astype(np.int64 if wide else np.int32))


@functools.lru_cache(maxsize=256)
def _sequence_rows(batch: int, count: int) -> mx.array:
    """Row ``b * count`` of each sequence in a ``[B * count, ...]`` flattening (a cached constant)."""
    return mx.array((np.arange(batch) * count).astype(np.int32))


def _drafted_columns(num_draft: mx.array, max_draft: int) -> mx.array:
    """``[B, G]``: which of the G draft columns hold a draft (the first ``num_draft[b]``)."""
    return _positions(max_draft) < num_draft[:, None]


def _gather_drafted(rows: mx.array, ids: mx.array) -> mx.array:
    """``rows[b, i, ids[b, i]]`` for the first G rows, without copying the rows."""
    batch, count, vocab = rows.shape
    flat = _row_offsets(ids.shape[1], vocab, count * vocab >= 2**31) + mx.maximum(ids, 0)
    return mx.take_along_axis(rows.reshape(batch, count * vocab), flat, axis=1)


def _gather_row(rows: mx.array, index: mx.array) -> mx.array:
    """``rows[b, index[b]]``: one ``[V]`` row per sequence, copied whole rather than entry by entry."""
    batch, count = rows.shape[:2]
    flat = rows.reshape((batch * count,) + tuple(rows.shape[2:]))
    return mx.take(flat, _sequence_rows(batch, count) + index, axis=0)


def _accept_drafts(p_x: mx.array, q_x: mx.array, uniforms: mx.array) -> mx.array:
    """Accept with probability min(1, p/q) as ``u * q < p``: p(x) = 0 is never accepted."""
    return uniforms * q_x.astype(mx.float32) < p_x.astype(mx.float32)


def _as_float32(array) -> mx.array:
    """`array` in float32, without a copy when it already is."""
    array = mx.array(array) if not isinstance(array, mx.array) else array
    return array if array.dtype == mx.float32 else array.astype(mx.float32)


def _as_blocks(rows: mx.array, block: int = CDF_BLOCK) -> mx.array:
    """``[..., V]`` as ``[..., ceil(V / block), block]``, zero-padded (no copy when `block` divides V)."""
    pad = (-rows.shape[-1]) % block
    if pad:
        rows = mx.pad(rows, [(0, 0)] * (rows.ndim - 1) + [(0, pad)])
    return rows.reshape(*rows.shape[:-1], rows.shape[-1] // block, block)


def index_in_block(start: mx.array, weights: mx.array, threshold: mx.array) -> mx.array:
    """The id of a block where the running total from `start` reaches `threshold`, as ``[..., 1]``:
    the last positive weight whose preceding total lies below it.

    Summed in another order than its block sum (a backend's reduction may differ from its scan), the
    block may seem to end below the threshold: then its last positive weight, never a zero-weight id past it.
    """
    before = start + mx.cumsum(weights, axis=-1, inclusive=False)
    below = (weights > 0) & (before < threshold)
    return mx.max(mx.where(below, _positions(weights.shape[-1]), 0), axis=-1, keepdims=True)


def sample_residual(p: mx.array, q: mx.array, uniforms: mx.array) -> mx.array:
    """Inverse-CDF draw from normalised max(p - q, 0); from p where that mass is zero.

    Two levels, so that no cumulative sum spans the row: block sums and their running
    totals pick the block where ``u * total`` falls, then that one block's running sums
    pick the id. Only the block sums read the whole row.
    """
    vocab = p.shape[-1]
    p = _as_float32(p)
    # Made in the rows' own layout, so that a scaling of q by a scalar fuses into this one pass.
    residual = _as_blocks(mx.maximum(p - _as_float32(q), 0.0))
    p = _as_blocks(p)
    # Block totals stay a column [..., n, 1] throughout: each squeeze or expand is a node per call.
    residual_cdf = mx.cumsum(residual.sum(axis=-1, keepdims=True), axis=-2)
    use_residual = residual_cdf[..., -1:, :] > RESIDUAL_FLOOR
    # Both block cdfs are made and one kept: cheaper than a pass to choose the weights first.
    block_cdf = mx.where(use_residual, residual_cdf, mx.cumsum(p.sum(axis=-1, keepdims=True), axis=-2))

    def chosen_weights(chosen: mx.array) -> mx.array:
        return mx.where(
            use_residual, mx.take_along_axis(residual, chosen, axis=-2), mx.take_along_axis(p, chosen, axis=-2)
        )

    return draw_from_blocks(block_cdf, chosen_weights, uniforms, vocab)


def draw_from_blocks(block_cdf: mx.array, chosen_weights: Callable, uniforms: mx.array, vocab: int) -> mx.array:
    """The inverse CDF's second level: the block where ``u * total`` falls, then the id inside it.

    `block_cdf` ``[..., n, 1]``: running block totals; ``chosen_weights(block [..., 1, 1]) -> [..., 1, 32]``.
    """
    # At least the smallest normal float32, as u * total may underflow to 0 and pick id 0.
    threshold = mx.maximum(uniforms.reshape(uniforms.shape + (1, 1)) * block_cdf[..., -1:, :], SMALLEST_NORMAL)
    below = block_cdf < threshold
    found = below.astype(mx.int32).sum(axis=-2, keepdims=True)
    # min(found, count - 1) without the block count as a literal (a kernel per count); found == count: all below
    overflow = mx.all(below, axis=-2, keepdims=True)
    chosen = found - overflow.astype(mx.int32)
    start = mx.where(chosen > 0, mx.take_along_axis(block_cdf, mx.maximum(chosen - 1, 0), axis=-2), 0.0)
    drawn = chosen * CDF_BLOCK + index_in_block(start, chosen_weights(chosen), threshold)
    # A threshold above every block's total (rows summing below the smallest normal) counts the whole row.
    return mx.where(overflow, _size_operand(vocab), drawn).reshape(uniforms.shape)


def residual_distribution(p: mx.array, q: mx.array) -> mx.array:
    """Normalised max(p - q, 0) over the last axis; p itself where p == q."""
    _check_probabilities("p", p, getattr(p, "ndim", 1))
    _check_probabilities("q", q, p.ndim)
    _check_shape("q", q, p.shape)
    p32 = p.astype(mx.float32)
    residual = mx.maximum(p32 - q.astype(mx.float32), 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    return mx.where(mass > RESIDUAL_FLOOR, residual / mx.maximum(mass, RESIDUAL_FLOOR), p32)


def _count_accepted(accepted: mx.array) -> mx.array:
    """Length of the leading run of accepted drafts per sequence: the first rejected position, else G."""
    batch, max_draft = accepted.shape
    if not max_draft:
        return mx.zeros((batch,), dtype=mx.int32)
    return mx.min(mx.where(accepted, _size_operand(max_draft), _positions(max_draft)), axis=1)


@functools.lru_cache(maxsize=256)
def _emitted_columns(batch: int, max_draft: int) -> mx.array:
    """The draft column shown at each of the G+1 output positions, ``[B, G+1]`` (the last is always replaced)."""
    columns = np.minimum(np.arange(max_draft + 1), max_draft - 1).astype(np.int32)
    return mx.array(np.broadcast_to(columns, (batch, max_draft + 1)))


def _emit_tokens(drafts: mx.array, num_accepted: mx.array, last: mx.array) -> mx.array:
    """``[B, G+1]``: accepted drafts, then `last`, then padding."""
    batch, max_draft = drafts.shape
    boundary, last = num_accepted[:, None], last[:, None].astype(mx.int32)
    if not max_draft:
        return last
    position = _positions(max_draft + 1)
    kept = mx.take_along_axis(drafts.astype(mx.int32), _emitted_columns(batch, max_draft), axis=1)
    return mx.where(position < boundary, kept, mx.where(position == boundary, last, PAD_TOKEN))


REFERENCE_RULES = Rules(accept=_accept_drafts, correct=sample_residual, uniforms=make_uniforms)


def _scale_rows(rows: mx.array, scale: mx.array) -> mx.array:
    """``rows * scale[:, None]`` for ``[B, V]`` rows.

    MLX's CPU kernels read a column broadcast along V by their strided path (2.6x slower at V = 128 256).
    One row's scale is a scalar, which fuses into the correction's contiguous pass; the scaling of several
    rows stays a pass of its own (the reshape keeps the strided read out of the correction's pass).
    """
    if rows.shape[0] == 1:
        return rows * scale.reshape(())
    return (rows[:, None] * scale[:, None, None]).reshape(rows.shape)


def _correct_emission_rows(target_probs, draft_probs, num_accepted, num_draft, uniforms, rules: Rules) -> mx.array:
    """Each sequence's corrected or bonus token, drawn from its emission row alone with ``uniforms [B]``."""
    max_draft = draft_probs.shape[1]
    # Only the emission row is read: the rejected position, or the bonus row (q = 0 there).
    p_row = _gather_row(target_probs, num_accepted)
    if max_draft:
        # Any drafted row does where no draft was rejected (q scaled by 0): the last drafted one, no literal G - 1
        q_row = _gather_row(draft_probs, mx.maximum(mx.minimum(num_accepted, num_draft - 1), 0))
        q_row = _scale_rows(q_row, (num_accepted < num_draft).astype(q_row.dtype))
    else:
        q_row = mx.zeros_like(p_row)
    return rules.correct(p_row, q_row, uniforms)


CORRECTION_ENTRIES = 2**20
"""Emission-row entries per sequence group corrected together: their copies (12 MB at float32) stay within
MLX's 32 MiB CPU buffer cache, so a large batch does not page-fault fresh memory each step (4x slower at B = 32)."""


def apply_chain(
    target_probs, draft_probs, draft_tokens, num_draft, uniforms, *, rules: Rules = REFERENCE_RULES
) -> ChainOutcome:
    """Chain verification given uniforms ``[B, 2, G+1]`` (acceptance row, emission row)."""
    max_draft = draft_tokens.shape[1]
    is_draft = _drafted_columns(num_draft, max_draft)
    p_x = _gather_drafted(target_probs, draft_tokens)
    q_x = _gather_drafted(draft_probs, draft_tokens)
    accepted = rules.accept(p_x, q_x, uniforms[:, 0, :max_draft]) & is_draft
    num_accepted = _count_accepted(accepted)
    batch, group = target_probs.shape[0], max(1, CORRECTION_ENTRIES // target_probs.shape[-1])
    inputs = (target_probs, draft_probs, num_accepted, num_draft, uniforms[:, 1, 0])
    if batch <= group:
        emitted = _correct_emission_rows(*inputs, rules)
    else:
        emitted = mx.concatenate(
            [_correct_emission_rows(*(a[i : i + group] for a in inputs), rules) for i in range(0, batch, group)]
        )
    return ChainOutcome(_emit_tokens(draft_tokens, num_accepted, emitted), num_accepted)


def first_argmax(scores: mx.array) -> mx.array:
    """``argmax`` over the last axis (ties to the first index), through the maxima of 32-entry blocks.

    MLX's CPU argmax reads a row 2.2x slower than a max over short blocks does (V = 128 256);
    the first block holding the row's maximum, then that block's first maximum, is the same index.
    """
    if scores.shape[-1] % CDF_BLOCK:
        return mx.argmax(scores, axis=-1)
    blocks = _as_blocks(scores)
    block = mx.argmax(blocks.max(axis=-1), axis=-1, keepdims=True)
    inside = mx.argmax(mx.take_along_axis(blocks, block[..., None], axis=-2), axis=-1)
    return (block * CDF_BLOCK + inside)[..., 0]


def apply_greedy(target, draft_tokens, num_draft, *, argmax: Callable = first_argmax) -> ChainOutcome:
    """Longest prefix where draft == argmax(target), then the target's argmax (`argmax`: a planted bug's swap)."""
    max_draft = draft_tokens.shape[1]
    best = argmax(target).astype(mx.int32)
    is_draft = _drafted_columns(num_draft, max_draft)
    num_accepted = _count_accepted((draft_tokens == best[:, :max_draft]) & is_draft)
    emitted = mx.take_along_axis(best, num_accepted[:, None], axis=1)[:, 0]
    return ChainOutcome(_emit_tokens(draft_tokens, num_accepted, emitted), num_accepted)


def apply_factorized(
    target_probs, draft_probs, draft_tokens, uniforms, *, rules: Rules = REFERENCE_RULES, eligible=None
) -> FactorizedOutcome:
    """Each position accepted or corrected on its own, given uniforms ``[B, 2, N]``.

    Positions where `eligible` is False are never accepted (drafts that no longer count).
    """
    p_x = _gather_last(target_probs, draft_tokens)
    q_x = _gather_last(draft_probs, draft_tokens)
    accepted = rules.accept(p_x, q_x, uniforms[:, 0])
    if eligible is not None:
        accepted = accepted & eligible
    corrected = rules.correct(target_probs, draft_probs, uniforms[:, 1])
    return FactorizedOutcome(mx.where(accepted, draft_tokens.astype(mx.int32), corrected), accepted)


def select_code(table: mx.array, codes: mx.array) -> mx.array:
    """``table[b, codes[b]]`` for a ``[B, K, ...]`` table."""
    index = codes.astype(mx.int32).reshape((-1,) + (1,) * (table.ndim - 1))
    return mx.take_along_axis(table, index, axis=1)[:, 0]


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
    """The NCM step given uniforms ``[B, 2, N+1]`` (column 0 for the latent).

    The latent is a chain step over the codebook. If it stands, the level's
    tokens are verified factorised given it; if it changed, the chain ends and
    every token is drawn from the target given the corrected latent.
    """
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


# --- validated entry points -----------------------------------------------------


MASKED_CHECK_MAX_ENTRIES = 2**21
"""Up to this many entries, one sum over a copy with bad entries masked to +inf beats a minimum and a
sum of the input (1.7x faster at 2-8 MB on MLX's CPU); at 80 MB the copy made it 4x slower."""


def valid_rows(name: str, probs: mx.array, masked: bool | None = None) -> mx.array:
    """A lazy boolean: every entry finite and >= 0, and every row sums to 1 within tolerance.

    A NaN or infinite entry turns its row's sum into NaN or infinity; a negative one is masked
    to +inf (`masked`; by default for inputs up to `MASKED_CHECK_MAX_ENTRIES`) or shows in the minimum.
    """
    tolerance = normalisation_for(name, probs.dtype)
    as_float = _as_float32(probs)
    if masked if masked is not None else probs.size <= MASKED_CHECK_MAX_ENTRIES:
        return mx.all(mx.abs(_row_sums(mx.where(as_float >= 0, as_float, mx.inf)) - 1.0) <= tolerance)
    return (_as_blocks(as_float).min(axis=-1).min() >= 0) & mx.all(mx.abs(_row_sums(as_float) - 1.0) <= tolerance)


def _ids_valid(draft_tokens, is_draft, vocab: int) -> mx.array:
    """Every id in [0, V), or -1 where not `is_draft`: one lazy boolean."""
    ids = draft_tokens.astype(mx.int64)
    return mx.all(mx.where(is_draft, ids >= 0, ids >= PAD_TOKEN) & (ids < _size_operand(vocab)))


def _drafted_values_valid(target_probs, draft_probs, draft_tokens, is_draft) -> mx.array:
    """Rows valid, ids in [0, V) (or -1 where not `is_draft`), each drafted one with q > 0: one lazy boolean."""
    vocab = target_probs.shape[-1]
    ok = valid_rows("target_probs", target_probs) & valid_rows("draft_probs", draft_probs)
    ok = ok & _ids_valid(draft_tokens, is_draft, vocab)
    # Ids are clamped so that a flag over bad ids stays a flag, never an out-of-range read.
    clipped = mx.clip(draft_tokens.astype(mx.int64), 0, _size_operand(vocab - 1))
    q_x = _gather_drafted(draft_probs, clipped.astype(mx.int32))
    return ok & mx.all(mx.where(is_draft, q_x > 0, True))


def _chain_values_valid(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Every value check of chain input as one lazy boolean (types and shapes already checked)."""
    max_draft = target_probs.shape[1] - 1
    is_draft = _drafted_columns(num_draft, max_draft)
    return _lengths_valid(num_draft, max_draft) & _drafted_values_valid(
        target_probs, draft_probs, draft_tokens, is_draft
    )


def _greedy_values_valid(target, draft_tokens, num_draft) -> mx.array:
    """Every value check of greedy input as one lazy boolean: no NaN score, lengths and ids in range."""
    max_draft = target.shape[1] - 1
    is_draft = _drafted_columns(num_draft, max_draft)
    ok = mx.all(~mx.isnan(target)) & _lengths_valid(num_draft, max_draft)
    return ok & _ids_valid(draft_tokens, is_draft, target.shape[-1])


CHAIN_VALUES_VALID = mx.compile(_chain_values_valid)
"""Compiled once: one fused pass whose one host sync answers every value check."""
FACTORIZED_VALUES_VALID = mx.compile(functools.partial(_drafted_values_valid, is_draft=True))
"""Factorised input has no padding: every position is drafted."""
GREEDY_VALUES_VALID = mx.compile(_greedy_values_valid)


def _check_row_types(target_probs, draft_probs, draft_tokens, drafts_fewer: int) -> None:
    """Types and shapes of target and draft rows ``[B, R, V]`` / ``[B, R - drafts_fewer, V]`` and their ids.

    A dtype without a tolerance raises here, not inside a compiled trace.
    """
    _check_floating("target_probs", target_probs, 3, "probabilities")
    batch, rows, vocab = target_probs.shape
    _check_floating("draft_probs", draft_probs, 3, "probabilities")
    _check_shape("draft_probs", draft_probs, (batch, rows - drafts_fewer, vocab))
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        normalisation_for(name, probs.dtype)
    _check_ids_type("draft_tokens", draft_tokens, (batch, rows - drafts_fewer))


def _checked_in_one_pass(fused: Callable[[], tuple], stepwise: Callable[[], object]):
    """`fused()`'s result when its lazy flag says every value is valid (one host sync), else `stepwise()`'s.

    The stepwise checks name the first problem in argument order; input the fused pass doubts goes there.
    """
    try:
        result, ok = fused()
        if ok.item():
            return result
    except ValueError:
        pass
    return stepwise()


def _chain_input_flags(target_probs, draft_probs, draft_tokens, num_draft) -> tuple[mx.array, mx.array]:
    """Check chain input's types and shapes; returns the draft lengths and a lazy "all values valid".

    Raises the stepwise checks' ValueError on a type or shape problem.
    """
    _check_row_types(target_probs, draft_probs, draft_tokens, 1)
    batch, rows = target_probs.shape[:2]
    lengths = _draft_lengths_of(num_draft, batch, rows - 1)
    return lengths.astype(mx.int32), CHAIN_VALUES_VALID(target_probs, draft_probs, draft_tokens, lengths)


def _check_chain_inputs(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Validate chain input in one fused pass and one host sync; returns the draft lengths."""
    arguments = (target_probs, draft_probs, draft_tokens, num_draft)
    return _checked_in_one_pass(
        functools.partial(_chain_input_flags, *arguments), functools.partial(_check_chain_inputs_stepwise, *arguments)
    )


def _check_chain_inputs_stepwise(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Validate chain input one check at a time; returns the per-sequence draft lengths."""
    _check_probabilities("target_probs", target_probs, 3)
    batch, rows, vocab = target_probs.shape
    if rows < 1:
        raise ValueError("target_probs: needs G + 1 >= 1 rows (the bonus row at least)")
    _check_probabilities("draft_probs", draft_probs, 3)
    _check_shape("draft_probs", draft_probs, (batch, rows - 1, vocab))
    num_draft = _check_num_draft(num_draft, batch, rows - 1)
    is_draft = _drafted_columns(num_draft, rows - 1)
    _check_tokens("draft_tokens", draft_tokens, (batch, rows - 1), vocab, is_draft)
    _check_drafted_under("draft_tokens", draft_probs, draft_tokens, is_draft)
    return num_draft


def verify_chain(
    target_probs,
    draft_probs,
    draft_tokens,
    *,
    key,
    num_draft=None,
    validate: bool = True,
    rules: Rules = REFERENCE_RULES,
    apply=apply_chain,
) -> ChainOutcome:
    """Chain speculative verification (Leviathan et al.; Chen et al.).

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
    if validate:
        num_draft = _check_chain_inputs(target_probs, draft_probs, draft_tokens, num_draft)
    elif num_draft is None:
        num_draft = all_drafts(target_probs.shape[0], draft_tokens.shape[1])
    arrays = (target_probs, draft_probs, draft_tokens, num_draft)
    return ChainOutcome(*_run_compiled_step(apply, rules, arrays, key, draft_tokens.shape[1] + 1))


def _run_compiled_step(apply: Callable, rules: Rules, arrays: tuple, key, columns: int) -> tuple:
    """``apply(*arrays, uniforms [B, 2, columns], rules=rules)`` with the uniforms `key` gives, as one compiled step."""
    batch = arrays[0].shape[0]
    _check_key(key, batch)
    keys = key if batch else per_sequence_keys(key, batch)  # split inside the compiled step
    return _compiled_step(apply, rules, columns)(*arrays, keys)


@functools.lru_cache(maxsize=64)
def _compiled_step(apply: Callable, rules: Rules, columns: int) -> Callable:
    """A ``verify_*`` step after validation, uniforms drawn inside, ``mx.compile``d once per (apply, rules, columns).

    Eager, its ~40 small ops cost more than the arithmetic at B = 1 (mlx-lm compiles its samplers alike).
    """

    def step(*arrays_and_keys):
        *arrays, keys = arrays_and_keys
        batch = arrays[0].shape[0]
        keys = mx.random.split(keys, batch) if keys.shape == (2,) else keys
        return tuple(apply(*arrays, rules.uniforms(keys, (2, columns)), rules=rules))

    return mx.compile(step)


GREEDY_STEP = mx.compile(apply_greedy)
"""`verify_greedy`'s step after validation, compiled once (eager, its small ops cost 10% more at B = 1)."""


def verify_greedy(target, draft_tokens, *, num_draft=None, validate: bool = True) -> ChainOutcome:
    """Greedy verification: reproduces the target's argmax decoding exactly.

    Args:
        target: ``[B, G+1, V]`` target logits or probabilities (ties go to the first index).
        draft_tokens: ``[B, G]`` drafted ids (-1 allowed beyond ``num_draft``).
        num_draft: ``[B]`` per-sequence draft lengths in [0, G]; default G.
    """
    if validate:
        num_draft = _check_greedy_inputs(target, draft_tokens, num_draft)
    elif num_draft is None:
        num_draft = all_drafts(target.shape[0], draft_tokens.shape[1])
    return ChainOutcome(*GREEDY_STEP(target, draft_tokens, num_draft))


def _check_greedy_inputs(target, draft_tokens, num_draft) -> mx.array:
    """Validate greedy input in one fused pass and one host sync; returns the draft lengths."""

    def fused() -> tuple[mx.array, mx.array]:
        _check_floating("target", target, 3, "scores")
        batch, rows = target.shape[:2]
        _check_ids_type("draft_tokens", draft_tokens, (batch, rows - 1))
        lengths = _draft_lengths_of(num_draft, batch, rows - 1)
        return lengths.astype(mx.int32), GREEDY_VALUES_VALID(target, draft_tokens, lengths)

    return _checked_in_one_pass(
        fused, functools.partial(_check_greedy_inputs_stepwise, target, draft_tokens, num_draft)
    )


def _check_greedy_inputs_stepwise(target, draft_tokens, num_draft) -> mx.array:
    """Validate greedy input one check at a time; returns the per-sequence draft lengths."""
    _check_scores("target", target, 3)
    batch, rows, vocab = target.shape
    if rows < 1:
        raise ValueError("target: needs G + 1 >= 1 rows (the bonus row at least)")
    num_draft = _check_num_draft(num_draft, batch, rows - 1)
    is_draft = _drafted_columns(num_draft, rows - 1)
    _check_tokens("draft_tokens", draft_tokens, (batch, rows - 1), vocab, is_draft)
    return num_draft


def _check_factorized_inputs(target_probs, draft_probs, draft_tokens) -> None:
    """Validate factorised input in one fused pass and one host sync."""

    def fused() -> tuple[None, mx.array]:
        _check_row_types(target_probs, draft_probs, draft_tokens, 0)
        return None, FACTORIZED_VALUES_VALID(target_probs, draft_probs, draft_tokens)

    _checked_in_one_pass(
        fused, functools.partial(_check_factorized_inputs_stepwise, target_probs, draft_probs, draft_tokens)
    )


def _check_factorized_inputs_stepwise(target_probs, draft_probs, draft_tokens) -> None:
    """Validate factorised input one check at a time."""
    _check_probabilities("target_probs", target_probs, 3)
    _check_probabilities("draft_probs", draft_probs, 3)
    _check_shape("draft_probs", draft_probs, target_probs.shape)
    _check_tokens("draft_tokens", draft_tokens, target_probs.shape[:2], target_probs.shape[2])
    _check_drafted_under("draft_tokens", draft_probs, draft_tokens, None)


def verify_factorized(
    target_probs,
    draft_probs,
    draft_tokens,
    *,
    key,
    validate: bool = True,
    rules: Rules = REFERENCE_RULES,
    apply=apply_factorized,
) -> FactorizedOutcome:
    """Factorised verification: positions independent given a shared latent.

    Args:
        target_probs: ``[B, N, V]`` target distributions per position.
        draft_probs: ``[B, N, V]`` draft distributions the tokens were sampled from.
        draft_tokens: ``[B, N]`` drafted ids.
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
    """
    if validate:
        _check_factorized_inputs(target_probs, draft_probs, draft_tokens)
    arrays = (target_probs, draft_probs, draft_tokens)
    return FactorizedOutcome(*_run_compiled_step(apply, rules, arrays, key, target_probs.shape[1]))


def _check_latent_chain_inputs(
    target_latent_probs, draft_latent_probs, draft_latent, target_token_probs, draft_token_probs, draft_tokens
) -> None:
    _check_probabilities("target_latent_probs", target_latent_probs, 2)
    batch, codes = target_latent_probs.shape
    _check_probabilities("draft_latent_probs", draft_latent_probs, 2)
    _check_shape("draft_latent_probs", draft_latent_probs, (batch, codes))
    _check_tokens("draft_latent", draft_latent, (batch,), codes)
    _check_drafted_under("draft_latent", draft_latent_probs, draft_latent, None)
    _check_probabilities("target_token_probs", target_token_probs, 4)
    if tuple(target_token_probs.shape[:2]) != (batch, codes):
        raise ValueError(
            f"target_token_probs: expected leading shape {(batch, codes)}, got {tuple(target_token_probs.shape)}"
        )
    _check_probabilities("draft_token_probs", draft_token_probs, 4)
    _check_shape("draft_token_probs", draft_token_probs, target_token_probs.shape)
    positions, vocab = target_token_probs.shape[2:]
    _check_tokens("draft_tokens", draft_tokens, (batch, positions), vocab)
    _check_drafted_under("draft_tokens", select_code(draft_token_probs, draft_latent), draft_tokens, None)


def verify_latent_chain(
    target_latent_probs,
    draft_latent_probs,
    draft_latent,
    target_token_probs,
    draft_token_probs,
    draft_tokens,
    *,
    key,
    validate: bool = True,
    rules: Rules = REFERENCE_RULES,
    apply=apply_latent_chain,
) -> LatentChainOutcome:
    """The NCM verification step: latent first, then the level's tokens given it.

    Args:
        target_latent_probs: ``[B, K]`` target p(z | context).
        draft_latent_probs: ``[B, K]`` draft q(z | context).
        draft_latent: ``[B]`` the draft's sampled code.
        target_token_probs: ``[B, K, N, V]`` target p(x_i | z, context) for every code.
        draft_token_probs: ``[B, K, N, V]`` draft q(x_i | z, context) for every code.
        draft_tokens: ``[B, N]`` tokens drafted under ``draft_latent``.
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
    """
    inputs = (
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
    )
    if validate:
        _check_latent_chain_inputs(*inputs)
    return LatentChainOutcome(*_run_compiled_step(apply, rules, inputs, key, draft_tokens.shape[1] + 1))
