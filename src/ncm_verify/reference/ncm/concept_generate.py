"""Generation with the source's NCM, level by level, then the codec's decode; uncached, PC-1 and
the earlier-levels extension; the seeded sampler.

Sampling (`sample_codes`): greedy (first maximum) at temperature 0; otherwise keep the `top_k`
largest logits (exactly k, ties to the lower index), divide by the temperature, and take the
Gumbel-max of each position with the row's own key. Every batch row has its own key
(``keys [B, 2]``, `row_keys` makes them): level l's noise comes from the l-th of ``L + 1`` keys
split from it, the tokens' from the last, so a row's output does not depend on its batch.

- `generate_uncached`: every level's forward reruns the prefix.
- `generate_cached` (PC-1, the source's protocol): each layer's prefix K (after QK-norm and
  rotation) and V computed once per generation and served to every level; with a `PrefixCache`,
  across requests only on an exact full-prefix key (`concept_cache_keys`: the tokens, the
  generator's and the codec's fingerprints, mask reading, start position, dtype, namespace).
- `generate_cached_levels`: the named extension, PC-1 plus each level's K/V kept for the later
  levels (under ``block_diagonal_upto``; under ``block_diagonal_own`` it is PC-1).

Each returns a `ConceptGeneration`: ``codes`` (level l ``[B, n_l]``), ``logits`` (level l
``[B, n_l, K_l]``, what was sampled from), ``token_logits`` ``[B, T, V]`` and ``tokens`` ``[B, T]``.
"""

from __future__ import annotations

import dataclasses
import math

import mlx.core as mx
import numpy as np

from ncm_verify.reference.ncm.cache import CacheKey, PrefixCache
from ncm_verify.reference.ncm.codec import codec_decode
from ncm_verify.reference.ncm.concept_model import ConceptModel, codec_fingerprint, generator_fingerprint
from ncm_verify.reference.ncm.generator import KV, apply_level, check_prefix, prefix_kv

__all__ = [
    "ConceptGeneration",
    "row_keys",
    "top_k_filter",
    "sampling_law",
    "sample_codes",
    "concept_cache_keys",
    "generate_uncached_concepts",
    "generate_cached_concepts",
    "generate_cached_levels",
]


@dataclasses.dataclass
class ConceptGeneration:
    codes: list[mx.array]
    logits: list[mx.array]
    token_logits: mx.array
    tokens: mx.array


def row_keys(seed: int, batch: int) -> mx.array:
    """``[batch, 2]`` keys, row b's a function of (seed, b) alone."""
    return mx.stack([mx.random.key(seed * 1_000_003 + b) for b in range(batch)])


def _check_sampling(temperature, top_k, size: int) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise ValueError(f"temperature: expected a finite number >= 0, got {temperature!r}")
    if temperature < 0:
        raise ValueError(f"temperature: expected a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k):
        raise ValueError(f"top_k: expected None or an integer >= 1, got {top_k!r}")


def top_k_filter(logits: mx.array, top_k: int | None) -> mx.array:
    """`logits` with all but the `top_k` largest of each row at -inf (exactly k; ties to the lower index)."""
    if top_k is None or top_k >= logits.shape[-1]:
        return logits
    order = mx.argsort(-logits.astype(mx.float32), axis=-1)  # stable: equal logits keep index order
    ranks = mx.argsort(order, axis=-1)
    return mx.where(ranks < top_k, logits, mx.array(-mx.inf, dtype=logits.dtype))


def _threshold_top_k(logits: mx.array, top_k: int | None) -> mx.array:
    # keeps every logit tied with the k-th largest
    if top_k is None or top_k >= logits.shape[-1]:
        return logits
    kth = mx.sort(logits, axis=-1)[..., -top_k][..., None]
    return mx.where(logits >= kth, logits, mx.array(-mx.inf, dtype=logits.dtype))


def sampling_law(logits: mx.array, temperature: float, top_k: int | None = None) -> mx.array:
    """The float32 probabilities `sample_codes` draws from (one-hot on the first maximum at 0)."""
    _check_sampling(temperature, top_k, logits.shape[-1])
    logits = logits.astype(mx.float32)
    if temperature == 0:
        return (mx.arange(logits.shape[-1]) == mx.argmax(logits, axis=-1)[..., None]).astype(mx.float32)
    return mx.softmax(top_k_filter(logits, top_k) / temperature, axis=-1)


def _gumbel(keys: mx.array, shape: tuple[int, ...]) -> mx.array:
    return mx.stack([mx.random.gumbel(shape, key=keys[b]) for b in range(keys.shape[0])])


def _check_keys(keys, batch: int) -> None:
    if not isinstance(keys, mx.array) or keys.shape != (batch, 2) or keys.dtype != mx.uint32:
        raise ValueError(f"keys: expected uint32 [{batch}, 2] (row_keys), got {getattr(keys, 'shape', keys)!r}")


def sample_codes(logits: mx.array, keys: mx.array, temperature: float = 1.0, top_k: int | None = None, *, _after=False):
    """Codes ``[B, n]`` int32 from logits ``[B, n, K]``, one key per row (see the module docstring)."""
    _check_sampling(temperature, top_k, logits.shape[-1])
    _check_keys(keys, logits.shape[0])
    logits = logits.astype(mx.float32)
    if temperature == 0:
        return mx.argmax(logits, axis=-1).astype(mx.int32)
    scores = _threshold_top_k(logits / temperature, top_k) if _after else top_k_filter(logits, top_k) / temperature
    return mx.argmax(scores + _gumbel(keys, logits.shape[1:]), axis=-1).astype(mx.int32)


def _split_keys(keys: mx.array, count: int) -> list[mx.array]:
    per_row = [mx.random.split(keys[b], count) for b in range(keys.shape[0])]
    return [mx.stack([row[i] for row in per_row]) for i in range(count)]


def _generate(model: ConceptModel, prefix, keys, temperature, top_k, start, serve, cached_path: bool):
    """Level by level; `serve(level, codes)` returns the level's logits."""
    config = model.config
    check_prefix(model, prefix)
    _check_sampling(temperature, top_k, 0)
    _check_keys(keys, prefix.shape[0])
    level_keys = _split_keys(keys, config.layout.num_levels + 1)
    after = cached_path and model._seams.cached_top_k_after_temperature
    codes: list[mx.array] = []
    logits: list[mx.array] = []
    for level in range(config.layout.num_levels):
        level_logits = serve(level, codes)
        logits.append(level_logits)
        codes.append(sample_codes(level_logits, level_keys[level], temperature, top_k, _after=after))
        mx.eval(codes[-1])
    token_logits = codec_decode(model, codes)
    tokens = sample_codes(token_logits, level_keys[-1], temperature, top_k, _after=after)
    mx.eval(tokens, token_logits, *logits)
    return ConceptGeneration(codes, logits, token_logits, tokens)


def generate_uncached_concepts(model, prefix, keys, *, temperature=1.0, top_k=None, start=0) -> ConceptGeneration:
    """Every level's forward recomputes the prefix."""

    def serve(level, codes):
        return apply_level(model, prefix, codes, level, start=start)[0]

    return _generate(model, prefix, keys, temperature, top_k, start, serve, cached_path=False)


def concept_cache_keys(model: ConceptModel, prefix, namespace: str = "", start: int = 0) -> list[CacheKey]:
    """One exact key per prefix row: tokens, both stages' fingerprints, mask reading, start, dtype."""
    config = model.config
    identity = generator_fingerprint(model)
    if model._seams.cache_key_with_codec:
        identity += "+" + codec_fingerprint(model)
    rows = [tuple(row)[: model._seams.cache_key_max_tokens] for row in np.asarray(prefix).tolist()]
    return [CacheKey(row, identity, f"{config.mask}|start={start}", config.dtype, namespace) for row in rows]


def _cached_prefix_kv(model, prefix, start, cache: PrefixCache | None, namespace: str) -> list[KV]:
    """Prefix K/V for every row: from `cache` on an exact key, computed (and stored) otherwise."""
    if cache is None:
        return prefix_kv(model, prefix, start)
    keys = concept_cache_keys(model, prefix, namespace, start)
    found = [cache.lookup(key) for key in keys]
    encoded = [key.encode() for key in keys]
    # one computation per distinct missing prefix: repeated rows of a request share it
    missing = list({encoded[b]: b for b in reversed(range(len(keys))) if found[b] is None}.values())[::-1]
    computed = prefix_kv(model, prefix[mx.array(missing)], start) if missing else []
    mx.eval(computed)
    fresh = {encoded[b]: tuple((k[i], v[i]) for k, v in computed) for i, b in enumerate(missing)}
    for b in missing:
        cache.store(keys[b], fresh[encoded[b]])
    entries = [fresh[encoded[b]] if entry is None else entry for b, entry in enumerate(found)]
    return [
        (mx.stack([entry[i][0] for entry in entries]), mx.stack([entry[i][1] for entry in entries]))
        for i in range(model.config.num_layers)
    ]


def generate_cached_concepts(
    model, prefix, keys, *, temperature=1.0, top_k=None, start=0, cache: PrefixCache | None = None, namespace=""
) -> ConceptGeneration:
    """PC-1: the prefix's K/V once per generation (or from `cache`), served to every level."""
    served: list[list[KV]] = []

    def serve(level, codes):
        if not served:
            served.append(_cached_prefix_kv(model, prefix, start, cache, namespace))
        return apply_level(model, prefix, codes, level, prefix_kv=served[0], start=start)[0]

    return _generate(model, prefix, keys, temperature, top_k, start, serve, cached_path=True)


def generate_cached_levels(
    model, prefix, keys, *, temperature=1.0, top_k=None, start=0, cache: PrefixCache | None = None, namespace=""
) -> ConceptGeneration:
    """The extension: PC-1, and each level's K/V kept for the levels after it."""
    served: list[list[KV]] = []
    level_kv: dict[int, list[KV]] = {}

    def serve(level, codes):
        if not served:
            served.append(_cached_prefix_kv(model, prefix, start, cache, namespace))
        logits, rows_kv = apply_level(model, prefix, codes, level, prefix_kv=served[0], level_kv=level_kv, start=start)
        level_kv.update(rows_kv)
        return logits

    return _generate(model, prefix, keys, temperature, top_k, start, serve, cached_path=True)
