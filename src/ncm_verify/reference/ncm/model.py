"""The reference NCM: a small pre-norm transformer with a latent head and a
factorised token head, deterministic from its seed, with position counters."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.reference.ncm.config import NCMConfig
from ncm_verify.reference.ncm.masks import make_mask

__all__ = [
    "KV",
    "Block",
    "NCM",
    "make_model",
    "fingerprint",
    "save_model",
    "load_model",
    "layer_states",
]

KV = tuple[mx.array, mx.array]


class Block(nn.Module):
    """One transformer layer; counts the positions (batch x length) it processes and the
    attention pairs (batch x rows x columns) it scores, masked ones included."""

    def __init__(self, config: NCMConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.norm1 = nn.LayerNorm(config.d_model)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.up = nn.Linear(config.d_model, 2 * config.d_model)
        self.down = nn.Linear(2 * config.d_model, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.positions_processed = 0
        self.pairs_processed = 0

    def _heads(self, x: mx.array) -> mx.array:
        batch, length, width = x.shape
        return x.reshape(batch, length, self.num_heads, -1).transpose(0, 2, 1, 3)

    def __call__(self, x: mx.array, mask: mx.array, cache: KV | None = None, kv_cache=None) -> tuple[mx.array, KV]:
        """`mask` is ``[rows, cached + rows]``; returns the output and the K/V of all columns.

        Earlier columns come from `cache` (K/V to prepend) or from `kv_cache`, an
        mlx-lm-style cache given the new rows' K/V: the rows attend to what its
        ``update_and_fetch`` returns.
        """
        self.positions_processed += x.shape[0] * x.shape[1]
        q, k, v = map(self._heads, mx.split(self.qkv(self.norm1(x)), 3, axis=-1))
        if cache is not None:
            k, v = mx.concatenate([cache[0], k], axis=2), mx.concatenate([cache[1], v], axis=2)
        if kv_cache is not None:
            k, v = kv_cache.update_and_fetch(k, v)
        self.pairs_processed += x.shape[0] * x.shape[1] * k.shape[2]
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(q.shape[-1]))
        scores = mx.where(mask, scores, mx.array(-mx.inf, dtype=scores.dtype))
        # precise softmax: float16 rows keep their float32 normaliser
        attended = mx.softmax(scores, axis=-1, precise=True) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + self.dropout(self.out(attended))
        x = x + self.dropout(self.down(nn.gelu(self.up(self.norm2(x)))))
        return x, (k, v)


class NCM(nn.Module):
    """Embeddings, `num_layers` blocks, a latent head over the codebook and a token head."""

    def __init__(self, config: NCMConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size + 1, config.d_model)
        self.positions = nn.Embedding(config.total_length, config.d_model)
        self.layers = [Block(config) for _ in range(config.num_layers)]
        self.norm = nn.LayerNorm(config.d_model)
        self.latent_head = nn.Linear(config.d_model, config.codebook_size)
        self.codebook = nn.Embedding(config.codebook_size, config.d_model)
        self.token_head = nn.Linear(config.d_model, config.vocab_size)
        self._mask = make_mask(config.mask, config.prefix_length, config.level_sizes)

    @property
    def mask(self) -> mx.array:
        return self._mask

    def __call__(self, tokens: mx.array, start: int = 0, cache: list[KV] | None = None, return_states: bool = False):
        """Run rows ``start..start+len`` of the layout after `cache` (K/V of rows ``< start``).

        Returns the final normed hidden states, the per-layer K/V of all rows so
        far, and (with `return_states`) every layer's input and the last output.
        """
        length = tokens.shape[1]
        mask = self._mask[start : start + length, : start + length]
        x = self.embed(tokens) + self.positions(mx.arange(start, start + length))
        states, kvs = [x], []
        for index, layer in enumerate(self.layers):
            x, kv = layer(x, mask, None if cache is None else cache[index])
            states.append(x)
            kvs.append(kv)
        hidden = self.norm(x)
        return (hidden, kvs, states) if return_states else (hidden, kvs)

    def latent_logits(self, slots: mx.array) -> mx.array:
        """``p(z | context)`` logits from a level's slot states ``[B, n, d]`` -> ``[B, K]``."""
        return self.latent_head(mx.mean(slots, axis=1))

    def token_logits(self, slots: mx.array, latent: mx.array) -> mx.array:
        """Per-slot logits given the latent: ``W (h_i + E[z])`` -> ``[B, n, V]``."""
        return self.token_head(slots + self.codebook(latent)[:, None, :])

    def position_counts(self) -> list[int]:
        return [layer.positions_processed for layer in self.layers]

    def pair_counts(self) -> list[int]:
        """Per layer, attention pairs scored since the last `reset_counts` (see `accounting.cached_pairs`)."""
        return [layer.pairs_processed for layer in self.layers]

    def reset_counts(self) -> None:
        for layer in self.layers:
            layer.positions_processed = layer.pairs_processed = 0


def _initial_value(name: str, shape: tuple[int, ...], key: mx.array) -> mx.array:
    if name.endswith("bias"):
        return mx.zeros(shape)
    if "norm" in name:
        return mx.ones(shape)
    # unit-variance embeddings, 1/sqrt(fan_in) projections: logits far from uniform
    scale = (
        1.0
        if len(shape) == 2 and ("embed" in name or "positions" in name or "codebook" in name)
        else 1.0 / math.sqrt(shape[-1])
    )
    return scale * mx.random.normal(shape, key=key)


def make_model(config: NCMConfig) -> NCM:
    """A model in evaluation mode whose weights depend only on ``config.seed``."""
    model = NCM(config)
    names = sorted(name for name, _ in tree_flatten(model.parameters()))
    shapes = dict((name, value.shape) for name, value in tree_flatten(model.parameters()))
    keys = mx.random.split(mx.random.key(config.seed), len(names))
    weights = [(name, _initial_value(name, shapes[name], keys[i])) for i, name in enumerate(names)]
    model.update(tree_unflatten(weights))
    model.set_dtype(config.mx_dtype)
    model.eval()
    mx.eval(model.parameters())
    return model


def fingerprint(model: NCM) -> str:
    """sha256 of the config and every weight (name, dtype, shape, bytes)."""
    digest = hashlib.sha256(model.config.to_json().encode())
    for name, value in sorted(tree_flatten(model.parameters()), key=lambda item: item[0]):
        raw = value.view(mx.uint16) if value.dtype == mx.bfloat16 else value
        digest.update(f"{name}|{value.dtype}|{value.shape}|".encode())
        digest.update(np.asarray(raw).tobytes())
    return digest.hexdigest()


def save_model(model: NCM, path: str | Path) -> None:
    """Weights as safetensors, with the config in the metadata."""
    mx.save_safetensors(
        str(path), dict(tree_flatten(model.parameters())), metadata={"ncm_config": model.config.to_json()}
    )


def load_model(path: str | Path) -> NCM:
    """The model saved at `path`, in evaluation mode."""
    weights, metadata = mx.load(str(path), return_metadata=True)
    if "ncm_config" not in metadata:
        raise ValueError(f"path: {path} holds no ncm_config metadata")
    model = NCM(NCMConfig.from_json(metadata["ncm_config"]))
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    return model


def layer_states(model: NCM, tokens: mx.array) -> list[mx.array]:
    """Every layer's input and the last layer's output for full sequences ``[B, T]``."""
    _, _, states = model(tokens, return_states=True)
    mx.eval(states)
    return states
