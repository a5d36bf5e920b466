"""Each kernel step written again in plain NumPy: the bench's NumPy peer and an oracle for the properties.

Written from the procedure, not from the reference: the constants below are the protocol's.
"""

from __future__ import annotations

import numpy as np

from ncm_verify.oracles.exact import RESIDUAL_FLOOR

PAD_TOKEN = -1
"""The id after the emitted tokens of a sequence (the protocol's padding)."""
SMALLEST_NORMAL = np.float32(2.0**-126)

__all__ = [
    "numpy_chain_step",
    "numpy_correct",
    "numpy_emit",
    "numpy_factorized_step",
    "numpy_greedy_step",
    "numpy_uniforms",
]


def numpy_uniforms(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Float32 uniforms strictly inside (0, 1), on the same grid as the MLX kernels'."""
    scale = np.float32(2**23)
    return ((np.floor(rng.random(shape, dtype=np.float32) * scale) + 0.5) / scale).astype(np.float32)


def numpy_correct(p: np.ndarray, q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw from normalised max(p - q, 0) per row (from p where that mass is zero)."""
    residual = np.maximum(p - q, np.float32(0))
    mass = residual.sum(axis=-1, keepdims=True)
    cdf = np.cumsum(np.where(mass > RESIDUAL_FLOOR, residual, p), axis=-1)
    # At least the smallest normal float32: u * total may underflow to 0, which would pick a zero-weight id 0.
    threshold = np.maximum(u * cdf[..., -1], SMALLEST_NORMAL)
    flat_cdf, flat_threshold = cdf.reshape(-1, cdf.shape[-1]), threshold.reshape(-1)
    found = [np.searchsorted(row, t, side="left") for row, t in zip(flat_cdf, flat_threshold)]
    return np.array(found, dtype=np.int32).reshape(threshold.shape)


def numpy_chain_step(target, draft, tokens, num_draft, uniforms) -> tuple[np.ndarray, np.ndarray]:
    """The chain step in plain NumPy, given uniforms ``[B, 2, G+1]``: (tokens ``[B, G+1]``, accepted counts)."""
    batch, drafts = tokens.shape
    rows, cols = np.arange(batch)[:, None], np.arange(drafts)[None]
    safe = np.maximum(tokens, 0)
    p_x, q_x = target[rows, cols, safe], draft[rows, cols, safe]
    accepted = (uniforms[:, 0, :drafts] * q_x < p_x) & (cols < num_draft[:, None])
    count = np.cumprod(accepted, axis=1).sum(axis=1)
    p_row = target[np.arange(batch), count]
    q_row = np.zeros_like(p_row)
    if drafts:
        rejected = count < num_draft
        q_row[rejected] = draft[np.arange(batch), np.minimum(count, drafts - 1)][rejected]
    emitted = numpy_correct(p_row, q_row, uniforms[:, 1, 0])
    return numpy_emit(tokens, count, emitted), count.astype(np.int32)


def numpy_emit(tokens: np.ndarray, count: np.ndarray, last: np.ndarray) -> np.ndarray:
    """``[B, G+1]``: accepted drafts, then `last`, then padding."""
    batch, drafts = tokens.shape
    position = np.arange(drafts + 1)[None]
    padded = np.concatenate([tokens, np.full((batch, 1), PAD_TOKEN)], axis=1).astype(np.int32)
    out = np.where(position < count[:, None], padded, PAD_TOKEN)
    return np.where(position == count[:, None], last[:, None], out).astype(np.int32)


def numpy_greedy_step(target, tokens, num_draft) -> tuple[np.ndarray, np.ndarray]:
    """Greedy verification in NumPy: the longest prefix equal to the target's argmax, then its argmax."""
    best = target.argmax(axis=-1)
    drafts = tokens.shape[1]
    matches = (tokens == best[:, :drafts]) & (np.arange(drafts)[None] < num_draft[:, None])
    count = np.cumprod(matches, axis=1).sum(axis=1)
    return numpy_emit(tokens, count, best[np.arange(len(count)), count]), count.astype(np.int32)


def numpy_factorized_step(target, draft, tokens, uniforms) -> tuple[np.ndarray, np.ndarray]:
    """Factorised verification in NumPy given uniforms ``[B, 2, N]``: (tokens, accepted)."""
    rows, cols = np.arange(tokens.shape[0])[:, None], np.arange(tokens.shape[1])[None]
    accepted = uniforms[:, 0] * draft[rows, cols, tokens] < target[rows, cols, tokens]
    corrected = numpy_correct(target, draft, uniforms[:, 1])
    return np.where(accepted, tokens, corrected).astype(np.int32), accepted
