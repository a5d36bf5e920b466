"""The exact expected accepted length of a drafted block, from the target's and the drafter's rows.

Speculative sampling accepts the first i drafted tokens x_1..x_i with probability
prod_{j<=i} min(p(x_j | c, x_<j), q_j(x_j | ...)), summed over the tokens. For a factorised NCM drafter,
q_j = q(x_j | z, c) under codes z drawn with weight w_z, and the block's law is the mixture over z; for an AR
drafter q_j = q(x_j | c, x_<j) and there is one component of weight 1. So, per component,

    P(first i accepted) = sum over prefixes x_1..x_i of w * prod_j min(p_j, q_j),  E[accepted] = sum_i P(...).

The sum runs over V^i prefixes; this recursion expands a prefix only while its mass (the product so far)
is at least `floor` times its component's weight (each code z's tree is cut at the same relative depth;
`floor` 0 enumerates every block). Every child's own mass is still counted exactly (it is known once its
parent's rows are), so only the descendants of an unexpanded child are missing, and each depth below holds
at most the child's mass: E[accepted] lies in [lower, lower + bound], bound = sum over unexpanded children of
mass x (k - depth). Rows are float64 (the models' float32 rows, promoted).

The frontier is processed as arrays (a depth at a time, in the order a depth-first listing gives it); at the last
depth each entry needs only sum_x min(p, q), computed once per pair of a target row and a distinct draft row (an
NCM drafter's rows depend on its code alone, and codes sharing their coarse levels share rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BlockAcceptance", "Component", "expected_accepted_length"]

Prefix = tuple[int, ...]
RowsFn = Callable[[Sequence[tuple[int, Prefix]]], np.ndarray]
"""Rows (N, V) float64 for N (context index, prefix) pairs."""


@dataclass(frozen=True)
class Component:
    """One mixture component of a drafter's block law for one context: its weight and its rows.

    `rows` None: the drafter's rows come from `draft_rows` (an AR drafter, prefix-dependent); otherwise
    (k, V) rows q(x_j | z, c) that do not depend on the prefix (an NCM drafter's codes z).
    """

    context: int
    weight: float
    rows: np.ndarray | None = None


@dataclass(frozen=True)
class BlockAcceptance:
    """Per context: P(first i accepted) for i = 1..k (lower bounds) and E[accepted] in [lower, lower + bound]."""

    accepted_prefix: np.ndarray
    """(contexts, k): lower bounds on P(the first i drafted tokens are all accepted)."""
    lower: np.ndarray
    bound: np.ndarray
    nodes: int
    """Prefixes whose rows were computed (the cost)."""
    unexpanded: np.ndarray | None = None
    """(contexts, k): at column d, the mass of the prefixes of length d + 1 left unexpanded (the bound's terms)."""

    @property
    def upper(self) -> np.ndarray:
        return self.lower + self.bound

    def first(self, k: int) -> BlockAcceptance:
        """The same figures for a block of the first `k` tokens: P(first i accepted) does not depend on the
        block's length, and an unexpanded prefix of length d + 1 bounds at most k - d - 1 deeper positions."""
        if self.unexpanded is None or not 1 <= k <= self.accepted_prefix.shape[1]:
            raise ValueError(f"k: {k} must be in 1..{self.accepted_prefix.shape[1]} of a result that kept its terms")
        prefix = self.accepted_prefix[:, :k]
        weights = np.maximum(k - 1 - np.arange(k), 0)
        bound = self.unexpanded[:, :k] @ weights
        return BlockAcceptance(prefix, prefix.sum(axis=1), bound, self.nodes, self.unexpanded[:, :k])

    def per_position(self) -> np.ndarray:
        """Mean over contexts of P(token i accepted | the first i-1 were), i = 1..k."""
        mean = self.accepted_prefix.mean(axis=0)
        return mean / np.concatenate([[1.0], mean[:-1]])


def expected_accepted_length(
    components: Sequence[Component],
    contexts: int,
    k: int,
    target_rows: RowsFn,
    draft_rows: RowsFn | None = None,
    floor: float = 1e-3,
) -> BlockAcceptance:
    """Exact E[accepted tokens] of a k-token block per context, up to the stated bound (see the module)."""
    if k < 1:
        raise ValueError(f"k: {k} must be at least 1")
    accepted = np.zeros((contexts, k))
    bound = np.zeros(contexts)
    unexpanded = np.zeros((contexts, k))
    weight = np.array([c.weight for c in components], dtype=np.float64)
    context_of = np.array([c.context for c in components], dtype=np.int64)
    with_rows = np.array([c.rows is not None for c in components], dtype=bool)
    row_index = np.cumsum(with_rows) - 1
    table = np.stack([np.asarray(c.rows)[:k] for c in components if c.rows is not None]) if with_rows.any() else None
    # The frontier, one entry per (component, prefix), in the order a depth-first listing would give them:
    # its component, its prefix (entries x depth) and its mass so far.
    comp = np.flatnonzero(weight > 0)
    prefixes = np.zeros((comp.size, 0), dtype=np.int64)
    mass = weight[comp]
    nodes = 0
    for depth in range(k):
        if comp.size == 0:
            break
        unique, inverse = _unique_rows(np.concatenate([context_of[comp, None], prefixes], axis=1))
        keys = [(int(row[0]), tuple(int(x) for x in row[1:])) for row in unique]
        p = target_rows(keys)
        nodes += len(keys)
        q_ar = None
        if not with_rows[comp].all():
            if draft_rows is None:
                raise ValueError("draft_rows: a component without rows needs the drafter's rows")
            q_ar = draft_rows(keys)
        if depth + 1 == k:  # the last depth needs each entry's sum alone: one per (target row, draft row) pair
            np.add.at(
                accepted[:, depth],
                context_of[comp],
                mass * _pair_sums(p, q_ar, table, row_index, with_rows, comp, inverse, depth),
            )
            break
        following = []
        for begin in range(0, comp.size, FRONTIER_CHUNK):
            part = slice(begin, begin + FRONTIER_CHUNK)
            c, row = comp[part], inverse[part]
            q = np.empty((c.size, p.shape[1]))
            own = with_rows[c]
            if own.any():
                q[own] = table[row_index[c[own]], depth]  # type: ignore[index]
            if not own.all():
                q[~own] = q_ar[row[~own]]  # type: ignore[index]
            child = np.minimum(np.take(p, row, axis=0), q, out=q)
            child *= mass[part, None]
            np.add.at(accepted[:, depth], context_of[c], child.sum(axis=1))
            expand = child >= floor * weight[c, None]
            left = np.maximum(child.sum(axis=1) - np.where(expand, child, 0.0).sum(axis=1), 0.0)
            np.add.at(bound, context_of[c], left * (k - depth - 1))
            np.add.at(unexpanded[:, depth], context_of[c], left)
            entry, token = np.nonzero(expand)
            grown = np.concatenate([prefixes[part][entry], token[:, None]], axis=1)
            following.append((c[entry], grown, child[entry, token]))
        if not following:
            break
        comp = np.concatenate([f[0] for f in following])
        prefixes = np.concatenate([f[1] for f in following])
        mass = np.concatenate([f[2] for f in following])
    return BlockAcceptance(accepted, accepted.sum(axis=1), bound, nodes, unexpanded)


FRONTIER_CHUNK = 65536
"""Frontier entries whose rows are gathered at once (bounds memory: entries x V float64 a few times)."""


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of non-negative int `keys` (N, m) in lexicographic order, and each row's index among them:
    rows read as numbers in one radix where they fit an int64 (a 1-D sort), else `np.unique` over rows."""
    radix = int(keys.max()) + 1 if keys.size else 1
    if radix ** keys.shape[1] < 2**62:
        scalar = np.zeros(keys.shape[0], dtype=np.int64)
        for column in keys.T:
            scalar = scalar * radix + column
        values, first, inverse = np.unique(scalar, return_index=True, return_inverse=True)
        return keys[first], inverse.reshape(-1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    return unique, inverse.reshape(-1)


def _pair_sums(p, q_ar, table, row_index, with_rows, comp, inverse, depth) -> np.ndarray:
    """sum_x min(p(x), q(x)) per frontier entry at `depth`: for a code's rows, once per pair of a target row and a
    distinct draft row (a code's rows are shared by all its prefixes, and codes often share rows); an AR entry's
    draft row is its prefix's own."""
    own = with_rows[comp]
    sums = np.empty(comp.size)
    if own.any():
        distinct, index = np.unique(table[:, depth], axis=0, return_inverse=True)
        qid = index.reshape(-1)[row_index[comp[own]]]
        dense = np.empty((p.shape[0], distinct.shape[0]))
        step = max(1, FRONTIER_CHUNK // distinct.shape[0])
        for begin in range(0, p.shape[0], step):
            dense[begin : begin + step] = np.minimum(p[begin : begin + step, None], distinct[None]).sum(axis=-1)
        sums[own] = dense[inverse[own], qid]
    if not own.all():
        rows = inverse[~own]
        sums[~own] = np.minimum(p[rows], q_ar[rows]).sum(axis=1)
    return sums
