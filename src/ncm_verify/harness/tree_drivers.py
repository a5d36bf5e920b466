"""Draft trees drawn from an AutoregressiveFixture as a mode draws them, verified, and continued by the target.

Shared by the tree bench (tokens per pass) and the sampling judgement of the published rules.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ncm_verify.oracles.exact import AutoregressiveFixture
from ncm_verify.oracles.exact_tree import tree_nodes

__all__ = ["draw_children", "draw_trees", "verify_drawn_trees", "emitted_outcomes"]


def draw_children(rng: np.random.Generator, q: np.ndarray, count: int, mode: str) -> list[int]:
    """`count` children of a node with draft row q, drawn as `mode` says (as the enumerator draws them)."""
    if mode == "top_k":
        return [int(x) for x in np.argsort(-q, kind="stable")[:count]]
    if mode == "with_replacement":
        return [int(x) for x in rng.choice(len(q), size=count, p=q)]
    children: list[int] = []
    left = q.copy()
    for _ in range(min(count, int(np.count_nonzero(q)))):  # sequential draws, renormalised
        children.append(int(rng.choice(len(q), p=left / left.sum())))
        left[children[-1]] = 0.0
    return children


def draw_trees(fixture: AutoregressiveFixture, shape: tuple[int, ...], mode: str, batch: int, seed: int) -> dict:
    """`batch` draft trees of `shape` from the root context, as the kernel's padded inputs (float32 rows)."""
    rng = np.random.default_rng(seed)
    count, vocab = len(tree_nodes(shape)), fixture.vocab
    target = np.zeros((batch, count + 1, vocab), np.float32)
    draft = np.zeros_like(target)
    tokens = np.full((batch, count), -1, np.int32)
    parents = np.full((batch, count), -1, np.int32)
    num_nodes = np.zeros(batch, np.int32)
    for b in range(batch):
        target[b, 0], draft[b, 0] = fixture.row(fixture.target, ()), fixture.row(fixture.draft, ())
        level: list[tuple[int, tuple[int, ...]]] = [(-1, ())]
        n = 0
        for width in shape:
            following = []
            for parent, context in level:
                for x in draw_children(rng, fixture.row(fixture.draft, context), width, mode):
                    here = context + (x,)
                    tokens[b, n], parents[b, n] = x, parent
                    target[b, n + 1], draft[b, n + 1] = (
                        fixture.row(fixture.target, here),
                        fixture.row(fixture.draft, here),
                    )
                    following.append((n, here))
                    n += 1
            level = following
        num_nodes[b] = n
        draft[b, n + 1 :] = draft[b, 0]  # padded rows: any valid row
        target[b, n + 1 :] = target[b, 0]
    return {"target": target, "draft": draft, "tokens": tokens, "parents": parents, "num_nodes": num_nodes}


def verify_drawn_trees(impl, arrays: dict, mode: str, seed: int):
    """`impl.verify_tree` on `draw_trees`' arrays, keyed by `seed`."""
    return impl.verify_tree(
        mx.array(arrays["target"]),
        mx.array(arrays["draft"]),
        mx.array(arrays["tokens"]),
        mx.array(arrays["parents"]),
        key=mx.random.key(seed),
        num_nodes=mx.array(arrays["num_nodes"]),
        mode=mode,
    )


def emitted_outcomes(impl, fixture: AutoregressiveFixture, shape: tuple[int, ...], mode: str, n: int, seed: int):
    """`n` rounds from the root: each round's emitted tokens continued by target samples to the fixture's
    length, as indices into ``target_joint``'s row-major order (its law is the target's iff the rule is exact)."""
    outcome = verify_drawn_trees(impl, draw_trees(fixture, shape, mode, n, seed), mode, seed)
    tokens, accepted = np.array(outcome.tokens), np.array(outcome.num_accepted)
    rng = np.random.default_rng([seed, 1])
    indices = np.zeros(n, np.int64)
    for b in range(n):
        sequence = [int(x) for x in tokens[b, : accepted[b] + 1]]
        while len(sequence) < fixture.length:
            p = fixture.row(fixture.target, tuple(sequence))
            sequence.append(int(rng.choice(fixture.vocab, p=p / p.sum())))
        indices[b] = np.ravel_multi_index(sequence[: fixture.length], (fixture.vocab,) * fixture.length)
    return indices
