"""What each model of `make train` learns from: next-token data, NCM blocks, distillation, target features,
and the toy level NCM's text levels (data, or distilled on a level target)."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter
from ncm_verify.reference.drafting.models import block_start_features, rows_at_temperature
from ncm_verify.reference.ncm.level_draft import level_distributions
from ncm_verify.reference.ncm.model import NCM
from ncm_verify.train.data import windows


@dataclass
class NextTokenTask:
    """Cross-entropy of an mlx-lm model's next-token rows on random windows of `ids`."""

    ids: np.ndarray
    batch: int
    length: int
    seed: int

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.length

    def loss(self, model: nn.Module, step: int) -> mx.array:
        x = mx.array(windows(self.ids, self.batch, self.length + 1, self.seed, step))
        logits = model(x[:, :-1])
        return nn.losses.cross_entropy(logits, x[:, 1:], reduction="mean")


BLOCK_STRIDE = 4
"""Positions between the starts of consecutive blocks a window scores."""


def block_starts(context: int, count: int) -> np.ndarray:
    """Positions (the last context token read) at which blocks start: the last `count` of `context`, every
    `BLOCK_STRIDE`th."""
    return np.arange(context - 1 - BLOCK_STRIDE * (count - 1), context, BLOCK_STRIDE)


def block_window(context: int, block: int, starts_per_window: int) -> int:
    """A window's length: `starts_per_window` blocks of `block`, each after `context` tokens of its own."""
    return context + BLOCK_STRIDE * (starts_per_window - 1) + block


@dataclass
class NCMBlockTask:
    """Exact negative log-likelihood per token of the data's blocks under the NCM drafter, z enumerated.

    With `target` set the drafter also reads the target's hidden state at each block's start (frozen target):
    the state whose row emitted the block's last context token (`block_start_features`), as the loop hands it.
    """

    ids: np.ndarray
    batch: int
    context: int
    block: int
    starts_per_window: int
    seed: int
    target: nn.Module | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.batch * block_window(self.context, self.block, self.starts_per_window)

    def loss(self, model: nn.Module, step: int) -> mx.array:
        assert isinstance(model, ConceptBlockDrafter)
        length = block_window(self.context, self.block, self.starts_per_window)
        w = mx.array(windows(self.ids, self.batch, length, self.seed, step))
        return (
            -ncm_block_log_likelihood(model, w, self.context, self.starts_per_window, self.target).mean() / self.block
        )


def ncm_block_log_likelihood(
    model: ConceptBlockDrafter, w: mx.array, context: int, starts_per_window: int, target: nn.Module | None
) -> mx.array:
    """log q(block) (B * S,) of the blocks after each of S starts in windows `w` (B, `block_window`), each block
    scored after the `context` tokens before it (the drafter's prefix), z enumerated."""
    k = w.shape[1] - block_window(context, 0, starts_per_window)
    starts = block_starts(w.shape[1] - k, starts_per_window)
    prefixes = mx.concatenate([w[:, s + 1 - context : s + 1] for s in starts], axis=0)
    blocks = mx.concatenate([w[:, s + 1 : s + 1 + k] for s in starts], axis=0)
    features = None
    if target is not None:
        # The drafter at s reads the target's state at s - 1, as the drafting loop can supply it.
        states = mx.stop_gradient(block_start_features(target, w[:, : starts[-1] + 1]))
        features = mx.concatenate([states[:, s] for s in starts], axis=0)
    return model.block_log_likelihood(prefixes, blocks, features=features)


@dataclass
class DistillTask:
    """DistillSpec for the NCM drafter: forward KL on target-generated blocks, TV on its own on-policy blocks.

    Target-generated: blocks sampled from the target after training contexts (made once, `target_blocks`),
    scored by the drafter's exact marginal log q(x) (sequence-level forward KL up to a constant). On-policy:
    the drafter draws z and a block from q(. | z); the target scores the block in one pass; the loss is the
    total variation between the target's row and q(x_i | z) at each position (1 - TV is the acceptance rate).
    """

    ids: np.ndarray
    target: nn.Module
    batch: int
    context: int
    block: int
    seed: int
    target_contexts: np.ndarray = field(init=False)
    target_blocks: np.ndarray = field(init=False)
    generated: int = 1024

    def __post_init__(self) -> None:
        self.target_contexts, self.target_blocks = sample_target_blocks(
            self.target, self.ids, self.generated, self.context, self.block, self.seed
        )

    @property
    def tokens_per_step(self) -> int:
        return 2 * self.batch * (self.context + self.block)

    def loss(self, model: nn.Module, step: int) -> mx.array:
        assert isinstance(model, ConceptBlockDrafter)
        rng = np.random.default_rng([self.seed, step, 7])
        pick = rng.integers(0, len(self.target_blocks), size=self.batch)
        ctx = mx.array(self.target_contexts[pick])
        forward_kl = -model.block_log_likelihood(ctx, mx.array(self.target_blocks[pick])).mean() / self.block

        ctx = mx.array(windows(self.ids, self.batch, self.context, self.seed + 1, step))
        log_prior, log_rows = model.block_law(ctx, self.block)
        z = mx.stop_gradient(mx.random.categorical(log_prior))
        rows = mx.exp(mx.take_along_axis(log_rows, z[:, None, None, None], axis=1)[:, 0])
        drafted = mx.stop_gradient(mx.random.categorical(mx.log(rows + 1e-30)))
        seq = mx.concatenate([ctx, drafted[:, :-1]], axis=1)
        p = mx.stop_gradient(mx.softmax(self.target(seq)[:, self.context - 1 :].astype(mx.float32), axis=-1))
        total_variation = 0.5 * mx.abs(p - rows).sum(axis=-1).mean()
        return forward_kl + total_variation


def sample_target_blocks(
    target: nn.Module, ids: np.ndarray, count: int, context: int, block: int, seed: int, chunk: int = 512
) -> tuple[np.ndarray, np.ndarray]:
    """`count` training contexts and a block the target samples after each (temperature 1)."""
    from mlx_lm.models.cache import make_prompt_cache

    contexts = windows(ids, count, context, seed + 2, 0)
    blocks = []
    mx.random.seed(seed + 3)
    for begin in range(0, count, chunk):
        ctx = mx.array(contexts[begin : begin + chunk])
        cache = make_prompt_cache(target)
        logits = target(ctx, cache=cache)[:, -1]
        drawn = []
        for _ in range(block):
            token = mx.random.categorical(mx.log(rows_at_temperature(logits, 1.0) + 1e-30))
            drawn.append(token)
            logits = target(token[:, None], cache=cache)[:, -1]
        blocks.append(np.array(mx.stack(drawn, axis=1)))
    return contexts, np.concatenate(blocks).astype(np.int32)


def level_log_laws(model: NCM, w: mx.array) -> list[tuple[mx.array, mx.array, mx.array]]:
    """Per level l of windows `w` (B, P + sum n_l) laid out [prefix | level 1 | ... | level L], teacher forced:
    log p(z | x_<l) (B, K), log p(x_l,i | z, x_<l) for every code (B, K, n_l, V), and the level's tokens x_l."""
    config = model.config
    out = []
    for level, size in enumerate(config.level_sizes):
        start = config.level_start(level)
        latent_logits, token_logits = level_distributions(model, w[:, :start])
        x = w[:, start : start + size]
        out.append((nn.log_softmax(latent_logits, axis=-1), nn.log_softmax(token_logits, axis=-1), x))
    return out


def ncm_level_log_likelihood(model: NCM, w: mx.array) -> mx.array:
    """log p(x_1, ..., x_L | prefix) (B,) of the windows' levels, every level's latent marginalised exactly.

    A level's latent z_l is read from its placeholder slots, which see the prefix and earlier levels' tokens
    only (never an earlier latent), so the marginal factorises over levels:
    log p(x | prefix) = sum_l logsumexp_z [log p(z | x_<l) + sum_i log p(x_l,i | z, x_<l)].
    """
    total = mx.zeros((w.shape[0],))
    for log_prior, log_rows, x in level_log_laws(model, w):
        k = log_rows.shape[1]
        picked = mx.take_along_axis(log_rows, mx.broadcast_to(x[:, None, :, None], (x.shape[0], k, x.shape[1], 1)), -1)
        total = total + mx.logsumexp(log_prior + picked[..., 0].sum(axis=-1), axis=-1)
    return total


def ncm_level_joint_kl(target: NCM, model: NCM, w: mx.array) -> mx.array:
    """Sum over levels of KL(p_target(z, x_l | x_<l) || q(z, x_l | x_<l)) (B,), exact, at the data's contexts.

    Per level the joint is p(z) prod_i p(x_i | z), so its KL is KL(p(z) || q(z)) + sum_z p(z) sum_i
    KL(p(x_i | z) || q(x_i | z)): level drafting verifies z by its code, then the tokens given it, so this
    aligns the draft's codes with the target's (a data-only draft's codes need not mean the same).
    """
    total = mx.zeros((w.shape[0],))
    for (p_prior, p_rows, _), (q_prior, q_rows, _) in zip(level_log_laws(target, w), level_log_laws(model, w)):
        p_prior, p_rows = mx.stop_gradient(p_prior), mx.stop_gradient(p_rows)
        latent = (mx.exp(p_prior) * (p_prior - q_prior)).sum(axis=-1)
        tokens = (mx.exp(p_rows) * (p_rows - q_rows)).sum(axis=-1).sum(axis=-1)
        total = total + latent + (mx.exp(p_prior) * tokens).sum(axis=-1)
    return total


@dataclass
class NCMLevelTask:
    """The toy level NCM on text windows laid out [prefix | levels]: -log p(levels | prefix) per level token,
    each level's latent marginalised exactly (`ncm_level_log_likelihood`); with `target` set, the exact joint
    KL from the target's level law per level token instead (`ncm_level_joint_kl`)."""

    ids: np.ndarray
    batch: int
    length: int
    """The layout's total length, P + sum n_l."""
    seed: int
    target: NCM | None = None

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.length

    def loss(self, model: nn.Module, step: int) -> mx.array:
        assert isinstance(model, NCM)
        config = model.config
        if config.total_length != self.length:
            raise ValueError(f"model: layout length {config.total_length} differs from the task's {self.length}")
        w = mx.array(windows(self.ids, self.batch, self.length, self.seed, step))
        per_window = (
            -ncm_level_log_likelihood(model, w) if self.target is None else ncm_level_joint_kl(self.target, model, w)
        )
        return per_window.mean() / sum(config.level_sizes)
