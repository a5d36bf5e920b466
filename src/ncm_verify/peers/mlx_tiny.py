"""Seeded weights for the tiny models the MLX speculative decoders are judged on (`make verify-peers PEERS=...`).

Imports MLX alone: each of the five packages runs in an environment of its own (`.peers/<name>/`), some without
mlx-lm, so the adapters share this rather than `mlx_lm_real.models`, whose rule it follows: unit-variance
embeddings, 1/sqrt(fan_in) projections, norms at one, a scaled head so that the target's rows are far from uniform.
"""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten


def initial_value(
    name: str, shape: tuple[int, ...], key: mx.array, logit_scale: float, embed_scale: float = 1.0
) -> mx.array:
    """The seeded value of one parameter; 1-D norm weights are ones (scale-free), everything else normal."""
    if "norm" in name and len(shape) == 1:
        return mx.ones(shape)
    if name.endswith("A_log"):  # a recurrent layer's decay: log of a positive rate, as checkpoints hold it
        return mx.log(mx.random.uniform(1.0, 4.0, shape, key=key))
    scale = embed_scale if "embed" in name else 1.0 / math.sqrt(shape[-1])
    if name.endswith("lm_head.weight"):
        scale *= logit_scale
    return scale * mx.random.normal(shape, key=key)


def build(make_model, seed: int, logit_scale: float = 3.0, embed_scale: float = 1.0) -> nn.Module:
    """``make_model()`` under MLX's global seed `seed`, then `seed_parameters`: a module may draw arrays that are
    not parameters (a private attribute) from the global generator when built, and the model must still depend
    only on `seed`. `embed_scale` scales the embeddings: a tied head (Gemma) reads its logits from them."""
    mx.random.seed(seed)
    return seed_parameters(make_model(), seed, logit_scale, embed_scale)


def seed_parameters(model: nn.Module, seed: int, logit_scale: float = 3.0, embed_scale: float = 1.0) -> nn.Module:
    """`model` in evaluation mode with float32 weights that depend only on `seed` and its parameter names."""
    parameters: Any = tree_flatten(model.parameters())
    shapes = {name: value.shape for name, value in parameters}
    names = sorted(shapes)
    keys = mx.random.split(mx.random.key(seed), max(len(names), 1))
    values = [(n, initial_value(n, shapes[n], keys[i], logit_scale, embed_scale)) for i, n in enumerate(names)]
    model.update(tree_unflatten(values))
    model.eval()
    mx.eval(model.parameters())
    return model


def log_softmax(logits: mx.array) -> mx.array:
    logits = logits.astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


MLX_LM_KINDS = ("attention", "hybrid", "sliding-window")
"""mlx-lm targets: `qwen3` (every layer attention), `qwen3_next` (GatedDeltaNet layers 0, 2 between attention
layers: `ArraysCache` state that cannot be trimmed), `gemma4_text` (sliding-window layers: a `RotatingKVCache`)."""
HIDDEN = 32
WINDOW = 4
"""The sliding-window target's window: smaller than the generation and than a verify block, so the ring wraps."""


def make_mlx_lm_target(kind: str, seed: int, vocab: int = 12):
    """mlx-lm's `qwen3`, `qwen3_next` or `gemma4_text` model for `kind`, weights drawn from `seed`."""
    common: dict[str, Any] = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, rms_norm_eps=1e-6, vocab_size=vocab)
    if kind == "attention":
        from mlx_lm.models import qwen3

        args = qwen3.ModelArgs(
            model_type="qwen3", num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
            max_position_embeddings=1024, rope_theta=10000.0, head_dim=16, tie_word_embeddings=False, **common,
        )  # fmt: skip
        return build(lambda: qwen3.Model(args), seed)
    if kind == "hybrid":
        from mlx_lm.models import qwen3_next

        hybrid_args = qwen3_next.ModelArgs(
            model_type="qwen3_next", num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
            linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, num_experts=0, num_experts_per_tok=1, decoder_sparse_step=1,
            shared_expert_intermediate_size=2 * HIDDEN, mlp_only_layers=[0, 1, 2, 3], moe_intermediate_size=HIDDEN,
            rope_theta=10000.0, partial_rotary_factor=0.5, max_position_embeddings=1024, head_dim=16,
            full_attention_interval=2, tie_word_embeddings=False, **common,
        )  # fmt: skip
        return build(lambda: qwen3_next.Model(hybrid_args), seed)
    if kind == "sliding-window":
        from mlx_lm.models import gemma4_text

        sliding_args = gemma4_text.ModelArgs(
            num_hidden_layers=4, num_attention_heads=2, head_dim=16, global_head_dim=16, num_key_value_heads=1,
            vocab_size_per_layer_input=vocab, num_kv_shared_layers=0, hidden_size_per_layer_input=0,
            sliding_window=WINDOW, sliding_window_pattern=2, max_position_embeddings=1024,
            use_double_wide_mlp=False, final_logit_softcapping=30.0, **common,
        )  # fmt: skip
        return build(lambda: gemma4_text.Model(sliding_args), seed)
    raise ValueError(f"kind: expected one of {MLX_LM_KINDS}, got {kind!r}")
