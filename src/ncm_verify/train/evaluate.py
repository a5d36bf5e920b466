"""Held-out losses, computed on fixed held-out windows so that a record's figure reproduces."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter
from ncm_verify.reference.ncm.model import NCM
from ncm_verify.train.data import Grammar, windows
from ncm_verify.train.tasks import block_window, ncm_block_log_likelihood, ncm_level_log_likelihood

EVAL_SEED = 12345
EVAL_WINDOWS = 128


def next_token_loss(model: nn.Module, held_out: np.ndarray, length: int = 64) -> float:
    """Mean next-token cross-entropy (nats) over the fixed held-out windows."""
    x = mx.array(windows(held_out, EVAL_WINDOWS, length + 1, EVAL_SEED, 0))
    return float(np.array(nn.losses.cross_entropy(model(x[:, :-1]), x[:, 1:], reduction="mean")))


def block_loss(
    model: ConceptBlockDrafter, held_out: np.ndarray, context: int, block: int, target: nn.Module | None = None
) -> float:
    """Mean -log q(block) / k (nats per token, z enumerated exactly) over the fixed held-out windows, four blocks
    a window, each after `context` tokens."""
    w = mx.array(windows(held_out, EVAL_WINDOWS, block_window(context, block, 4), EVAL_SEED, 0))
    return float(np.array(-ncm_block_log_likelihood(model, w, context, 4, target).mean())) / block


def grammar_kl(model: nn.Module, grammar: Grammar, held_out: np.ndarray, length: int = 64) -> float:
    """Mean KL(p_grammar || model) (nats) over held-out positions with two symbols before them: exact."""
    x = windows(held_out, EVAL_WINDOWS, length, EVAL_SEED, 0)
    logq = np.array(nn.log_softmax(model(mx.array(x)).astype(mx.float32), axis=-1), dtype=np.float64)[:, 1:-1]
    p = grammar.table[x[:, :-2], x[:, 1:-1]]
    return float((p * (np.log(p) - logq)).sum(axis=-1).mean())


def level_loss(model: NCM, held_out: np.ndarray) -> float:
    """Mean -log p(levels | prefix) per level token (nats, latents marginalised exactly) on held-out windows."""
    w = mx.array(windows(held_out, EVAL_WINDOWS, model.config.total_length, EVAL_SEED, 0))
    return float(np.array(-ncm_level_log_likelihood(model, w).mean())) / sum(model.config.level_sizes)
