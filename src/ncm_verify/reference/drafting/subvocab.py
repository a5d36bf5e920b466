"""Drafters that predict over a sub-vocabulary of a large target's, their rows scattered into full-V rows.

A target of V = 49 152 tokens (SmolLM2) makes a drafter's embedding and head the most of its cost and size. These
drafters hold M << V entries: entry 0 stands for every token outside the sub-vocabulary (read as input, never
proposed: its logit is -inf), entries 1..M-1 are the full-V ids in `token_ids`. Their rows, scattered into V
columns with zeros elsewhere, are proper distributions q over the full vocabulary: the kernels' exactness holds
for any q, and a token outside the sub-vocabulary is only never drafted.

`token_ids` is a parameter of the module (saved with its weights, so the shipped file's sha256 covers it); the
full-V -> sub-vocabulary map is derived from it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ncm_verify.reference.drafting.base import DraftBlock, softmax_rows
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter, ConceptDrafterConfig, TokenHistory
from ncm_verify.reference.drafting.models import make_llama
from ncm_verify.reference.ncm.codec import codec_decode
from ncm_verify.reference.ncm.concept_generate import sample_codes

__all__ = ["SubVocab", "SubVocabLlama", "SubVocabConceptDrafter", "check_token_ids"]


def check_token_ids(token_ids: Any, vocab_size: int) -> None:
    """`token_ids` (M,) int: entry 0 a placeholder (-1), then distinct ids in [0, vocab_size)."""
    ids = [int(t) for t in (token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids)]
    if len(ids) < 2 or ids[0] != -1:
        raise ValueError(f"token_ids: expected -1 then at least one id, got {ids[:4]}...")
    rest = ids[1:]
    if len(set(rest)) != len(rest) or min(rest) < 0 or max(rest) >= vocab_size:
        raise ValueError(f"token_ids: entries 1.. must be distinct ids in [0, {vocab_size})")


class SubVocab:
    """The maps between full-V ids and sub-vocabulary entries."""

    def __init__(self, token_ids: mx.array, vocab_size: int):
        check_token_ids(token_ids, vocab_size)
        self.vocab_size, self.size = vocab_size, int(token_ids.shape[0])
        to_sub = mx.zeros((vocab_size,), dtype=mx.int32)
        self.to_sub = to_sub.at[token_ids[1:]].add(mx.arange(1, self.size, dtype=mx.int32))

    def sub(self, tokens: mx.array) -> mx.array:
        """Full-V ids -> entries (0 for a token outside the sub-vocabulary)."""
        return self.to_sub[tokens.astype(mx.int32)]

    def scatter_logits(self, logits: mx.array) -> mx.array:
        """(..., M) logits -> (..., V): entry j's at its id, -inf elsewhere and for entry 0."""
        masked = mx.concatenate([mx.full((*logits.shape[:-1], 1), -mx.inf, dtype=logits.dtype), logits[..., 1:]], -1)
        return mx.take(masked, self.to_sub, axis=-1)


class SubVocabLlama(nn.Module):
    """mlx-lm's llama over M entries, called with and returning full-V ids and logits (an mlx-lm-like model:
    `args`, `layers`, `model(tokens, cache=...)`, so `ARDrafter` and mlx-lm's caches run it)."""

    def __init__(self, args: dict[str, Any], token_ids: mx.array, vocab_size: int):
        super().__init__()
        self.inner = make_llama({**args, "vocab_size": int(token_ids.shape[0])})
        self.token_ids = token_ids.astype(mx.int32)
        self._vocab = SubVocab(self.token_ids, vocab_size)
        self.args = dataclasses.replace(self.inner.args, vocab_size=vocab_size)
        self.freeze(keys=["token_ids"], recurse=False)

    def load_weights(self, file_or_weights: Any, strict: bool = True) -> SubVocabLlama:
        super().load_weights(file_or_weights, strict=strict)
        self._vocab = SubVocab(self.token_ids, self._vocab.vocab_size)  # the map follows the loaded ids
        return self

    @property
    def layers(self) -> list[Any]:
        return self.inner.layers

    @property
    def model(self) -> Any:
        """The inner llama's trunk: `target_features`-style readers find it where mlx-lm puts it."""
        return self.inner.model

    def sub(self, tokens: mx.array) -> mx.array:
        """Full-V ids -> sub-vocabulary entries (0 outside it)."""
        return self._vocab.sub(tokens)

    def sub_logits(self, sub_tokens: mx.array, cache: Any = None) -> mx.array:
        """The inner model's (B, L, M) logits over sub-vocabulary entries (training reads these)."""
        return self.inner(sub_tokens, cache=cache)

    def __call__(self, tokens: mx.array, cache: Any = None) -> mx.array:
        return self._vocab.scatter_logits(self.sub_logits(self._vocab.sub(tokens), cache))


class SubVocabConceptDrafter(nn.Module):
    """The NCM block drafter (`ConceptBlockDrafter`) over M entries, read and proposing full-V ids."""

    def __init__(self, config: ConceptDrafterConfig, token_ids: mx.array, vocab_size: int):
        super().__init__()
        if config.concept.vocab_size != int(token_ids.shape[0]):
            raise ValueError(f"config: vocab_size {config.concept.vocab_size} != {token_ids.shape[0]} entries")
        self.inner = ConceptBlockDrafter(config)
        self.token_ids = token_ids.astype(mx.int32)
        self._vocab = SubVocab(self.token_ids, vocab_size)
        self.config, self.vocab_size = config, vocab_size
        self.reads_features = self.inner.reads_features
        self.num_codes, self.max_block = self.inner.num_codes, self.inner.max_block
        self.freeze(keys=["token_ids"], recurse=False)

    def make_cache(self) -> list[Any]:
        return [TokenHistory()]

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
        """`ConceptBlockDrafter.propose` over the sub-vocabulary: codes level by level at temperature 1, then each
        token from its row q(x_i | z) with entry 0 masked, the rows handed to the loop scattered into full V."""
        if temperature <= 0:
            raise ValueError(f"temperature: {temperature} must be positive (sampled drafting)")
        if not isinstance(cache, list) or len(cache) != 1 or not isinstance(cache[0], TokenHistory):
            raise ValueError("cache: expected this drafter's make_cache() (one TokenHistory)")
        self.inner._check_k(k)
        history = cache[0]
        context = history.append(self._vocab.sub(new_tokens))
        window, kv = self.inner.prefix(context, features)
        batch, levels = window.shape[0], self.inner.ncm.config.layout.num_levels
        code_key, token_key = mx.random.split(key)
        codes: list[mx.array] = []
        for level, level_key in enumerate(mx.random.split(code_key, levels)):
            logits = self.inner.level_logits(window, kv, codes, level)
            codes.append(sample_codes(logits, mx.random.split(level_key, batch)))
        logits = codec_decode(self.inner.ncm, codes)[:, :k].astype(mx.float32) * (1.0 / temperature)
        masked = self._vocab_mask(logits)
        sub_tokens = mx.random.categorical(masked, key=token_key).astype(mx.int32)
        history.append(sub_tokens)  # drafted past the context: the loop trims them away
        rows = softmax_rows(self._vocab.scatter_logits(logits))
        return DraftBlock(tokens=self.token_ids[sub_tokens], probs=rows, codes=mx.concatenate(codes, axis=1))

    def load_weights(self, file_or_weights: Any, strict: bool = True) -> SubVocabConceptDrafter:
        super().load_weights(file_or_weights, strict=strict)
        self._vocab = SubVocab(self.token_ids, self.vocab_size)  # the map follows the loaded ids
        return self

    def block_law(
        self, context: mx.array, k: int, *, temperature: float = 1.0, features: mx.array | None = None
    ) -> tuple[mx.array, mx.array]:
        """log q(z | context) (B, Z) and log q(x_i | z) over the full vocabulary (B, Z, k, V)."""
        log_prior, log_rows = self.sub_law(context, k, temperature=temperature, features=features)
        return log_prior, self._vocab.scatter_logits(log_rows)

    def sub(self, tokens: mx.array) -> mx.array:
        """Full-V ids -> sub-vocabulary entries (0 outside it: an entry never proposed)."""
        return self._vocab.sub(tokens)

    def sub_law(self, context: mx.array, k: int, *, temperature: float = 1.0, features: mx.array | None = None):
        """`block_law` over sub-vocabulary entries (B, Z, k, M): entry 0 (trained as "any other token") masked to
        probability 0 and the rest renormalised, so the rows are what the drafter proposes from."""
        log_prior, log_rows = self.inner.block_law(
            self._vocab.sub(context), k, temperature=temperature, features=features
        )
        # the rows do not depend on the context: masked once, broadcast over the batch as block_law gives them
        rows = nn.log_softmax(self._vocab_mask(log_rows[:1]), axis=-1)
        return log_prior, mx.broadcast_to(rows, log_rows.shape)

    def _vocab_mask(self, log_rows: mx.array) -> mx.array:
        return mx.concatenate([mx.full((*log_rows.shape[:-1], 1), -mx.inf), log_rows[..., 1:]], axis=-1)
