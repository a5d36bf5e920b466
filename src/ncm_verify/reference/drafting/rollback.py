"""Undoing a speculative round on caches that cannot be trimmed: snapshot, restore, replay the accepted tokens.

A recurrent layer's `ArraysCache` folds every token into its convolution and
recurrent state, and a `RotatingKVCache` that wraps overwrites the entries a
trim would need: neither can drop rejected drafts. So the loop copies every
cache's `state` before a pass that may be rejected, and after a rejection
restores the copy and feeds the accepted tokens again, in one pass. Exact by
construction: the caches then hold what feeding the accepted tokens alone
builds, which `cache_views` checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import KVCache, QuantizedKVCache

__all__ = ["replay", "restore_caches", "rewinds_by_trim", "roll_back", "snapshot_caches"]

TRIM_EXACT = (KVCache, QuantizedKVCache)
"""Cache classes whose `trim(n)` drops the last n positions exactly (a ring's may not, once it wraps)."""


def _copy(leaf):
    # mlx-lm writes into its buffers in place (keys[..., a:b, :] = ...): a snapshot must not share them
    return mx.array(leaf) if isinstance(leaf, mx.array) else leaf


def rewinds_by_trim(caches: Sequence) -> bool:
    """Whether every cache is of a class whose trim is exact, so a round is undone by trimming alone."""
    return all(type(cache) in TRIM_EXACT for cache in caches)


def snapshot_caches(caches: Sequence) -> list[Any]:
    """A copy of every cache's `state` (buffers, offsets, a ring's write index and keep prefix), evaluated."""
    saved = [tree_map(_copy, cache.state) for cache in caches]
    mx.eval(saved)
    return saved


def restore_caches(caches: Sequence, saved: Sequence) -> None:
    """Put `saved` (from `snapshot_caches`) back into `caches`, in place; the snapshot stays reusable."""
    if len(caches) != len(saved):
        raise ValueError(f"saved: {len(saved)} snapshots for {len(caches)} caches")
    for cache, state in zip(caches, saved, strict=True):
        cache.state = tree_map(_copy, state)


def replay(model, caches: Sequence, tokens: mx.array) -> None:
    """Feed `tokens` ``[B, n]`` to `model` through `caches` in one pass (nothing when n is 0)."""
    if tokens.shape[1] > 0:
        model(tokens, cache=list(caches))
        mx.eval([cache.state for cache in caches])


def roll_back(model, caches: Sequence, saved: Sequence, kept: mx.array, *, restore=restore_caches) -> None:
    """Restore `caches` to `saved` (by `restore`) and replay the `kept` tokens ``[B, n]``: the round's rejected
    tokens undone."""
    restore(caches, saved)
    replay(model, caches, kept)
