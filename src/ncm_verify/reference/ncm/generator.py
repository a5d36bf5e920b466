"""Stage 2 of the source's NCM: the block-diagonal next-concept generator.

A pre-norm transformer (RMSNorm, QK-norm: RMSNorm of each head's queries and keys, then rotary
positions) over rows ``[prefix | level rows]``. The prefix is token ids of any length, embedded
through the codec's token embedding (frozen, as upstream's token lookup) and a projection. Level l's
rows hold its level embedding plus what the coarser levels give it (`ConceptConfig.level_input`);
its head scores level l's own codebook. One forward per level predicts all of level l's positions
in parallel; the rows it runs and what they see follow `ConceptConfig.mask`.

Public API (`model` is a `ConceptModel`; `prefix` ``[B, P]`` int; `codes` a list, level l
``[B, n_l]``; `start` where the prefix's first position sits; K/V per layer ``(K, V)``, each
``[B, heads, rows, head_dim]``, K after QK-norm and rotation):

- `prefix_kv(model, prefix, start=0)`: the prefix K/V that PC-1 caches, from the prefix alone.
- `apply_level(model, prefix, codes, level, *, prefix_kv=None, level_kv=None, start=0)`:
  ``(logits [B, n_l, K_l], rows_kv)``: with `prefix_kv` the prefix is not recomputed; with
  `level_kv` (the extension: a dict level -> K/V of that level's rows) neither are those levels.
  `rows_kv` maps each level this forward ran to its rows' K/V.
- `level_logits(...)`: the logits alone. `training_logits(model, prefix, codes, start=0)`: every
  level's logits from one forward over the whole layout (the training forward).
- `apply_rope(x, positions, base)`, `Generator`, `GeneratorLayer`.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ncm_verify.reference.ncm.codec import codec_reconstruction, ids_within, pool
from ncm_verify.reference.ncm.concept_config import ConceptConfig, concept_mask, forward_levels, level_offsets

__all__ = [
    "KV",
    "GeneratorLayer",
    "Generator",
    "apply_rope",
    "prefix_kv",
    "apply_level",
    "level_logits",
    "training_logits",
]

KV = tuple[mx.array, mx.array]


class GeneratorLayer(nn.Module):
    """One block: attention with QK-norm and rotary positions, then an MLP; counts the positions
    (batch x rows) it processes."""

    def __init__(self, config: ConceptConfig):
        super().__init__()
        width, head_dim = config.d_model, config.head_dim
        self.num_heads = config.num_heads
        self.norm1 = nn.RMSNorm(width)
        self.norm2 = nn.RMSNorm(width)
        self.query = nn.Linear(width, width, bias=False)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.query_norm = nn.RMSNorm(head_dim)
        self.key_norm = nn.RMSNorm(head_dim)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.positions_processed = 0

    def heads(self, x: mx.array) -> mx.array:
        batch, length, _ = x.shape
        return x.reshape(batch, length, self.num_heads, -1).transpose(0, 2, 1, 3)


class Generator(nn.Module):
    """Prefix projection, level embeddings, the two readings' input maps, layers, per-level heads."""

    def __init__(self, config: ConceptConfig):
        super().__init__()
        width = config.d_model
        self.prefix_in = nn.Linear(config.codec_dim, width)
        self.level_embed = nn.Embedding(len(config.level_lengths), width)
        self.reconstruction_in = nn.Linear(config.codec_dim, width)
        self.code_embed = [nn.Embedding(size, width) for size in config.codebook_sizes]
        self.layers = [GeneratorLayer(config) for _ in range(config.num_layers)]
        self.norm = nn.RMSNorm(width)
        self.heads = [nn.Linear(width, size) for size in config.codebook_sizes]


def apply_rope(x: mx.array, positions: mx.array, base: float, *, _angles_dtype=mx.float32) -> mx.array:
    """Rotate ``[B, H, T, D]`` by `positions` ``[T]`` (half-split pairs), computed in float32."""
    half = x.shape[-1] // 2
    frequencies = (base ** (-mx.arange(half, dtype=mx.float32) / half)).astype(_angles_dtype)
    angles = positions.astype(_angles_dtype)[:, None] * frequencies[None, :]
    cos, sin = mx.cos(angles), mx.sin(angles)
    x32 = x.astype(mx.float32)
    first, second = x32[..., :half], x32[..., half:]
    rotated = mx.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)
    return rotated.astype(x.dtype)


def _dropout(x: mx.array, rate: float, train: bool) -> mx.array:
    if not train or rate == 0.0:
        return x
    keep = mx.random.bernoulli(1.0 - rate, x.shape)
    return mx.where(keep, x / (1.0 - rate), mx.zeros_like(x))


def _apply_layer(
    model, layer: GeneratorLayer, x, positions, mask, past: KV | None, train: bool, stage: str, prefix: bool = False
):
    """One layer over rows `x`; returns the output and the rows' own K/V, K at `stage`. `prefix`: the rows are
    PC-1's prefix pass, where the planted bugs' private seams act."""
    layer.positions_processed += x.shape[0] * x.shape[1]
    seams = model._seams
    hidden = layer.norm1(x)
    q, k_raw, v = layer.heads(layer.query(hidden)), layer.heads(layer.key(hidden)), layer.heads(layer.value(hidden))
    base = model.config.rope_base
    angles = x.dtype if prefix and seams.prefix_rope_in_model_dtype else mx.float32
    q = apply_rope(layer.query_norm(q), positions, base, _angles_dtype=angles)
    gain = not prefix or seams.prefix_key_norm_gain
    k_normed = layer.key_norm(k_raw) if gain else mx.fast.rms_norm(k_raw, None, layer.key_norm.eps)
    k = apply_rope(k_normed, positions, base, _angles_dtype=angles)
    keys, values = (k, v) if past is None else (mx.concatenate([past[0], k], 2), mx.concatenate([past[1], v], 2))
    scores = (q @ keys.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = mx.where(mask, scores, mx.array(-mx.inf, dtype=scores.dtype))
    attended = (mx.softmax(scores, axis=-1, precise=True) @ values).transpose(0, 2, 1, 3).reshape(x.shape)
    rate = model.config.dropout
    x = x + _dropout(layer.out(attended), rate, train)
    x = x + _dropout(layer.down(nn.gelu(layer.up(layer.norm2(x)))), rate, train)
    cached_k = {"rotated": k, "normed": k_normed, "raw": k_raw}[stage]
    return x, (cached_k, v)


def _apply_rows(model, x, positions, mask, past=None, train=False, stage="rotated", prefix=False):
    """Every layer over rows `x` after `past` (per layer K/V of earlier columns)."""
    x = _dropout(x, model.config.dropout, train)
    mask = mx.array(mask)
    kvs = []
    for index, layer in enumerate(model.generator.layers):
        layer_past = None if past is None else past[index]
        x, kv = _apply_layer(model, layer, x, positions, mask, layer_past, train, stage, prefix)
        kvs.append(kv)
    return model.generator.norm(x), kvs


def check_prefix(model, prefix: mx.array) -> None:
    vocab = model.config.vocab_size
    if not isinstance(prefix, mx.array) or prefix.ndim != 2 or not mx.issubdtype(prefix.dtype, mx.integer):
        raise ValueError(f"prefix: expected integer token ids [B, P], got {getattr(prefix, 'shape', prefix)!r}")
    if prefix.shape[0] < 1 or prefix.shape[1] < 1:
        raise ValueError(f"prefix: expected at least one row and one position, got {prefix.shape}")
    if not ids_within(prefix, vocab):
        raise ValueError(f"prefix: token ids must lie in [0, {vocab})")


def _check_start(start) -> None:
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start: expected an integer >= 0, got {start!r}")


def _embed_prefix(model, prefix: mx.array, bias: bool = True) -> mx.array:
    projection = model.generator.prefix_in
    embedded = model.codec.embed(prefix)
    return projection(embedded) if bias else embedded @ projection.weight.T


def _level_inputs(model, codes, level: int) -> mx.array:
    """Level `level`'s input rows ``[B, n_l, d]`` from the coarser levels' codes."""
    config, generator = model.config, model.generator
    n = config.level_lengths[level]
    batch = codes[0].shape[0] if codes else None
    base = generator.level_embed(mx.array([level]))[None]  # [1, 1, d]
    if level == 0:
        return mx.broadcast_to(base, (batch or 1, n, config.d_model))
    if config.level_input == "reconstruction":
        coarser = pool(codec_reconstruction(model, codes[:level]), n)
        return base + generator.reconstruction_in(coarser)
    previous = codes[level - 1]
    parents = (np.arange(n) * previous.shape[1]) // n
    return base + generator.code_embed[level - 1](previous[:, mx.array(parents)])


def _row_indices(model, prefix_length: int, level: int) -> np.ndarray:
    offset = level_offsets(model.config.level_lengths)[level]
    return prefix_length + offset + np.arange(model.config.level_lengths[level])


def _full_mask(model, prefix_length: int) -> np.ndarray:
    config = model.config
    return concept_mask(config.mask, prefix_length, config.level_lengths, leak_next=model._seams.mask_leaks_next)


def prefix_kv(model, prefix: mx.array, start: int = 0) -> list[KV]:
    """Per layer, the prefix's K (after QK-norm and rotation) and V, from the prefix alone."""
    check_prefix(model, prefix)
    _check_start(start)
    seams, length = model._seams, prefix.shape[1]
    first = 0 if seams.prefix_rope_from_zero else start
    positions = mx.arange(first, first + length)
    if seams.prefix_rope_table is not None:
        positions = positions % seams.prefix_rope_table
    mask = _full_mask(model, length)[:length, :length]
    chunk = seams.prefix_chunk_rows or prefix.shape[0]
    parts = [
        _apply_rows(
            model,
            _embed_prefix(model, prefix[row : row + chunk], seams.prefix_embed_bias),
            positions,
            mask,
            train=seams.prefix_train_mode,
            stage=seams.prefix_k_stage,
            prefix=True,
        )[1]
        for row in range(0, prefix.shape[0], chunk)
    ][::-1]
    kvs = [
        (mx.concatenate([p[i][0] for p in parts]), mx.concatenate([p[i][1] for p in parts]))
        for i in range(len(parts[0]))
    ]
    if seams.prefix_kv_dtype is not None:
        kvs = [
            (k.astype(seams.prefix_kv_dtype).astype(k.dtype), v.astype(seams.prefix_kv_dtype).astype(v.dtype))
            for k, v in kvs
        ]
    return kvs


def _check_level(model, codes, level: int) -> None:
    levels = model.config.layout.num_levels
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < levels:
        raise ValueError(f"level: expected an integer in [0, {levels}), got {level!r}")
    if len(codes) < level:
        raise ValueError(f"codes: level {level} needs the {level} coarser levels' codes, got {len(codes)}")


def apply_level(model, prefix: mx.array, codes, level: int, *, prefix_kv=None, level_kv=None, start: int = 0):
    """Level `level`'s logits ``[B, n_l, K_l]`` and the K/V of the level rows this forward ran."""
    check_prefix(model, prefix)
    _check_start(start)
    _check_level(model, codes, level)
    length = prefix.shape[1]
    if prefix_kv is not None and (
        len(prefix_kv) != model.config.num_layers
        or any(k.shape[0] != prefix.shape[0] or k.shape[2] != length or v.shape != k.shape for k, v in prefix_kv)
    ):
        raise ValueError(f"prefix_kv: expected {model.config.num_layers} layers of (K, V) [B, heads, {length}, dim]")
    levels = forward_levels(model.config.mask, level)
    cached = [j for j in levels if level_kv is not None and j in level_kv and j != level]
    run = [j for j in levels if j not in cached]
    rows = np.concatenate([_row_indices(model, length, j) for j in run])
    inputs = [_level_inputs(model, codes, j) for j in run]
    batch = prefix.shape[0]
    inputs = [mx.broadcast_to(x, (batch, *x.shape[1:])) for x in inputs]
    full = _full_mask(model, length)
    prefix_rows = np.arange(length)
    if prefix_kv is None:
        rows = np.concatenate([prefix_rows, rows])
        inputs = [_embed_prefix(model, prefix), *inputs]
        columns, past = rows, None
    else:
        columns = np.concatenate([prefix_rows, *[_row_indices(model, length, j) for j in cached], rows])
        past = [
            (
                mx.concatenate([k, *[level_kv[j][index][0] for j in cached]], 2),
                mx.concatenate([v, *[level_kv[j][index][1] for j in cached]], 2),
            )
            for index, (k, v) in enumerate(prefix_kv)
        ]
    hidden, kvs = _apply_rows(
        model, mx.concatenate(inputs, axis=1), mx.array(start + rows), full[np.ix_(rows, columns)], past
    )
    skip = 0 if prefix_kv is not None else length
    rows_kv, cursor = {}, skip
    for j in run:
        n = model.config.level_lengths[j]
        rows_kv[j] = [(k[:, :, cursor : cursor + n], v[:, :, cursor : cursor + n]) for k, v in kvs]
        if j == level:
            own = hidden[:, cursor : cursor + n]
        cursor += n
    return model.generator.heads[level](own), rows_kv


def level_logits(model, prefix: mx.array, codes, level: int, *, prefix_kv=None, level_kv=None, start: int = 0):
    """Level `level`'s logits ``[B, n_l, K_l]`` (see `apply_level`)."""
    return apply_level(model, prefix, codes, level, prefix_kv=prefix_kv, level_kv=level_kv, start=start)[0]


def training_logits(model, prefix: mx.array, codes, start: int = 0) -> list[mx.array]:
    """Every level's logits from one forward over ``[prefix | all levels]`` given all codes."""
    check_prefix(model, prefix)
    _check_start(start)
    config, length, batch = model.config, prefix.shape[1], prefix.shape[0]
    if len(codes) != config.layout.num_levels:
        raise ValueError(f"codes: expected all {config.layout.num_levels} levels, got {len(codes)}")
    inputs = [_embed_prefix(model, prefix)]
    for level in range(config.layout.num_levels):
        x = _level_inputs(model, codes, level)
        inputs.append(mx.broadcast_to(x, (batch, *x.shape[1:])))
    rows = np.arange(length + sum(config.level_lengths))
    hidden, _ = _apply_rows(model, mx.concatenate(inputs, axis=1), mx.array(start + rows), _full_mask(model, length))
    return [
        model.generator.heads[level](
            hidden[:, _row_indices(model, length, level)[0] : _row_indices(model, length, level)[-1] + 1]
        )
        for level in range(config.layout.num_levels)
    ]
