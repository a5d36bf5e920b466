"""Tiny mlx-lm models built from mlx-lm's own classes with seeded random weights; nothing is downloaded.

A `TinySpec` names the architecture (a plain llama, or a llama whose first
layer attends through a sliding window and so holds a `RotatingKVCache`), the
vocabulary and a seed. Weights are drawn from the seed so that a failing
example reproduces from its printed spec.
"""

from __future__ import annotations

import dataclasses
import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import llama

from ncm_verify.oracles.exact_text_drafting import sequence_law

KINDS = ("llama", "sliding-window llama")
"""Architectures the suite builds; the second has one sliding-window layer (mlx-lm #1423's case)."""


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """A tiny mlx-lm model: `kind` in `KINDS`, vocabulary 4–33, `window` for the sliding layer."""

    kind: str = "llama"
    vocab_size: int = 8
    seed: int = 0
    num_layers: int = 2
    hidden_size: int = 16
    num_heads: int = 2
    window: int = 4
    logit_scale: float = 3.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if not 4 <= self.vocab_size <= 33:  # 4: loops enumerated through their implementation stay cheap
            raise ValueError(f"vocab_size: expected an integer in [4, 33], got {self.vocab_size!r}")
        if self.window < 1:
            raise ValueError(f"window: expected a positive integer, got {self.window!r}")

    def with_seed(self, seed: int) -> TinySpec:
        return dataclasses.replace(self, seed=seed)


def make_model_args(spec: TinySpec) -> llama.ModelArgs:
    """mlx-lm's llama arguments for `spec`; the sliding kind makes layer 0 a sliding-window layer."""
    layer_types = ["full_attention"] * spec.num_layers
    if spec.kind == "sliding-window llama":
        layer_types[0] = "sliding_attention"
    return llama.ModelArgs(
        model_type="llama",
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        intermediate_size=2 * spec.hidden_size,
        num_attention_heads=spec.num_heads,
        rms_norm_eps=1e-5,
        vocab_size=spec.vocab_size,
        tie_word_embeddings=False,
        layer_types=layer_types,
        sliding_window=spec.window if spec.kind == "sliding-window llama" else None,
    )


def _initial_value(name: str, shape: tuple[int, ...], key: mx.array, logit_scale: float) -> mx.array:
    if "norm" in name:
        return mx.ones(shape)
    # unit-variance embeddings, 1/sqrt(fan_in) projections; a scaled head keeps logits far from uniform
    scale = 1.0 if "embed" in name else 1.0 / math.sqrt(shape[-1])
    if name.startswith("lm_head"):
        scale *= logit_scale
    return scale * mx.random.normal(shape, key=key)


def apply_seeded_weights(model: nn.Module, seed: int, logit_scale: float) -> nn.Module:
    """`model` in evaluation mode with float32 weights drawn from `seed` alone (norms at one)."""
    shapes = {name: value.shape for name, value in tree_flatten(model.parameters())}
    names = sorted(shapes)
    keys = mx.random.split(mx.random.key(seed), len(names))
    model.update(tree_unflatten([(n, _initial_value(n, shapes[n], keys[i], logit_scale)) for i, n in enumerate(names)]))
    model.eval()
    mx.eval(model.parameters())
    return model


def make_tiny_model(spec: TinySpec) -> nn.Module:
    """An mlx-lm `llama.Model` in evaluation mode whose float32 weights depend only on `spec`."""
    return apply_seeded_weights(llama.Model(make_model_args(spec)), spec.seed, spec.logit_scale)


SUCCESSOR_STEPS = (1, 3)
"""A successor draft's row after token v keeps mass on (v + 1) % V and (v + 3) % V only."""


def make_successor_draft(spec: TinySpec, scale: float = 100.0) -> nn.Module:
    """A tiny llama whose row depends on the last token alone: mass on its `SUCCESSOR_STEPS` successors, exact zeros
    elsewhere (test-only: a draft whose rows have holes that differ from context to context).

    Attention and MLP outputs are zeroed, so the last hidden state is the token's embedding (orthogonal rows of norm
    sqrt(H)); the head scores each successor ``scale * sqrt(H)`` above the rest, past float32's softmax at T <= 1.5.
    """
    model = make_tiny_model(spec)
    vocab, hidden = spec.vocab_size, spec.hidden_size
    if vocab > hidden:
        raise ValueError(f"spec: a successor draft needs vocab_size <= hidden_size, got {vocab} > {hidden}")
    basis = np.linalg.qr(np.random.default_rng(spec.seed).standard_normal((hidden, hidden)))[0][:vocab]
    head = np.zeros((vocab, hidden))
    for v in range(vocab):
        for step in SUCCESSOR_STEPS:
            head[(v + step) % vocab] += scale * basis[v]
    model.model.embed_tokens.weight = mx.array(basis * math.sqrt(hidden), dtype=mx.float32)
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight = mx.zeros_like(layer.self_attn.o_proj.weight)
        layer.mlp.down_proj.weight = mx.zeros_like(layer.mlp.down_proj.weight)
    model.lm_head.weight = mx.array(head, dtype=mx.float32)
    mx.eval(model.parameters())
    return model


def logprobs_at_every_position(model: nn.Module, sequences: mx.array) -> mx.array:
    """Log-probabilities ``[B, T, V]`` of the token after each prefix of each sequence ``[B, T]``, uncached:
    a causal pass scores each position on what precedes it."""
    logits = model(sequences).astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def next_token_logprobs(model: nn.Module, sequences: mx.array) -> mx.array:
    """Log-probabilities ``[B, V]`` of the token after each sequence ``[B, T]``, in one uncached pass."""
    return logprobs_at_every_position(model, sequences)[:, -1, :]


def first_tokens_law(model: nn.Module, prompt: list[int], length: int, distribution) -> np.ndarray:
    """The exact float64 law of the first `length` tokens after `prompt`, enumerated from the model.

    `distribution(logprobs [B, V]) -> probs [B, V]` is the sampling transform
    (temperature, top-p, top-k). Entry ``x_1 * V^(T-1) + ... + x_T`` is the
    probability of emitting ``x_1 .. x_T``.
    """

    def rows(sequences: np.ndarray) -> np.ndarray:
        logprobs = next_token_logprobs(model, mx.array(sequences, dtype=mx.int32))
        probs = np.array(distribution(logprobs)).astype(np.float64)
        return probs / probs.sum(axis=1, keepdims=True)

    return sequence_law(rows, prompt, length)


def outcome_index(tokens: list[int], vocab: int) -> int:
    """The index of a token sequence in `first_tokens_law`'s order; a token outside [0, vocab) is an error,
    never wrapped or carried into the next position."""
    if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or vocab < 1:
        raise ValueError(f"vocab: expected a positive integer, got {vocab!r}")
    if len(tokens) == 0:
        raise ValueError("tokens: expected at least one token id, got none")
    index = 0
    for position, token in enumerate(tokens):
        if not 0 <= int(token) < vocab or int(token) != token:
            raise ValueError(f"tokens: entry {position} is {token!r}, outside the vocabulary [0, {vocab})")
        index = index * vocab + int(token)
    return index
