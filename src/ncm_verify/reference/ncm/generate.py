"""Level-by-level generation, uncached and with prefix (and earlier-level) K/V reuse.

Both paths sample with explicit keys through the same Gumbel-max draws, so the
same key gives the same tokens whenever the logits agree.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx

from ncm_verify.reference.ncm.cache import PrefixCache, require_reusable
from ncm_verify.reference.ncm.model import KV, NCM
from ncm_verify.reference.speculative import per_sequence_keys

__all__ = [
    "Generation",
    "check_generation_inputs",
    "generate_uncached",
    "prefix_kv",
    "generate_cached",
]


@dataclasses.dataclass
class Generation:
    """What one generation produced and what it cost.

    Attributes:
        tokens: per level, ``[B, n_l]`` int32.
        latents: ``[B, L]`` int32 concept codes.
        latent_logits: per level, ``[B, K]``.
        token_logits: per level, ``[B, n_l, V]`` given the sampled latent.
        positions: per layer, positions processed (batch x length, summed).
        margin: smallest gap between the best and second-best Gumbel-perturbed
            logit of any draw; a draw flips only if the logits move by more.
        cache_hits: prefix rows served from the cache.
    """

    tokens: list[mx.array]
    latents: mx.array
    latent_logits: list[mx.array]
    token_logits: list[mx.array]
    positions: list[int]
    margin: float
    cache_hits: int = 0


def check_generation_inputs(model: NCM, prefix, key) -> tuple[mx.array, mx.array]:
    """The prefix as int32 ``[B, P]`` and one key per row ``[B, 2]``.

    A single ``mx.random.key`` is split into one key per row, as the speculative
    kernels do (`per_sequence_keys`), so identical prefixes in one batch are sampled
    independently; per-row keys ``[B, 2]`` are used as given.
    """
    config = model.config
    prefix = mx.array(prefix)
    if not mx.issubdtype(prefix.dtype, mx.integer):
        raise ValueError(f"prefix: token ids must be integers, got dtype {prefix.dtype}")
    if prefix.ndim != 2 or prefix.shape[1] != config.prefix_length or prefix.shape[0] < 1:
        raise ValueError(f"prefix: expected shape [B >= 1, {config.prefix_length}], got {tuple(prefix.shape)}")
    low, high = mx.stack([mx.min(prefix), mx.max(prefix)]).tolist()  # one sync
    if low < 0 or high >= config.vocab_size:
        raise ValueError(f"prefix: token ids must lie in [0, {config.vocab_size})")
    return prefix.astype(mx.int32), per_sequence_keys(key, prefix.shape[0])


def _sample(logits: mx.array, keys: mx.array) -> tuple[mx.array, mx.array]:
    """Gumbel-max draws in float32 with one key per row; returns choices and smallest margin."""
    # vmapped over the keys: the same bits as one draw per row, in one op instead of B
    noise = mx.vmap(lambda key: mx.random.gumbel(logits.shape[1:], key=key))(keys)
    perturbed = logits.astype(mx.float32) + noise
    if perturbed.shape[-1] < 2:
        return mx.zeros(perturbed.shape[:-1], dtype=mx.int32), mx.array(mx.inf)
    top = mx.sort(perturbed, axis=-1)
    return mx.argmax(perturbed, axis=-1).astype(mx.int32), mx.min(top[..., -1] - top[..., -2])


def _level_keys(keys: mx.array, num_levels: int) -> mx.array:
    """``[B, L, 2, 2]``: per row and level, a latent key and a token key (independent of B)."""
    return mx.vmap(lambda key: mx.random.split(key, 2 * num_levels))(keys).reshape(keys.shape[0], num_levels, 2, 2)


def _decode_level(model: NCM, slots: mx.array, keys: mx.array):
    """Sample the level's latent, then its slots independently given the latent."""
    latent_logits = model.latent_logits(slots)
    latent, latent_margin = _sample(latent_logits, keys[:, 0])
    token_logits = model.token_logits(slots, latent)
    tokens, token_margin = _sample(token_logits, keys[:, 1])
    return latent, tokens, latent_logits, token_logits, mx.minimum(latent_margin, token_margin)


def _finish(model: NCM, outputs: list, cache_hits: int = 0) -> Generation:
    latents, tokens, latent_logits, token_logits, margins = zip(*outputs)
    result = Generation(
        list(tokens),
        mx.stack(latents, axis=1),
        list(latent_logits),
        list(token_logits),
        model.position_counts(),
        0.0,
        cache_hits,
    )
    mx.eval(result.tokens, result.latents, result.latent_logits, result.token_logits, margins)  # one sync
    result.margin = min(float(m.item()) for m in margins)
    return result


def generate_uncached(model: NCM, prefix, key) -> Generation:
    """Every level recomputes the whole sequence so far, prefix included.

    Args:
        model: the NCM (its mask may be any registered mask).
        prefix: token ids ``[B, P]``.
        key: one ``mx.random.key`` (split into one key per row) or one per row ``[B, 2]``.
    """
    config = model.config
    prefix, keys = check_generation_inputs(model, prefix, key)
    level_keys = _level_keys(keys, len(config.level_sizes))
    model.reset_counts()
    sequence, outputs = prefix, []
    for level, size in enumerate(config.level_sizes):
        slots = mx.full((prefix.shape[0], size), config.placeholder, dtype=mx.int32)
        hidden, _ = model(mx.concatenate([sequence, slots], axis=1))
        outputs.append(_decode_level(model, hidden[:, -size:], level_keys[:, level]))
        sequence = mx.concatenate([sequence, outputs[-1][1]], axis=1)
    return _finish(model, outputs)


def prefix_kv(
    model: NCM, prefix: mx.array, cache: PrefixCache | None = None, namespace: str = ""
) -> tuple[list[KV], int]:
    """Per-layer prefix K/V ``[B, H, P, hd]``: cached rows reused, the others computed
    (batched) and stored. Returns the K/V and the number of rows served from the cache."""
    if cache is None:
        return model(prefix)[1], 0
    cache_keys = cache.keys_for(model, prefix, namespace)
    entries = [cache.lookup(cache_key) for cache_key in cache_keys]
    missing = [row for row, entry in enumerate(entries) if entry is None]
    if missing:
        _, computed = model(prefix[mx.array(missing)])
        mx.eval(computed)
        for position, row in enumerate(missing):
            entries[row] = tuple((k[position], v[position]) for k, v in computed)
            cache.store(cache_keys[row], entries[row])
    kv = [
        (mx.stack([entry[layer][0] for entry in entries]), mx.stack([entry[layer][1] for entry in entries]))
        for layer in range(model.config.num_layers)
    ]
    return kv, len(entries) - len(missing)


def generate_cached(model: NCM, prefix, key, cache: PrefixCache | None = None, namespace: str = "") -> Generation:
    """Prefix K/V computed once (or taken from `cache`) and reused by every level.

    A level's K/V are also kept once its tokens are filled: level l runs only
    level l-1's tokens (first time as tokens) and its own placeholder slots.
    Refuses (`CacheRefusedError`) a mask that is not prefix isolated, or dropout in training mode.

    Args:
        model: the NCM.
        prefix: token ids ``[B, P]``.
        key: one ``mx.random.key`` (split into one key per row) or one per row ``[B, 2]``.
        cache: optional `PrefixCache` shared across requests.
        namespace: separates tenants in the cache key.
    """
    require_reusable(model)
    config = model.config
    prefix, keys = check_generation_inputs(model, prefix, key)
    level_keys = _level_keys(keys, len(config.level_sizes))
    model.reset_counts()
    kv, hits = prefix_kv(model, prefix, cache, namespace)
    filled, outputs = prefix[:, :0], []
    for level, size in enumerate(config.level_sizes):
        start = config.level_start(level) - filled.shape[1]
        slots = mx.full((prefix.shape[0], size), config.placeholder, dtype=mx.int32)
        hidden, kv = model(mx.concatenate([filled, slots], axis=1), start, cache=kv)
        # placeholders' K/V are stale once the level is filled: keep the token rows only
        kv = [(k[:, :, :-size], v[:, :, :-size]) for k, v in kv]
        outputs.append(_decode_level(model, hidden[:, -size:], level_keys[:, level]))
        filled = outputs[-1][1]
    return _finish(model, outputs, hits)
