"""Bounds on the exact expected accepted length of a 2-token block when only the target rows' largest entries are kept.

For a large target (SmolLM2, V = 49 152) C10 ships the target's rows sparse: at each context its K largest entries
within the drafters' sub-vocabulary S (the drafters propose nothing else) and the mass of S it leaves out, r; and
after each of the J likeliest first tokens, the next row the same way. A drafter's row q sums to 1 over S, so for one
row sum_x min(p, q) lies in [lo, lo + min(r, 1 - q(kept))], lo = sum over the kept x of min(p(x), q(x)).

A 2-token block (`exact_acceptance` explains the formula) accepts
    E = sum_z w_z [sum_x m(x) + sum_x m(x) s(x)],  m(x) = min(p(x), q_z(x)),  s(x) = sum_y min(p(y | x), q_z(y | x)),
and the bounds follow term by term: an expanded x contributes m(x) times s(x)'s bounds, a kept x not expanded
m(x) times [0, 1], the left-out mass of the first row at most min(r, 1 - q_z(kept)) to each sum. Rows are float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SparseTargetRows", "two_token_acceptance"]


@dataclass(frozen=True)
class SparseTargetRows:
    """The target's rows at C contexts (K kept entries each) and after J expanded first tokens per context."""

    first_ids: np.ndarray
    """(C, K) ids of the first row's kept entries, largest first."""
    first_probs: np.ndarray
    first_rest: np.ndarray
    """(C,) the mass within the sub-vocabulary the kept entries leave out."""
    second_ids: np.ndarray
    """(C, J, K): the row after first token first_ids[c, j]."""
    second_probs: np.ndarray
    second_rest: np.ndarray
    """(C, J)."""

    def __post_init__(self) -> None:
        c, k = self.first_ids.shape
        j = self.second_ids.shape[1] if self.second_ids.ndim == 3 else -1
        shapes = {
            "first_probs": (self.first_probs.shape, (c, k)),
            "first_rest": (self.first_rest.shape, (c,)),
            "second_ids": (self.second_ids.shape, (c, j, self.second_ids.shape[-1])),
            "second_probs": (self.second_probs.shape, self.second_ids.shape),
            "second_rest": (self.second_rest.shape, (c, j)),
        }
        for name, (got, want) in shapes.items():
            if got != want or j > k:
                raise ValueError(f"{name}: shape {got}, expected {want} (J = {j} <= K = {k})")
        for name in ("first_probs", "first_rest", "second_probs", "second_rest"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if not np.all(np.isfinite(value)) or value.min() < 0:
                raise ValueError(f"{name}: must be finite and non-negative")
        if (self.first_probs.sum(axis=1) + self.first_rest).max() > 1 + 1e-6:
            raise ValueError("first_probs, first_rest: a row's kept mass and rest exceed 1")

    @property
    def expanded(self) -> int:
        return int(self.second_ids.shape[1])


def _min_sum_bounds(p: np.ndarray, rest: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum_x min(p, q) over a row of which `p` holds the kept entries and `q` the drafter's values there."""
    low = np.minimum(p, q).sum(axis=-1)
    return low, low + np.minimum(rest, np.maximum(1.0 - q.sum(axis=-1), 0.0))


def two_token_acceptance(
    target: SparseTargetRows, weights: np.ndarray, q_first: np.ndarray, q_second: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds (C,) on E[accepted] of a 2-token block per context.

    Args:
        weights: (C, Z) the drafter's component weights per context (an AR drafter: Z = 1, weight 1).
        q_first: (C, Z, K) each component's first row at `target.first_ids`.
        q_second: (C, Z, J, K2) each component's second row, after first token first_ids[c, j], at
            `target.second_ids[c, j]`.
    """
    c, k = target.first_ids.shape
    z = weights.shape[1] if weights.ndim == 2 else -1
    j = target.expanded
    for name, got, want in (
        ("weights", weights.shape, (c, z)),
        ("q_first", q_first.shape, (c, z, k)),
        ("q_second", q_second.shape, (c, z, *target.second_ids.shape[1:])),
    ):
        if got != want:
            raise ValueError(f"{name}: shape {got}, expected {want}")
    for name, value in (("weights", weights), ("q_first", q_first), ("q_second", q_second)):
        if not np.all(np.isfinite(value)) or value.min() < 0 or value.max() > 1 + 1e-9:
            raise ValueError(f"{name}: entries must lie in [0, 1]")
    p1 = target.first_probs.astype(np.float64)[:, None, :]
    m = np.minimum(p1, q_first)  # (C, Z, K)
    first_low, first_high = _min_sum_bounds(p1, target.first_rest[:, None], q_first)
    tail = first_high - first_low  # what the left-out first tokens may add, to either sum
    s_low, s_high = _min_sum_bounds(
        target.second_probs.astype(np.float64)[:, None], target.second_rest[:, None, :, None][..., 0], q_second
    )
    second_low = (m[..., :j] * s_low).sum(axis=-1)
    second_high = (m[..., :j] * s_high).sum(axis=-1) + m[..., j:].sum(axis=-1) + tail
    w = weights.astype(np.float64)
    return (w * (first_low + second_low)).sum(axis=1), (w * (first_high + second_high)).sum(axis=1)
