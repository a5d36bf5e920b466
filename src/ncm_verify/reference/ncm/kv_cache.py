"""Rewindable autoregressive K/V caches for the reference model in causal mode, mlx-lm style.

A prompt cache is one cache per layer. The model attends to what
``update_and_fetch`` returns; ``state`` is the cache's own storage. Following
mlx-lm's conventions, ``trim(n)`` drops the newest ``n`` positions, clamped to
what the cache holds, and returns the count dropped; a ``RotatingKVCache(max_size,
keep)`` returns its first ``keep`` positions and the newest ``max_size - keep - 1``
it holds with every update. The project's stricter contract (claim C11): a count
that is negative or not an integer raises, and a cache that cannot drop positions
exactly refuses (``is_trimmable()`` False, ``trim`` raises) instead of keeping a
rejected draft's K/V, which would silently change every later token (mlx-lm #1423).
"""

from __future__ import annotations

import numbers

import mlx.core as mx
import numpy as np

from ncm_verify.reference.ncm.model import NCM

__all__ = [
    "check_count",
    "KVCache",
    "RotatingKVCache",
    "make_prompt_cache",
    "can_trim_prompt_cache",
    "trim_prompt_cache",
    "check_tokens",
    "apply_model",
    "apply_prefill",
]


def check_count(name: str, value, *, minimum: int = 0, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum]; a ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name}: expected an integer {bound}, got {value}")
    return int(value)


class KVCache:
    """Every position's K/V so far; trimmable to any earlier length."""

    def __init__(self):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append ``[B, H, S, hd]`` keys and values; return all of them so far."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = mx.concatenate([self.keys, keys], axis=2)
            self.values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2]
        return self.keys, self.values

    @property
    def state(self) -> tuple[mx.array, mx.array] | None:
        """Held keys and values in temporal order (None when nothing was stored)."""
        return None if self.keys is None else (self.keys, self.values)

    def size(self) -> int:
        """Positions held."""
        return self.offset

    def is_trimmable(self) -> bool:
        return True

    def check_trim(self, n) -> int:
        """`n` clamped to the positions held (mlx-lm's convention); a ValueError naming `n` unless an integer >= 0."""
        return min(check_count("n", n), self.offset)

    def trim(self, n) -> int:
        """Drop the newest `n` positions (at most all of them); returns the count dropped."""
        n = self.check_trim(n)
        if n:
            self.offset -= n
            self.keys, self.values = self.keys[:, :, :-n], self.values[:, :, :-n]
        return n


class RotatingKVCache(KVCache):
    """A sliding window of `max_size` positions whose first `keep` positions always stay (mlx-lm's).

    An update of S positions returns the first `keep` positions, the newest
    ``max_size - keep - 1`` held before it and the S new ones (``max_size + S - 1``
    at most), in temporal order, and holds what it returned. Once it has dropped
    a position it can no longer be trimmed: the positions a trimmed window should
    hold again are gone, so ``trim(n > 0)`` refuses.
    """

    def __init__(self, max_size: int, keep: int = 0):
        super().__init__()
        self.max_size = check_count("max_size", max_size, minimum=1)
        self.keep = check_count("keep", keep, maximum=self.max_size - 1)
        self.dropped = 0

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Drop all but the window's `keep` and newest ``max_size - keep - 1`` held positions, then append."""
        held = 0 if self.keys is None else self.keys.shape[2]
        surplus = max(held - (self.max_size - 1), 0)
        if surplus:
            window = slice(self.keep + surplus, None)
            self.keys = mx.concatenate([self.keys[:, :, : self.keep], self.keys[:, :, window]], axis=2)
            self.values = mx.concatenate([self.values[:, :, : self.keep], self.values[:, :, window]], axis=2)
            self.dropped += surplus
        return super().update_and_fetch(keys, values)

    def size(self) -> int:
        return min(self.offset, self.max_size)

    def is_trimmable(self) -> bool:
        """True while no position has been dropped."""
        return self.dropped == 0

    def trim(self, n) -> int:
        """Drop the newest `n` positions; a ValueError naming `n` once the window has wrapped."""
        n = self.check_trim(n)
        if n and not self.is_trimmable():
            raise ValueError(
                f"n: cannot trim {n} positions from a rotating cache that has dropped its oldest "
                f"{self.dropped} (max_size={self.max_size}); its window would miss them"
            )
        return super().trim(n)


def make_prompt_cache(model: NCM, max_kv_size: int | None = None) -> list[KVCache]:
    """One cache per layer: a `KVCache`, or a `RotatingKVCache` of `max_kv_size` positions keeping 4 (mlx-lm's)."""
    if max_kv_size is None:
        return [KVCache() for _ in model.layers]
    return [RotatingKVCache(max_kv_size, keep=min(4, max_kv_size - 1)) for _ in model.layers]


def can_trim_prompt_cache(cache: list[KVCache]) -> bool:
    return all(layer.is_trimmable() for layer in cache)


def trim_prompt_cache(cache: list[KVCache], num_tokens) -> int:
    """Trim every layer by `num_tokens`; returns the number trimmed, 0 when some layer cannot be."""
    num_tokens = check_count("num_tokens", num_tokens)
    if not cache or not can_trim_prompt_cache(cache):
        return 0
    return [layer.trim(num_tokens) for layer in cache][0]


# --- the reference model as an autoregressive language model --------------------


def _require_causal(model: NCM) -> None:
    """Decoding with a cache needs each row to see only earlier rows (the `causal` mask)."""
    mask = np.asarray(model.mask)
    if np.triu(mask, k=1).any():
        raise ValueError(f"model: mask {model.config.mask!r} is not causal; a decode cache needs mask='causal'")


def check_tokens(name: str, tokens, model: NCM) -> mx.array:
    """Token ids ``[B, T]`` (a 1-D prompt becomes ``[1, T]``) in [0, vocab_size)."""
    tokens = mx.array(tokens)
    if tokens.ndim == 1:
        tokens = tokens[None]
    if tokens.ndim != 2 or not mx.issubdtype(tokens.dtype, mx.integer):
        raise ValueError(f"{name}: expected integer token ids [B, T], got {tokens.dtype} {tuple(tokens.shape)}")
    vocab = model.config.vocab_size
    if tokens.size and (mx.min(tokens).item() < 0 or mx.max(tokens).item() >= vocab):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab})")
    return tokens.astype(mx.int32)


def apply_model(model: NCM, tokens, cache: list[KVCache]) -> mx.array:
    """Next-token logits ``[B, T, V]`` for `tokens` after the positions `cache` holds; updates `cache`.

    The language-model head is the token head without a latent. Every layer
    hands its new rows' K/V to its cache and attends to what the cache returns.
    """
    _require_causal(model)
    tokens = check_tokens("tokens", tokens, model)
    start, length = (cache[0].offset if cache else 0), tokens.shape[1]
    if len(cache) != len(model.layers) or any(layer.offset != start or layer.size() != start for layer in cache):
        raise ValueError(f"cache: expected {len(model.layers)} layers each holding all {start} earlier positions")
    if start + length > model.config.total_length:
        raise ValueError(f"tokens: positions up to {start + length} exceed total_length={model.config.total_length}")
    mask = model.mask[start : start + length, : start + length]
    x = model.embed(tokens) + model.positions(mx.arange(start, start + length))
    for block, layer_cache in zip(model.layers, cache):
        x, _ = block(x, mask, kv_cache=layer_cache)
    return model.token_head(model.norm(x))


def apply_prefill(model: NCM, prompt, cache: list[KVCache], prefill_step_size: int = 512) -> mx.array:
    """Process all of `prompt` but its last token into `cache`, in chunks; returns that last token ``[B, 1]``.

    The last token is left for the first decoding step, whose logits give the
    first new token (mlx-lm's ``_prefill``).
    """
    prompt = check_tokens("prompt", prompt, model)
    if prompt.shape[1] < 1:
        raise ValueError("prompt: needs at least one token")
    step = check_count("prefill_step_size", prefill_step_size, minimum=1)
    for begin in range(0, prompt.shape[1] - 1, step):
        apply_model(model, prompt[:, begin : min(begin + step, prompt.shape[1] - 1)], cache)
        mx.eval([layer.state for layer in cache])
    return prompt[:, -1:]
