"""A llama forward pass in float64 NumPy over the `gguf` package's own reader and dequantisation.

Written apart from mlx-lm and MLX (no shared code, not even the weight names' mapping): what a GGUF
file means, read as llama.cpp writes it. Its Q and K rows are permuted for RoPE on adjacent pairs
(llama.cpp's "normal" rope), so rotation here pairs dimensions (2i, 2i+1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def read_gguf(path: Path | str) -> tuple[dict[str, np.ndarray], dict]:
    """The file's tensors dequantised by `gguf.quants`, in float64 (row-major, [out, in]), and its llama metadata."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    tensors = {}
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        tensors[tensor.name] = np.asarray(values, dtype=np.float64).reshape(tuple(reversed(tensor.shape.tolist())))
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("llama."):
            metadata[key] = field.contents()
    return tensors, metadata


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_pairs(x: np.ndarray, base: float) -> np.ndarray:
    """Rotate adjacent pairs (2i, 2i+1) of each head by position * base^(-2i/d); x is [heads, T, d]."""
    d = x.shape[-1]
    angles = np.arange(x.shape[-2])[:, None] * base ** (-np.arange(0, d, 2) / d)[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def llama_logits(tensors: dict[str, np.ndarray], metadata: dict, tokens: list[int]) -> np.ndarray:
    """Float64 logits [T, V] of a causal llama (grouped-query attention, SwiGLU, tied output) at every position."""
    heads = int(metadata["llama.attention.head_count"])
    kv_heads = int(metadata["llama.attention.head_count_kv"])
    eps = float(metadata["llama.attention.layer_norm_rms_epsilon"])
    base = float(metadata["llama.rope.freq_base"])
    embedding = tensors["token_embd.weight"]
    x = embedding[np.asarray(tokens)]
    length = len(tokens)
    mask = np.triu(np.full((length, length), -np.inf), 1)
    for layer in range(int(metadata["llama.block_count"])):
        w = lambda name, layer=layer: tensors[f"blk.{layer}.{name}.weight"]
        h = _rms_norm(x, w("attn_norm"), eps)
        q, k, v = h @ w("attn_q").T, h @ w("attn_k").T, h @ w("attn_v").T
        head_dim = q.shape[-1] // heads
        split = lambda a, n, head_dim=head_dim: a.reshape(length, n, head_dim).transpose(1, 0, 2)
        q, k, v = _rope_pairs(split(q, heads), base), _rope_pairs(split(k, kv_heads), base), split(v, kv_heads)
        k, v = np.repeat(k, heads // kv_heads, axis=0), np.repeat(v, heads // kv_heads, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(head_dim) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attended = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        x = x + attended.transpose(1, 0, 2).reshape(length, -1) @ w("attn_output").T
        h = _rms_norm(x, w("ffn_norm"), eps)
        gate = h @ w("ffn_gate").T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w("ffn_up").T)) @ w("ffn_down").T
    x = _rms_norm(x, tensors["output_norm.weight"], eps)
    return x @ embedding.T
