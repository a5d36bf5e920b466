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


def initial_value(name: str, shape: tuple[int, ...], key: mx.array, logit_scale: float) -> mx.array:
    """The seeded value of one parameter; 1-D norm weights are ones (scale-free), everything else normal."""
    if "norm" in name and len(shape) == 1:
        return mx.ones(shape)
    if name.endswith("A_log"):  # a recurrent layer's decay: log of a positive rate, as checkpoints hold it
        return mx.log(mx.random.uniform(1.0, 4.0, shape, key=key))
    scale = 1.0 if "embed" in name else 1.0 / math.sqrt(shape[-1])
    if name.endswith("lm_head.weight"):
        scale *= logit_scale
    return scale * mx.random.normal(shape, key=key)


def build(make_model, seed: int, logit_scale: float = 3.0) -> nn.Module:
    """``make_model()`` under MLX's global seed `seed`, then `seed_parameters`: a module may draw arrays that are
    not parameters (a private attribute) from the global generator when built, and the model must still depend
    only on `seed`."""
    mx.random.seed(seed)
    return seed_parameters(make_model(), seed, logit_scale)


def seed_parameters(model: nn.Module, seed: int, logit_scale: float = 3.0) -> nn.Module:
    """`model` in evaluation mode with float32 weights that depend only on `seed` and its parameter names."""
    parameters: Any = tree_flatten(model.parameters())
    shapes = {name: value.shape for name, value in parameters}
    names = sorted(shapes)
    keys = mx.random.split(mx.random.key(seed), max(len(names), 1))
    model.update(tree_unflatten([(n, initial_value(n, shapes[n], keys[i], logit_scale)) for i, n in enumerate(names)]))
    model.eval()
    mx.eval(model.parameters())
    return model


def log_softmax(logits: mx.array) -> mx.array:
    logits = logits.astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)
