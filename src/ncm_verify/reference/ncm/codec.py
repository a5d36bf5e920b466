"""Stage 1 of the source's NCM: the codec, a VQ-VAE with a multiscale residual quantiser.

An encoder maps ``sequence_length`` tokens to vectors. At each level the quantiser pools the
remaining residual to the level's length, takes the nearest entry of that level's own codebook per
position, upsamples it, refines it (a blended projection, the source's blended convolution), adds
it to the reconstruction and subtracts it from the residual. The decoder turns the cumulative
reconstruction into token logits, one row per position: tokens are factorised per position given
the codes. The codebook update rule (EMA upstream) is not under test and is not implemented.

Public API (`model` is a `ConceptModel`; codes are a list, level l ``[B, level_lengths[l]]``):
`Codec`, `codec_encode(model, tokens) -> (codes, reconstruction)`,
`codec_reconstruction(model, codes)` (``[B, T, codec_dim]``, from however many levels are given),
`codec_decode(model, codes)` (``[B, T, vocab]`` token logits), `pool(x, n)`, `upsample(x, T)`.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ncm_verify.reference.ncm.concept_config import ConceptConfig

__all__ = ["Codec", "ids_within", "pool", "upsample", "codec_encode", "codec_reconstruction", "codec_decode"]

REFINE_BLEND = 0.5
"""Weight of the refinement beside the upsampled code vectors."""


class Codec(nn.Module):
    """Token and position embeddings, an encoder projection, per-level codebooks and refinements,
    and a one-block position-wise decoder."""

    def __init__(self, config: ConceptConfig):
        super().__init__()
        width = config.codec_dim
        self.embed = nn.Embedding(config.vocab_size, width)
        self.positions = nn.Embedding(config.sequence_length, width)
        self.encoder = nn.Linear(width, width)
        self.codebooks = [nn.Embedding(size, width) for size in config.codebook_sizes]
        self.refine = [nn.Linear(width, width) for _ in config.codebook_sizes]
        self.decoder_norm = nn.LayerNorm(width)
        self.decoder_up = nn.Linear(width, 2 * width)
        self.decoder_down = nn.Linear(2 * width, width)
        self.head = nn.Linear(width, config.vocab_size)


def ids_within(ids: mx.array, size: int) -> bool:
    """Whether every id lies in ``[0, size)``."""
    values = np.asarray(ids)
    return bool(values.min() >= 0 and values.max() < size)


def pool(x: mx.array, n: int) -> mx.array:
    """Mean of ``[B, T, d]`` over ``T // n`` consecutive positions -> ``[B, n, d]``."""
    batch, length, width = x.shape
    return mx.mean(x.reshape(batch, n, length // n, width), axis=2)


def upsample(x: mx.array, length: int) -> mx.array:
    """Each of ``[B, n, d]``'s positions repeated ``length // n`` times -> ``[B, length, d]``."""
    return mx.repeat(x, length // x.shape[1], axis=1)


def _codebook_index(model, level: int) -> int:
    return max(level - model._seams.codebook_shift, 0)


def _step(codec: Codec, index: int, codes: mx.array, length: int) -> mx.array:
    """Codebook `index`'s vectors for `codes`, upsampled to `length` and refined."""
    book = codec.codebooks[index]
    vectors = upsample(book(codes % book.weight.shape[0]), length)
    return vectors + REFINE_BLEND * codec.refine[index](vectors)


def _contribution(model, level: int, codes: mx.array) -> mx.array:
    return _step(model.codec, _codebook_index(model, level), codes, model.config.sequence_length)


def _check_codes(model, codes) -> None:
    config = model.config
    if len(codes) > config.layout.num_levels:
        raise ValueError(f"codes: at most {config.layout.num_levels} levels, got {len(codes)}")
    for level, level_codes in enumerate(codes):
        shape = (level_codes.shape[0] if level_codes.ndim == 2 else None, config.level_lengths[level])
        if (
            level_codes.ndim != 2
            or level_codes.shape[1] != shape[1]
            or not mx.issubdtype(level_codes.dtype, mx.integer)
        ):
            raise ValueError(f"codes: level {level} must be integer [B, {shape[1]}], got {level_codes.shape}")
        if level_codes.size and (not ids_within(level_codes, config.codebook_sizes[level])):
            raise ValueError(f"codes: level {level} ids must lie in [0, {config.codebook_sizes[level]})")


def codec_encode(model, tokens: mx.array) -> tuple[list[mx.array], mx.array]:
    """Codes of every level for tokens ``[B, T]`` and the reconstruction they add up to."""
    config, codec = model.config, model.codec
    if tokens.ndim != 2 or tokens.shape[1] != config.sequence_length or not mx.issubdtype(tokens.dtype, mx.integer):
        raise ValueError(f"tokens: expected integer [B, {config.sequence_length}], got {tokens.shape} {tokens.dtype}")
    if tokens.size and (not ids_within(tokens, config.vocab_size)):
        raise ValueError(f"tokens: ids must lie in [0, {config.vocab_size})")
    residual = codec.encoder(codec.embed(tokens) + codec.positions(mx.arange(config.sequence_length)))
    reconstruction = mx.zeros_like(residual)
    codes = []
    for level, n in enumerate(config.level_lengths):
        pooled = pool(residual, n)
        book = codec.codebooks[level].weight
        distances = mx.sum(pooled * pooled, -1, keepdims=True) - 2 * pooled @ book.T + mx.sum(book * book, -1)
        level_codes = mx.argmin(distances, axis=-1).astype(mx.int32)
        codes.append(level_codes)
        step = _step(codec, level, level_codes, config.sequence_length)
        reconstruction = reconstruction + step
        residual = residual - step
    return codes, reconstruction


def codec_reconstruction(model, codes) -> mx.array:
    """The cumulative reconstruction ``[B, T, codec_dim]`` of the levels in `codes` (zeros for none
    with batch taken from ``codes[0]``; pass at least one level)."""
    _check_codes(model, codes)
    if not codes:
        raise ValueError("codes: expected at least one level")
    total = _contribution(model, 0, codes[0])
    for level in range(1, len(codes)):
        total = total + _contribution(model, level, codes[level])
    return total


def codec_decode(model, codes) -> mx.array:
    """Token logits ``[B, T, vocab]``, one independent row per position, given every level's codes."""
    if len(codes) != model.config.layout.num_levels:
        raise ValueError(f"codes: expected all {model.config.layout.num_levels} levels, got {len(codes)}")
    codec = model.codec
    hidden = codec_reconstruction(model, codes)
    hidden = hidden + codec.decoder_down(nn.gelu(codec.decoder_up(codec.decoder_norm(hidden))))
    return codec.head(hidden)
