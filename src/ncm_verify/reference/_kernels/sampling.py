"""Sampling: uniforms on a grid strictly inside (0, 1), the acceptance test, the two-level inverse CDF, argmax."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import CDF_BLOCK, as_blocks, as_float32, positions, size_operand

UNIFORM_GRID_BITS = 23
"""Uniforms sit at the centres of a 2^-23 grid: exact in float32 and never 0 or 1."""


RESIDUAL_FLOOR = 1e-30
"""A residual mass below this is numerically zero (p == q); then the target row is used."""


SMALLEST_NORMAL = 2.0**-126
"""The smallest normal float32: an inverse-CDF threshold never goes below it (nor flushes to zero)."""


def make_uniforms(keys: mx.array, shape: tuple[int, ...]) -> mx.array:
    """Float32 uniforms ``[B, *shape]`` strictly inside (0, 1), one key per row."""
    if keys.shape[0] == 1:  # the same draw without vmap, whose broadcasts cost 6 graph nodes a call
        return on_uniform_grid(mx.random.uniform(shape=shape, key=keys.reshape(2)))[None]
    return on_uniform_grid(mx.vmap(lambda key: mx.random.uniform(shape=shape, key=key))(keys))


def on_uniform_grid(raw: mx.array) -> mx.array:
    """Uniforms in [0, 1) moved to the centres of the 2^-23 grid: never 0 or 1."""
    scale = float(2**UNIFORM_GRID_BITS)
    return (mx.floor(raw * scale) + 0.5) / scale


def accept_drafts(p_x: mx.array, q_x: mx.array, uniforms: mx.array) -> mx.array:
    """Accept with probability min(1, p/q) as ``u * q < p``: p(x) = 0 is never accepted."""
    return uniforms * q_x.astype(mx.float32) < p_x.astype(mx.float32)


def index_in_block(start: mx.array, weights: mx.array, threshold: mx.array) -> mx.array:
    """The id of a block where the running total from `start` reaches `threshold`, as ``[..., 1]``:
    the last positive weight whose preceding total lies below it.

    Summed in another order than its block sum (a backend's reduction may differ from its scan), the
    block may seem to end below the threshold: then its last positive weight, never a zero-weight id past it.
    """
    before = start + mx.cumsum(weights, axis=-1, inclusive=False)
    below = (weights > 0) & (before < threshold)
    return mx.max(mx.where(below, positions(weights.shape[-1]), 0), axis=-1, keepdims=True)


def sample_residual(p: mx.array, q: mx.array, uniforms: mx.array) -> mx.array:
    """Inverse-CDF draw from normalised max(p - q, 0); from p where that mass is zero.

    Two levels, so that no cumulative sum spans the row: block sums and their running
    totals pick the block where ``u * total`` falls, then that one block's running sums
    pick the id. Only the block sums read the whole row.
    """
    vocab = p.shape[-1]
    p = as_float32(p)
    # Made in the rows' own layout, so that a scaling of q by a scalar fuses into this one pass.
    residual = as_blocks(mx.maximum(p - as_float32(q), 0.0))
    p = as_blocks(p)
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
    return mx.where(overflow, size_operand(vocab), drawn).reshape(uniforms.shape)


def first_argmax(scores: mx.array) -> mx.array:
    """``argmax`` over the last axis (ties to the first index), through the maxima of 32-entry blocks.

    MLX's CPU argmax reads a row 2.2x slower than a max over short blocks does (V = 128 256);
    the first block holding the row's maximum, then that block's first maximum, is the same index.
    """
    if scores.shape[-1] % CDF_BLOCK:
        return mx.argmax(scores, axis=-1)
    blocks = as_blocks(scores)
    block = mx.argmax(blocks.max(axis=-1), axis=-1, keepdims=True)
    inside = mx.argmax(mx.take_along_axis(blocks, block[..., None], axis=-2), axis=-1)
    return (block * CDF_BLOCK + inside)[..., 0]
