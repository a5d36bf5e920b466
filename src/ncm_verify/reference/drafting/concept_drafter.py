"""The NCM block drafter built on the source's NCM (`reference/ncm`): codec and generator.

The drafter holds a `ConceptModel` whose ``sequence_length`` is its block. Its generator's prefix is the
context, the last `context` tokens read (bidirectional within itself): the prefix K/V are computed once per
proposal (PC-1, `prefix_kv`) and served to every level's forward (`apply_level`). Codes z are sampled level by
level, coarse to fine, each level's positions in parallel and always at temperature 1 (the NCM's own sampler,
`sample_codes`); the codec's decode (`codec_decode`) then gives the factorised rows q(x_i | z) of the block's
positions, and the first k are proposed, each token drawn from its row at the loop's temperature. The rows depend
on z alone: the context enters through q(z | context), the generator's law. Small codebooks keep z enumerable
(`num_codes` combinations), so the exact block law, sum_z q(z | context) prod_i q(x_i | z), is computed by
enumeration (`block_law`, `block_log_likelihood`): what C10 and training need.

A feature-conditioned drafter (``feature_dim`` > 0) reads the target's hidden state at the block's start as one
extra prefix column after the context tokens: a projection of the feature, through each generator layer's own
input norm, key and value maps, key norm and rotary position (the target-feature K/V injection of DFlash). The
token columns do not see it; every level row does.

The drafter's state is its context, so its cache (`TokenHistory`) holds token ids: what it has read, and the block
it drafted after them, which the loop trims away (mlx-lm's `trim_prompt_cache` rolls it back like a `KVCache`).
"""

from __future__ import annotations

import dataclasses
import math
from itertools import product
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ncm_verify.reference.drafting.base import DraftBlock
from ncm_verify.reference.ncm.codec import codec_decode, ids_within
from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.reference.ncm.concept_generate import sample_codes, sampling_law
from ncm_verify.reference.ncm.concept_model import make_concept_model
from ncm_verify.reference.ncm.generator import KV, apply_level, apply_rope, prefix_kv

__all__ = ["ConceptDrafterConfig", "ConceptBlockDrafter", "TokenHistory"]


class TokenHistory:
    """A drafter's cache of the token ids it has read (B, n), trimmable as mlx-lm's caches are."""

    def __init__(self) -> None:
        self.tokens: mx.array | None = None

    @property
    def offset(self) -> int:
        return 0 if self.tokens is None else int(self.tokens.shape[1])

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self.offset, max(int(n), 0))
        if self.tokens is not None:
            self.tokens = self.tokens[:, : self.offset - n]
        return n

    def append(self, tokens: mx.array) -> mx.array:
        """Read `tokens` (B, n) after the history; returns the whole history."""
        tokens = tokens.astype(mx.int32)
        if self.tokens is not None and self.tokens.shape[0] != tokens.shape[0]:
            raise ValueError(f"new_tokens: batch {tokens.shape[0]}, the cache holds {self.tokens.shape[0]} rows")
        self.tokens = tokens if self.tokens is None else mx.concatenate([self.tokens, tokens], axis=1)
        return self.tokens


@dataclasses.dataclass(frozen=True)
class ConceptDrafterConfig:
    """The NCM's config (its ``sequence_length`` is the block) and the drafter's own sizes."""

    concept: ConceptConfig
    context: int = 32
    """Tokens of context the generator's prefix holds (the last ones read)."""
    feature_dim: int = 0
    """The target's hidden size when the drafter reads its state at the block's start (0: none)."""

    def __post_init__(self) -> None:
        for name in ("context", "feature_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "context" else 0):
                raise ValueError(f"{name}: expected an integer >= {1 if name == 'context' else 0}, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        """The ConceptConfig's fields and the drafter's, flat (a record's config)."""
        return {**dataclasses.asdict(self.concept), "context": self.context, "feature_dim": self.feature_dim}

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> ConceptDrafterConfig:
        fields = dict(fields)
        context, feature_dim = fields.pop("context", 32), fields.pop("feature_dim", 0)
        return cls(ConceptConfig(**fields), context, feature_dim)


def _check_tokens(name: str, tokens: Any, vocab: int, minimum: int = 1) -> None:
    if not isinstance(tokens, mx.array) or tokens.ndim != 2 or not mx.issubdtype(tokens.dtype, mx.integer):
        raise ValueError(f"{name}: expected integer token ids (B, n), got {getattr(tokens, 'shape', tokens)!r}")
    if tokens.shape[0] < 1 or tokens.shape[1] < minimum:
        raise ValueError(f"{name}: expected at least one row and {minimum} positions, got {tuple(tokens.shape)}")
    if tokens.size and not ids_within(tokens, vocab):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab})")


class ConceptBlockDrafter(nn.Module):
    """A `TextDrafter` that is the source's NCM: codes z from the context, then k tokens factorised given z.

    `propose` returns the rows q(x_i | z) the tokens were drawn from and the codes z, ``(B, sum of level
    lengths)``, level 0's positions first. `all_codes`, `block_law`, `block_log_likelihood` and `marginal_probs`
    give its exact law, z enumerated.
    """

    def __init__(self, config: ConceptDrafterConfig):
        super().__init__()
        self.config = config
        concept = config.concept
        self.ncm = make_concept_model(concept)
        self.vocab_size = concept.vocab_size
        self.max_block = concept.sequence_length
        self.reads_features = bool(config.feature_dim)
        self.code_positions = sum(concept.level_lengths)
        self.num_codes = math.prod(size**n for size, n in zip(concept.codebook_sizes, concept.level_lengths))
        if config.feature_dim:
            self.feature_in = nn.Linear(config.feature_dim, concept.d_model, bias=False)
            key = mx.random.key(concept.seed + 104_729)
            shape = self.feature_in.weight.shape
            self.feature_in.weight = mx.random.normal(shape, key=key) / math.sqrt(config.feature_dim)
            mx.eval(self.feature_in.weight)

    def make_cache(self) -> list[Any]:
        return [TokenHistory()]

    # -- the pieces -------------------------------------------------------------------------------

    def _check_features(self, features: mx.array | None, batch: int) -> None:
        if not self.reads_features:
            return
        if features is None:
            raise ValueError("features: this drafter reads the target's hidden state at the block's start; got None")
        if tuple(features.shape) != (batch, self.config.feature_dim):
            raise ValueError(f"features: expected ({batch}, {self.config.feature_dim}), got {tuple(features.shape)}")

    def prefix(self, context: mx.array, features: mx.array | None = None) -> tuple[mx.array, list[KV]]:
        """The generator's prefix for `context` (B, T) and its per-layer K/V (PC-1: once per proposal).

        The prefix is the last `config.context` tokens; a feature reader's has one more column, the feature's,
        whose token id is a placeholder `apply_level` never reads (it is handed the column's K/V)."""
        _check_tokens("context", context, self.vocab_size)
        self._check_features(features, context.shape[0])
        window = context[:, -self.config.context :].astype(mx.int32)
        kv = prefix_kv(self.ncm, window)
        if not self.reads_features:
            return window, kv
        assert features is not None
        column = self.feature_in(features.astype(mx.float32))[:, None, :]
        position = mx.array([window.shape[1]])
        base = self.ncm.config.rope_base
        joined = []
        for layer, (k, v) in zip(self.ncm.generator.layers, kv):
            hidden = layer.norm1(column)
            fk = apply_rope(layer.key_norm(layer.heads(layer.key(hidden))), position, base)
            fv = layer.heads(layer.value(hidden))
            joined.append((mx.concatenate([k, fk], axis=2), mx.concatenate([v, fv], axis=2)))
        placeholder = mx.zeros((window.shape[0], 1), dtype=mx.int32)
        return mx.concatenate([window, placeholder], axis=1), joined

    def level_logits(self, prefix: mx.array, kv: list[KV], codes: list[mx.array], level: int) -> mx.array:
        """Level `level`'s code logits (B, n_l, K_l) given the coarser levels' `codes`, the prefix K/V served."""
        return apply_level(self.ncm, prefix, codes, level, prefix_kv=kv)[0]

    def split_codes(self, codes: mx.array) -> list[mx.array]:
        """Codes (B, C) as the NCM's list of levels, level l (B, n_l)."""
        out, begin = [], 0
        for n in self.ncm.config.level_lengths:
            out.append(codes[:, begin : begin + n])
            begin += n
        return out

    def all_codes(self) -> mx.array:
        """Every z, (num_codes, C), in lexicographic order (level 0's positions first)."""
        concept = self.ncm.config
        ranges = [range(size) for size, n in zip(concept.codebook_sizes, concept.level_lengths) for _ in range(n)]
        return mx.array(list(product(*ranges)), dtype=mx.int32)

    def code_rows(self, codes: mx.array, k: int, temperature: float = 1.0) -> mx.array:
        """The rows q(x_i | z) (N, k, V) of the block's first k positions under codes (N, C), at `temperature`."""
        return sampling_law(codec_decode(self.ncm, self.split_codes(codes))[:, :k], temperature)

    def _check_k(self, k: Any) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.max_block:
            raise ValueError(f"k: {k!r} is outside 1..{self.max_block}, this drafter's block")

    def _check_codes(self, codes: Any, batch: int) -> None:
        shape = (batch, self.code_positions)
        if not isinstance(codes, mx.array) or tuple(codes.shape) != shape or not mx.issubdtype(codes.dtype, mx.integer):
            raise ValueError(f"codes: expected integer code ids {shape}, got {getattr(codes, 'shape', codes)!r}")
        concept = self.ncm.config
        for level, level_codes in enumerate(self.split_codes(codes)):
            if not ids_within(level_codes, concept.codebook_sizes[level]):
                raise ValueError(f"codes: level {level}'s ids must lie in [0, {concept.codebook_sizes[level]})")

    # -- the exact law ----------------------------------------------------------------------------

    def block_law(
        self, context: mx.array, k: int, *, temperature: float = 1.0, features: mx.array | None = None
    ) -> tuple[mx.array, mx.array]:
        """For every z of `all_codes`: log q(z | context) (B, num_codes) and the log rows log q(x_i | z) at
        `temperature` (B, num_codes, k, V), broadcast over the batch (they do not depend on the context)."""
        self._check_k(k)
        window, kv = self.prefix(context, features)
        batch = window.shape[0]
        concept = self.ncm.config
        codes = self.all_codes()
        log_prior = mx.zeros((batch, self.num_codes))
        begin = 0
        for level, n in enumerate(concept.level_lengths):
            # every combination of the coarser levels' codes, in all_codes' order: z's coarser part is z // later
            later = math.prod(size**m for size, m in zip(concept.codebook_sizes[level:], concept.level_lengths[level:]))
            coarse = codes[::later, :begin]
            combos = coarse.shape[0]
            tiled = [(mx.repeat(k_, combos, axis=0), mx.repeat(v_, combos, axis=0)) for k_, v_ in kv]
            coarse_codes = self.split_codes(mx.tile(coarse, (batch, 1)))[:level]
            logits = self.level_logits(mx.repeat(window, combos, axis=0), tiled, coarse_codes, level)
            logp = nn.log_softmax(logits.astype(mx.float32), axis=-1).reshape(batch, combos, n, -1)
            parent = mx.arange(self.num_codes) // later
            own = codes[:, begin : begin + n]  # (Z, n)
            picked = logp[:, parent[:, None], mx.arange(n)[None, :], own]  # (B, Z, n)
            log_prior = log_prior + picked.sum(axis=-1)
            begin += n
        logits = codec_decode(self.ncm, self.split_codes(codes))[:, :k].astype(mx.float32)
        log_rows = nn.log_softmax(logits / temperature, axis=-1) if temperature else mx.log(sampling_law(logits, 0))
        return log_prior, mx.broadcast_to(log_rows[None], (batch, *log_rows.shape))

    def block_log_likelihood(self, context: mx.array, blocks: mx.array, *, features: mx.array | None = None):
        """Exact log q(x) = log sum_z q(z | context) prod_i q(x_i | z) (B,) of `blocks` (B, k), z enumerated."""
        log_prior, log_rows = self.block_law(context, blocks.shape[1], features=features)
        index = mx.broadcast_to(blocks[:, None, :, None], (*log_rows.shape[:-1], 1))
        per_z = mx.take_along_axis(log_rows, index, axis=-1)[..., 0].sum(axis=-1)
        return mx.logsumexp(log_prior + per_z, axis=-1)

    def marginal_probs(self, context: mx.array, k: int, *, temperature: float = 1.0, features=None) -> mx.array:
        """The latent marginal sum_z q(z | context) q(x_i | z) (B, k, V): never what a token is drawn from."""
        log_prior, log_rows = self.block_law(context, k, temperature=temperature, features=features)
        return mx.sum(mx.exp(log_prior)[..., None, None] * mx.exp(log_rows), axis=1)

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
        self._check_k(k)
        _check_tokens("new_tokens", new_tokens, self.vocab_size, minimum=0)
        if not isinstance(cache, list) or len(cache) != 1 or not isinstance(cache[0], TokenHistory):
            raise ValueError("cache: expected this drafter's make_cache() (one TokenHistory)")
        history = cache[0]
        context = history.append(new_tokens)
        window, kv = self.prefix(context, features)
        batch, levels = window.shape[0], self.ncm.config.layout.num_levels
        code_key, token_key = mx.random.split(key)
        codes: list[mx.array] = []
        for level, level_key in enumerate(mx.random.split(code_key, levels)):
            # codes at temperature 1 always: only the token rows are tempered
            codes.append(sample_codes(self.level_logits(window, kv, codes, level), mx.random.split(level_key, batch)))
        token_logits = codec_decode(self.ncm, codes)[:, :k]
        rows = sampling_law(token_logits, temperature)
        tokens = sample_codes(token_logits, mx.random.split(token_key, batch), temperature)
        history.append(tokens)  # drafted past the context: the loop trims them away
        return DraftBlock(tokens=tokens, probs=rows, codes=mx.concatenate(codes, axis=1))

    def block_probs(
        self,
        context: mx.array,
        tokens: mx.array,
        codes: mx.array | None,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> mx.array:
        _check_tokens("context", context, self.vocab_size)
        _check_tokens("tokens", tokens, self.vocab_size)
        self._check_k(tokens.shape[1])
        self._check_codes(codes, context.shape[0])
        self._check_features(features, context.shape[0])
        assert codes is not None
        return self.code_rows(codes, tokens.shape[1], temperature)
