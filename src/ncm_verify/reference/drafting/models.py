"""The trained text models of text drafting: the AR target and the AR draft, and what the drafters share.

The target and the AR draft are mlx-lm's own `llama.Model`, so mlx-lm's `generate_step`,
`speculative_generate_step` and prompt caches run them unchanged. The NCM block drafter is the source's NCM
(`concept_drafter.ConceptBlockDrafter`).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.reference.drafting.base import DraftBlock, rows_at_temperature

__all__ = [
    "ARDrafter",
    "llama_args",
    "make_llama",
    "parameter_count",
    "target_features",
    "block_start_features",
    "rows_at_temperature",
]


def llama_args(vocab_size: int, hidden: int, layers: int, intermediate: int, heads: int = 4) -> llama.ModelArgs:
    """mlx-lm `ModelArgs` of a small tied-embedding llama."""
    return llama.ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=layers,
        intermediate_size=intermediate,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        rms_norm_eps=1e-5,
        vocab_size=vocab_size,
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )


def make_llama(args: llama.ModelArgs | dict[str, Any]) -> llama.Model:
    """mlx-lm's own llama `Model` for `args` (a `ModelArgs` or its fields)."""
    return llama.Model(args if isinstance(args, llama.ModelArgs) else llama.ModelArgs(**args))


def parameter_count(model: nn.Module) -> int:
    """How many scalars `model`'s parameters hold."""
    return sum(int(v.size) for _, v in _flatten(model.parameters()))


def _flatten(tree: Any, prefix: str = "") -> list[tuple[str, mx.array]]:
    from mlx.utils import tree_flatten

    flat: list[tuple[str, mx.array]] = tree_flatten(tree, prefix)  # type: ignore[assignment]
    return flat


def target_features(target: Any, tokens: mx.array, cache: list[Any] | None = None) -> mx.array:
    """An mlx-lm model's final normed hidden states (B, n, D) over `tokens`: what EAGLE-style drafters read."""
    return target.model(tokens, cache)


def block_start_features(target: Any, tokens: mx.array) -> mx.array:
    """The target's hidden states (B, n, D) as the drafting loop hands them: position s holds the state at
    s - 1 (zeros at 0), whose row emitted token s, never the state that has read token s (EAGLE's convention:
    no extra target pass)."""
    states = target_features(target, tokens)
    return mx.concatenate([mx.zeros_like(states[:, :1]), states[:, :-1]], axis=1)


def _draw(rows: mx.array, key: mx.array) -> mx.array:
    """One token per row of `rows` (..., V), drawn by inverse CDF at one uniform each."""
    u = mx.random.uniform(shape=rows.shape[:-1], key=key)
    cdf = mx.cumsum(rows, axis=-1)
    index = mx.sum(cdf <= u[..., None] * cdf[..., -1:], axis=-1)
    return mx.minimum(index, rows.shape[-1] - 1).astype(mx.int32)


class ARDrafter:
    """A `TextDrafter` around an mlx-lm model: k tokens drawn one after another, each from its row."""

    reads_features = False

    def __init__(self, model: llama.Model, max_block: int = 64):
        self.model = model
        self.vocab_size = int(model.args.vocab_size)
        self.max_block = max_block

    def make_cache(self) -> list[Any]:
        return make_prompt_cache(self.model)

    def propose(
        self,
        cache: list[Any],
        new_tokens: mx.array,
        k: int,
        key: mx.array,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> DraftBlock:
        logits = self.model(new_tokens, cache=cache)[:, -1, :]
        tokens, rows = [], []
        for i, subkey in enumerate(mx.random.split(key, k)):
            row = rows_at_temperature(logits, temperature)
            token = _draw(row, subkey)
            tokens.append(token)
            rows.append(row)
            if i + 1 < k:
                logits = self.model(token[:, None], cache=cache)[:, -1, :]
        return DraftBlock(tokens=mx.stack(tokens, axis=1), probs=mx.stack(rows, axis=1))

    def block_probs(
        self,
        context: mx.array,
        tokens: mx.array,
        codes: mx.array | None = None,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> mx.array:
        k = tokens.shape[1]
        sequence = mx.concatenate([context, tokens[:, :-1]], axis=1).astype(mx.int32)
        return rows_at_temperature(self.model(sequence)[:, -k:, :], temperature)
