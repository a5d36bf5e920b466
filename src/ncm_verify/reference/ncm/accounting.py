"""Analytic cache payload and position counts, from the config alone (claim C4).

Positions are counted per layer as batch x length, as `Block` instruments them.
Only plain config fields are read, so any implementation's config object serves.
"""

from __future__ import annotations

from ncm_verify.reference.ncm.config import DTYPES

__all__ = [
    "payload_bytes",
    "uncached_positions",
    "cached_positions",
    "avoided_positions",
    "uncached_pairs",
    "cached_pairs",
]


def payload_bytes(config) -> int:
    """Bytes of one prefix entry: K and V for every layer, ``P x d_model`` each."""
    itemsize = DTYPES[config.dtype].size
    return config.num_layers * 2 * config.prefix_length * config.d_model * itemsize


def uncached_positions(config, batch_size: int = 1) -> int:
    """Per layer: level l reruns the prefix and levels <= l."""
    sizes = config.level_sizes
    return batch_size * sum(config.prefix_length + sum(sizes[: level + 1]) for level in range(len(sizes)))


def cached_positions(config, batch_size: int = 1, prefix_hits: int = 0) -> int:
    """Per layer: the missed prefixes once, each level's slots once as placeholders and
    once as tokens (except the last level, whose tokens nobody reads)."""
    sizes = config.level_sizes
    per_row_levels = sum(sizes) + sum(sizes[:-1])
    return (batch_size - prefix_hits) * config.prefix_length + batch_size * per_row_levels


def avoided_positions(config, batch_size: int = 1, prefix_hits: int = 0) -> int:
    """Per layer: positions the cached path does not process that the uncached one does."""
    return uncached_positions(config, batch_size) - cached_positions(config, batch_size, prefix_hits)


def uncached_pairs(config, batch_size: int = 1) -> int:
    """Per layer, attention pairs scored (query x key, masked ones included): level l's whole
    sequence against itself. Softmax and the score matmuls scale with these, not with positions."""
    sizes = config.level_sizes
    return batch_size * sum((config.prefix_length + sum(sizes[: level + 1])) ** 2 for level in range(len(sizes)))


def cached_pairs(config, batch_size: int = 1, prefix_hits: int = 0) -> int:
    """Per layer: each missed prefix against itself, then level l's rows (level l-1's tokens and
    level l's slots) against the prefix and levels <= l."""
    sizes = config.level_sizes
    per_row_levels = sum(
        (sizes[level] + (sizes[level - 1] if level else 0)) * (config.prefix_length + sum(sizes[: level + 1]))
        for level in range(len(sizes))
    )
    return (batch_size - prefix_hits) * config.prefix_length**2 + batch_size * per_row_levels
