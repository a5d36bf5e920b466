"""C10's evidence: each shipped drafter's exact expected accepted length on held-out contexts.

The target's and the drafters' rows are computed from the shipped models (`make train`) on held-out
contexts of the pydoc text; `oracles.exact_acceptance` turns them into P(first i accepted) and E[accepted]
per context with a stated bound, and the directions (distilled, feature-conditioned) are compared with the
undistilled NCM drafter by a paired test per context (`stats.paired_improvement_p_value`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache

from ncm_verify.oracles.exact_acceptance import BlockAcceptance, Component, RowsFn, expected_accepted_length
from ncm_verify.reference.drafting.base import EnumerableDrafter
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter
from ncm_verify.reference.drafting.models import block_start_features
from ncm_verify.reference.drafting.text import text_ids
from ncm_verify.reference.drafting.trained import load_record, load_trained

DRAFTERS = ("ncm_data", "ncm_distilled", "ncm_features", "ar_draft")
BASELINE = "ncm_data"
DIRECTIONS = ("ncm_distilled", "ncm_features")
CHUNK = 1024
"""Most prefixes scored in one model call (bounds memory)."""


def held_out_contexts(count: int, length: int, seed: int) -> np.ndarray:
    """`count` windows of `length` ids from the held-out last 10 % of the shipped corpus, seeded."""
    held_out = text_ids()[1]
    starts = np.random.default_rng(seed).choice(len(held_out) - length, size=count, replace=False)
    return np.stack([held_out[s : s + length] for s in starts])


class _ExactCache(KVCache):
    """mlx-lm's KVCache without its 256-step preallocation: a thousand prefixes share a short context here,
    and padding each to 256 entries cost most of C10's time."""

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.keys = mx.concatenate([self.keys, keys], axis=2)
        self.values = mx.concatenate([self.values, values], axis=2)
        self.offset += keys.shape[2]
        return self.keys, self.values


def prefix_rows(model: Any, contexts: mx.array) -> RowsFn:
    """Rows p(. | context_c, prefix) (float64) of an mlx-lm model, the contexts' K/V computed once."""
    cache = make_prompt_cache(model)
    last = np.array(mx.softmax(model(contexts, cache=cache)[:, -1].astype(mx.float32), axis=-1), dtype=np.float64)
    length = contexts.shape[1]
    stored = [(c.keys[..., :length, :], c.values[..., :length, :]) for c in cache]

    def rows(keys: Sequence[tuple[int, tuple[int, ...]]]) -> np.ndarray:
        out = np.empty((len(keys), last.shape[1]))
        by_depth: dict[int, list[int]] = {}
        for n, (_, prefix) in enumerate(keys):
            by_depth.setdefault(len(prefix), []).append(n)
        for depth, members in by_depth.items():
            for begin in range(0, len(members), CHUNK):
                chunk = members[begin : begin + CHUNK]
                context = [keys[n][0] for n in chunk]
                if depth == 0:
                    out[chunk] = last[context]
                    continue
                index = mx.array(context)
                caches = []
                for k, v in stored:
                    entry = _ExactCache()
                    entry.keys, entry.values, entry.offset = k[index], v[index], length
                    caches.append(entry)
                tokens = mx.array([keys[n][1] for n in chunk], dtype=mx.int32)
                logits = model(tokens, cache=caches)[:, -1].astype(mx.float32)
                out[chunk] = np.array(mx.softmax(logits, axis=-1), dtype=np.float64)
        return out / out.sum(axis=1, keepdims=True)

    return rows


def remembered(rows: RowsFn) -> RowsFn:
    """`rows` computing each (context, prefix) once: the drafters' trees share most of the target's prefixes."""
    known: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def lookup(keys: Sequence[tuple[int, tuple[int, ...]]]) -> np.ndarray:
        missing = [key for key in keys if key not in known]
        if missing:
            known.update(zip(missing, rows(missing)))
        return np.stack([known[key] for key in keys])

    return lookup


def ncm_components(
    drafter: EnumerableDrafter, contexts: mx.array, k: int, features: mx.array | None
) -> list[Component]:
    """Per context and code z: weight q(z | c) and the rows q(x_j | z), j < k (float64); `features` (B, T, D)
    the target's states as the loop hands them (read at each context's last position, by a feature reader)."""
    reads = features[:, -1] if drafter.reads_features and features is not None else None
    log_prior, log_rows = drafter.block_law(contexts, k, features=reads)
    prior = np.exp(np.array(log_prior, dtype=np.float64))
    prior /= prior.sum(axis=1, keepdims=True)
    rows = np.exp(np.array(log_rows, dtype=np.float64))
    rows /= rows.sum(axis=-1, keepdims=True)
    return [Component(c, float(prior[c, z]), rows[c, z]) for c in range(prior.shape[0]) for z in range(prior.shape[1])]


@dataclass(frozen=True)
class DrafterRow:
    """One drafter's line of the C10 table."""

    name: str
    parameters: int
    held_out_loss: float
    acceptance: BlockAcceptance

    def as_dict(self) -> dict[str, Any]:
        a = self.acceptance
        return {
            "drafter": self.name,
            "parameters": self.parameters,
            "held_out_loss": self.held_out_loss,
            "acceptance_per_position": [round(float(x), 4) for x in a.per_position()],
            "expected_accepted_lower": float(a.lower.mean()),
            "expected_accepted_upper": float(a.upper.mean()),
            "prefixes_scored": a.nodes,
        }


def drafter_table(contexts: np.ndarray, k: int, floor: float, names: Sequence[str] = DRAFTERS) -> list[DrafterRow]:
    """Each drafter's exact acceptance against the shipped target on `contexts`."""
    record = load_record()["models"]
    target = load_trained("target")
    ctx = mx.array(contexts)
    target_rows = remembered(prefix_rows(target, ctx))
    features = block_start_features(target, ctx)  # what the drafting loop hands a feature reader
    table = []
    for name in names:
        model = load_trained(name)
        if isinstance(model, ConceptBlockDrafter):
            result = expected_accepted_length(
                ncm_components(model, ctx, k, features), len(contexts), k, target_rows, floor=floor
            )
        else:
            components = [Component(c, 1.0) for c in range(len(contexts))]
            result = expected_accepted_length(
                components, len(contexts), k, target_rows, prefix_rows(model, ctx), floor=floor
            )
        table.append(DrafterRow(name, record[name]["parameters"], record[name]["held_out_loss"], result))
    return table


def format_table(table: Sequence[DrafterRow], k: int) -> str:
    """The C10 table as text: drafter, size, acceptance per position, E[accepted] bounds, held-out loss."""
    head = f"{'drafter':<14} {'params':>7}  " + " ".join(f"a{i + 1:<5}" for i in range(k))
    lines = [head + "  E[accepted] (lower..upper)  held-out loss (nats/token)"]
    for row in table:
        a = row.acceptance
        rates = " ".join(f"{x:.4f}" for x in a.per_position())
        lines.append(
            f"{row.name:<14} {row.parameters:>7}  {rates}  {a.lower.mean():.4f}..{a.upper.mean():.4f}"
            f"{'':>11}{row.held_out_loss:.4f}"
        )
    return "\n".join(lines)


CONTEXTS = 128
"""Held-out contexts C10 compares the drafters on (drawn once, seeded; chosen for cost, before any result)."""
CONTEXT_LENGTH = 32
BLOCK = 2
"""C10's block: k = 2, enumerated exactly (every first token expanded: V target rows per context, no bound)."""
LONG_BLOCK = 4
LONG_FLOOR = 1e-3
"""The table's longer block: prefixes below this mass (relative to their code's weight) are not expanded."""
SEED = 2024


@dataclass(frozen=True)
class DirectionResult:
    direction: str
    mean_difference: float
    """mean over contexts of (direction's lower bound - baseline's upper bound) of E[accepted]."""
    p_value: float
    alpha: float
    baseline: str = BASELINE

    @property
    def shown(self) -> bool:
        return self.p_value <= self.alpha


def c10(
    contexts: int = CONTEXTS, directions: Sequence[str] = DIRECTIONS, baseline: str = BASELINE
) -> tuple[list[DrafterRow], list[DirectionResult]]:
    """The C10 table and each direction's paired test against the undistilled NCM drafter (conservative:
    the direction's lower bound against the baseline's upper bound, per context)."""
    from ncm_verify.harness.stats import DIRECTION_ALPHA, paired_improvement_p_value

    names = list(dict.fromkeys([baseline, *directions, *DRAFTERS]))
    table = drafter_table(held_out_contexts(contexts, CONTEXT_LENGTH, SEED), BLOCK, 0.0, names)
    rows = {row.name: row.acceptance for row in table}
    results = []
    for direction in directions:
        better, base = rows[direction].lower, rows[baseline].upper
        p = paired_improvement_p_value(better, base)
        results.append(DirectionResult(direction, float((better - base).mean()), p, DIRECTION_ALPHA, baseline))
    return table, results


def describe(table: Sequence[DrafterRow], results: Sequence[DirectionResult]) -> str:
    lines = [
        f"exact acceptance of a {BLOCK}-token block on {len(table[0].acceptance.lower)} held-out contexts of "
        f"{CONTEXT_LENGTH} characters, every block enumerated (a_i: P(token i accepted | tokens < i were))",
        format_table(table, BLOCK),
    ]
    for r in results:
        verdict = "shown" if r.shown else "NOT shown"
        lines.append(
            f"{r.direction} vs {r.baseline}: mean difference {r.mean_difference:+.4f} tokens per block "
            f"(its lower bound minus the baseline's upper), one-sided paired t p = {r.p_value:.3g}, "
            f"alpha {r.alpha:g}: {verdict}"
        )
    return "\n".join(lines)


def long_block_table(contexts: int = 32) -> str:
    """The table for a LONG_BLOCK-token block, E[accepted] bracketed by the truncation bound."""
    table = drafter_table(held_out_contexts(contexts, CONTEXT_LENGTH, SEED), LONG_BLOCK, LONG_FLOOR)
    return (
        f"{LONG_BLOCK}-token block on the first {contexts} of those contexts, prefixes of mass below "
        f"{LONG_FLOOR:g} x their code's weight not expanded (a_i from the lower bounds)\n"
        + format_table(table, LONG_BLOCK)
    )


if __name__ == "__main__":
    print(describe(*c10()))
    print(long_block_table())
