"""Array helpers of the kernels: cached constants, sizes as operands, gathers, blocked sums, emitted tokens."""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

PAD_TOKEN = -1


CDF_BLOCK = 32
"""Entries per block of the two-level inverse CDF: MLX's CPU sums blocks this short fastest (20 GB/s measured)."""


def is_true(condition: mx.array) -> bool:
    return bool(mx.all(condition).item())


@functools.lru_cache(maxsize=256)
def all_drafts(batch: int, max_draft: int) -> mx.array:
    """The default draft lengths, G for every sequence (a cached constant, not a kernel per call)."""
    return mx.array(np.full(batch, max_draft, dtype=np.int32))


@functools.lru_cache(maxsize=1024)
def size_vector(value: int) -> mx.array:
    return mx.array([value], dtype=mx.int32)


def size_operand(value: int) -> mx.array:
    """`value` (a size: V, G, a block count) as a 0-d int32 array that reaches a fused kernel as an operand.

    ``mx.compile`` writes a scalar constant into the fused kernel's source, so on the CPU each new size cost a
    C++ compile of its own (~0.8 s of CPU); sliced from a cached array it is an input, and one kernel serves all.
    """
    return size_vector(value)[0]


@functools.lru_cache(maxsize=256)
def positions(count: int) -> mx.array:
    """``arange(count)`` as int32, made once per length: under ``mx.compile`` a constant, not a kernel per call."""
    return mx.array(np.arange(count, dtype=np.int32))


@functools.lru_cache(maxsize=256)
def row_offsets(used: int, vocab: int, wide: bool) -> mx.array:
    """Flat offsets ``i * vocab`` of rows ``i < used`` (a cached constant, int64 when `wide`).

    Target and draft rows share it, so ``mx.compile`` computes their drafted entries' index once.
    """
    return mx.array((np.arange(used) * vocab).astype(np.int64 if wide else np.int32))


@functools.lru_cache(maxsize=256)
def sequence_rows(batch: int, count: int) -> mx.array:
    """Row ``b * count`` of each sequence in a ``[B * count, ...]`` flattening (a cached constant)."""
    return mx.array((np.arange(batch) * count).astype(np.int32))


def drafted_columns(num_draft: mx.array, max_draft: int) -> mx.array:
    """``[B, G]``: which of the G draft columns hold a draft (the first ``num_draft[b]``)."""
    return positions(max_draft) < num_draft[:, None]


def gather_last(rows: mx.array, ids: mx.array) -> mx.array:
    """``rows[..., ids]`` along the last axis; padded ids (-1) read index 0."""
    safe = mx.maximum(ids, 0).astype(mx.int32)
    return mx.take_along_axis(rows, safe[..., None], axis=-1)[..., 0]


def gather_drafted(rows: mx.array, ids: mx.array) -> mx.array:
    """``rows[b, i, ids[b, i]]`` for the first G rows, without copying the rows."""
    batch, count, vocab = rows.shape
    flat = row_offsets(ids.shape[1], vocab, count * vocab >= 2**31) + mx.maximum(ids, 0)
    return mx.take_along_axis(rows.reshape(batch, count * vocab), flat, axis=1)


def gather_row(rows: mx.array, index: mx.array) -> mx.array:
    """``rows[b, index[b]]``: one ``[V]`` row per sequence, copied whole rather than entry by entry."""
    batch, count = rows.shape[:2]
    flat = rows.reshape((batch * count,) + tuple(rows.shape[2:]))
    return mx.take(flat, sequence_rows(batch, count) + index, axis=0)


def select_code(table: mx.array, codes: mx.array) -> mx.array:
    """``table[b, codes[b]]`` for a ``[B, K, ...]`` table."""
    index = codes.astype(mx.int32).reshape((-1,) + (1,) * (table.ndim - 1))
    return mx.take_along_axis(table, index, axis=1)[:, 0]


def as_float32(array) -> mx.array:
    """`array` in float32, without a copy when it already is."""
    array = mx.array(array) if not isinstance(array, mx.array) else array
    return array if array.dtype == mx.float32 else array.astype(mx.float32)


def as_blocks(rows: mx.array, block: int = CDF_BLOCK) -> mx.array:
    """``[..., V]`` as ``[..., ceil(V / block), block]``, zero-padded (no copy when `block` divides V)."""
    pad = (-rows.shape[-1]) % block
    if pad:
        rows = mx.pad(rows, [(0, 0)] * (rows.ndim - 1) + [(0, pad)])
    return rows.reshape(*rows.shape[:-1], rows.shape[-1] // block, block)


def row_sums(rows: mx.array) -> mx.array:
    """Sums over the last axis in three levels: blocks of 32, blocks of 16 of those, then the rest.

    One float32 pass over 65 536 entries errs by 3e-4 here (beyond the 1e-4 a row may
    stray); blocks keep it near 1e-6 at any vocabulary, and blocks of 32 stream fastest.
    """
    return as_blocks(as_blocks(rows).sum(axis=-1), 16).sum(axis=-1).sum(axis=-1)


def scale_rows(rows: mx.array, scale: mx.array) -> mx.array:
    """``rows * scale[:, None]`` for ``[B, V]`` rows.

    MLX's CPU kernels read a column broadcast along V by their strided path (2.6x slower at V = 128 256).
    One row's scale is a scalar, which fuses into the correction's contiguous pass; the scaling of several
    rows stays a pass of its own (the reshape keeps the strided read out of the correction's pass).
    """
    if rows.shape[0] == 1:
        return rows * scale.reshape(())
    return (rows[:, None] * scale[:, None, None]).reshape(rows.shape)


def count_accepted(accepted: mx.array) -> mx.array:
    """Length of the leading run of accepted drafts per sequence: the first rejected position, else G."""
    batch, max_draft = accepted.shape
    if not max_draft:
        return mx.zeros((batch,), dtype=mx.int32)
    return mx.min(mx.where(accepted, size_operand(max_draft), positions(max_draft)), axis=1)


@functools.lru_cache(maxsize=256)
def emitted_columns(batch: int, max_draft: int) -> mx.array:
    """The draft column shown at each of the G+1 output positions, ``[B, G+1]`` (the last is always replaced)."""
    columns = np.minimum(np.arange(max_draft + 1), max_draft - 1).astype(np.int32)
    return mx.array(np.broadcast_to(columns, (batch, max_draft + 1)))


def emit_tokens(drafts: mx.array, num_accepted: mx.array, last: mx.array) -> mx.array:
    """``[B, G+1]``: accepted drafts, then `last`, then padding."""
    batch, max_draft = drafts.shape
    boundary, last = num_accepted[:, None], last[:, None].astype(mx.int32)
    if not max_draft:
        return last
    position = positions(max_draft + 1)
    kept = mx.take_along_axis(drafts.astype(mx.int32), emitted_columns(batch, max_draft), axis=1)
    return mx.where(position < boundary, kept, mx.where(position == boundary, last, PAD_TOKEN))
