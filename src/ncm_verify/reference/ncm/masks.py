"""The attention-mask registry: each mask is a function of the layout.

A mask is a boolean ``[T, T]`` array; ``mask[i, j]`` says row i may attend to
column j. Reuse preconditions are read from the mask itself, never its name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

__all__ = [
    "segment_indices",
    "MASKS",
    "ISOLATED_MASK_NAMES",
    "make_mask",
    "is_prefix_isolated",
    "is_partial_prefix_isolated",
]


def segment_indices(prefix_length: int, level_sizes: Sequence[int]) -> np.ndarray:
    """Segment index of every position: 0 for the prefix, l for level l."""
    return np.repeat(np.arange(len(level_sizes) + 1), [prefix_length, *level_sizes])


def _make_ncm_mask(prefix_length: int, level_sizes: Sequence[int]) -> mx.array:
    """Prefix bidirectional; level l attends to the prefix and levels <= l."""
    segment = segment_indices(prefix_length, level_sizes)
    return mx.array(segment[None, :] <= segment[:, None])


def _make_prefix_lm_mask(prefix_length: int, level_sizes: Sequence[int]) -> mx.array:
    """Prefix bidirectional; generated rows attend causally."""
    length = prefix_length + sum(level_sizes)
    causal = np.tril(np.ones((length, length), dtype=bool))
    causal[:prefix_length, :prefix_length] = True
    return mx.array(causal)


def _make_causal_mask(prefix_length: int, level_sizes: Sequence[int]) -> mx.array:
    """Every row attends to itself and earlier positions."""
    length = prefix_length + sum(level_sizes)
    return mx.array(np.tril(np.ones((length, length), dtype=bool)))


def _make_full_mask(prefix_length: int, level_sizes: Sequence[int]) -> mx.array:
    """Every row attends to every position (not prefix isolated)."""
    length = prefix_length + sum(level_sizes)
    return mx.array(np.ones((length, length), dtype=bool))


MASKS: dict[str, Callable[[int, Sequence[int]], mx.array]] = {
    "ncm": _make_ncm_mask,
    "prefix_lm": _make_prefix_lm_mask,
    "causal": _make_causal_mask,
    "full": _make_full_mask,
}
ISOLATED_MASK_NAMES = ("ncm", "prefix_lm", "causal")


def make_mask(name: str, prefix_length: int, level_sizes: Sequence[int]) -> mx.array:
    """The registered mask `name` for the layout; a ValueError naming `name` otherwise."""
    if name not in MASKS:
        raise ValueError(f"name: no mask {name!r}; registered: {', '.join(MASKS)}")
    return MASKS[name](prefix_length, level_sizes)


def is_prefix_isolated(mask: mx.array, prefix_length: int) -> bool:
    """True when no prefix row attends to a generated position."""
    return not bool(np.asarray(mask)[:prefix_length, prefix_length:].any())


def is_partial_prefix_isolated(mask: mx.array, prefix_length: int) -> bool:
    """True when every prefix row i attends to no column beyond i, so ``prefix[:k]``
    states never depend on ``prefix[k:]`` (radix-style partial reuse is valid)."""
    head = np.asarray(mask)[:prefix_length, :prefix_length]
    return is_prefix_isolated(mask, prefix_length) and not np.triu(head, k=1).any()
