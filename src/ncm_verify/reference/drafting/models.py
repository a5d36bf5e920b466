"""The trained text models of issue 24: the AR target, an AR draft and the NCM block drafter.

The target and the AR draft are mlx-lm's own `llama.Model`, so mlx-lm's `generate_step`,
`speculative_generate_step` and prompt caches run them unchanged. The NCM block drafter reads the context
with an mlx-lm `LlamaModel` (its cache is mlx-lm's `KVCache`), samples residual codes z = (z_1, ..., z_C)
coarse to fine, each from a prior given the context and the coarser codes, then decodes its whole block in
one pass, factorised given them: q(x | z) = prod_i q(x_i | z, context). Its latent marginal is never used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import product
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ncm_verify.reference.drafting.base import DraftBlock

__all__ = [
    "ARDrafter",
    "NCMDrafterConfig",
    "NCMBlockDrafter",
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


def rows_at_temperature(logits: mx.array, temperature: float) -> mx.array:
    """float32 rows a token is drawn from at `temperature` (0: the one-hot row of the argmax)."""
    logits = logits.astype(mx.float32)
    if temperature == 0:
        return (mx.arange(logits.shape[-1]) == mx.argmax(logits, axis=-1, keepdims=True)).astype(mx.float32)
    return mx.softmax(logits / temperature, axis=-1)


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


@dataclass(frozen=True)
class NCMDrafterConfig:
    """Shape of an NCM block drafter: its context encoder (a llama body), codes and factorised decoder."""

    vocab_size: int
    hidden: int = 64
    layers: int = 2
    intermediate: int = 128
    heads: int = 4
    codebook: int = 8
    """Entries per code level."""
    levels: int = 2
    """Residual code levels C: z = (z_1, ..., z_C), coarse to fine."""
    max_block: int = 8
    decoder_hidden: int = 192
    feature_dim: int = 0
    """The target's hidden size when the drafter reads the target's state at the block's start (0: none)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def encoder_args(self) -> llama.ModelArgs:
        return llama_args(self.vocab_size, self.hidden, self.layers, self.intermediate, self.heads)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NCMBlockDrafter(nn.Module):
    """Codes z from the context, then k tokens factorised given them, in one decoder pass.

    `propose` returns the rows q(x_i | z, context) the tokens were drawn from and the codes z.
    """

    def __init__(self, config: NCMDrafterConfig):
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        self.max_block = config.max_block
        d = config.hidden
        self.encoder = llama.LlamaModel(config.encoder_args())
        self.code_embed = [nn.Embedding(config.codebook, d) for _ in range(config.levels)]
        self.code_prior = [nn.Linear(d, config.codebook, bias=False) for _ in range(config.levels)]
        self.position = nn.Embedding(config.max_block, d)
        self.decoder_norm = nn.RMSNorm(d)
        self.decoder_up = nn.Linear(d, config.decoder_hidden, bias=False)
        self.decoder_down = nn.Linear(config.decoder_hidden, d, bias=False)
        self.out_norm = nn.RMSNorm(d)
        if config.feature_dim:
            self.feature_proj = nn.Linear(config.feature_dim, d, bias=False)

    @property
    def reads_features(self) -> bool:
        return bool(self.config.feature_dim)

    # -- the pieces -------------------------------------------------------------------------------

    def make_cache(self) -> list[Any]:
        return [KVCache() for _ in self.encoder.layers]

    def context_state(self, tokens: mx.array, cache: list[Any] | None = None, features: mx.array | None = None):
        """The drafter's state h (B, n, D) at every position of `tokens` (features (B, n, F) if it reads them)."""
        h = self.encoder(tokens, cache)
        return self._with_features(h, features)

    def _with_features(self, h: mx.array, features: mx.array | None) -> mx.array:
        if self.config.feature_dim:
            if features is None:
                raise ValueError("features: this drafter reads the target's hidden state; pass features=")
            h = h + self.feature_proj(features.astype(h.dtype))
        return h

    def code_logprobs(self, h: mx.array, codes: mx.array) -> tuple[mx.array, mx.array]:
        """log q(z | h) of `codes` (..., C) under state h (..., D), and the code state u."""
        total = mx.zeros(codes.shape[:-1])
        u = h
        for level in range(self.config.levels):
            logp = nn.log_softmax(self.code_prior[level](u).astype(mx.float32), axis=-1)
            total = total + mx.take_along_axis(logp, codes[..., level : level + 1], axis=-1)[..., 0]
            u = u + self.code_embed[level](codes[..., level])
        return total, u

    def decode_logits(self, u: mx.array, k: int) -> mx.array:
        """Logits (..., k, V) of the factorised rows q(x_i | z, context) from code state u (..., D)."""
        r = u[..., None, :] + self.position.weight[:k]
        r = r + self.decoder_down(nn.silu(self.decoder_up(self.decoder_norm(r))))
        return self.encoder.embed_tokens.as_linear(self.out_norm(r))

    def all_codes(self) -> mx.array:
        """Every z, (K^C, C), in lexicographic order."""
        return mx.array(list(product(range(self.config.codebook), repeat=self.config.levels)), dtype=mx.int32)

    def block_law(self, h: mx.array, k: int) -> tuple[mx.array, mx.array]:
        """For every z: log q(z | h) (..., K^C) and the log rows log q(x_i | z) (..., K^C, k, V)."""
        codes = self.all_codes()
        hz = mx.broadcast_to(h[..., None, :], (*h.shape[:-1], codes.shape[0], h.shape[-1]))
        log_prior, u = self.code_logprobs(hz, mx.broadcast_to(codes, (*h.shape[:-1], *codes.shape)))
        return log_prior, nn.log_softmax(self.decode_logits(u, k).astype(mx.float32), axis=-1)

    def block_log_likelihood(self, h: mx.array, blocks: mx.array) -> mx.array:
        """Exact log q(x) = log sum_z q(z | h) prod_i q(x_i | z) of `blocks` (..., k), z enumerated."""
        log_prior, log_rows = self.block_law(h, blocks.shape[-1])
        index = mx.broadcast_to(blocks[..., None, :, None], (*log_rows.shape[:-1], 1))
        per_z = mx.take_along_axis(log_rows, index, axis=-1)[..., 0].sum(axis=-1)
        return mx.logsumexp(log_prior + per_z, axis=-1)

    # -- TextDrafter ------------------------------------------------------------------------------

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
        if not 1 <= k <= self.max_block:
            raise ValueError(f"k: {k} is outside 1..{self.max_block}, this drafter's block")
        h = self.encoder(new_tokens, cache)[:, -1, :]
        h = self._with_features(h, features)
        code_key, token_key = mx.random.split(key)
        codes = []
        u = h
        for level, subkey in enumerate(mx.random.split(code_key, self.config.levels)):
            # Codes are drawn at temperature 1 always: only the token rows are tempered.
            prior = mx.softmax(self.code_prior[level](u).astype(mx.float32), axis=-1)
            z = _draw(prior, subkey)
            codes.append(z)
            u = u + self.code_embed[level](z)
        rows = rows_at_temperature(self.decode_logits(u, k), temperature)
        tokens = _draw(rows, token_key)
        return DraftBlock(tokens=tokens, probs=rows, codes=mx.stack(codes, axis=1))

    def block_probs(
        self,
        context: mx.array,
        tokens: mx.array,
        codes: mx.array | None,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> mx.array:
        if codes is None or tuple(codes.shape) != (context.shape[0], self.config.levels):
            shape = None if codes is None else tuple(codes.shape)
            raise ValueError(f"codes: expected ({context.shape[0]}, {self.config.levels}) code ids, got {shape}")
        h = self._with_features(self.encoder(context)[:, -1, :], features)
        _, u = self.code_logprobs(h, codes)
        return rows_at_temperature(self.decode_logits(u, tokens.shape[1]), temperature)
