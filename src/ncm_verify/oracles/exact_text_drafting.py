"""The float64 law of drafted generation: a drafter proposes blocks, chain verification accepts or corrects.

Written from the rule (Leviathan et al. 2023, S05; conditionally on the drafter's codes z, as source S01
proposes), not from the reference: a round from context c draws z ~ q(z | c), drafts x_i ~ q_i(. | z, c,
x_<i), keeps draft i with probability min(1, p_i(x_i) / q_i(x_i)) while all before it stood, and then
emits one token from the normalised residual max(p_i - q_i, 0) (at the first rejection) or from
p_{k+1} (when every draft stood). Rounds repeat until `length` tokens are out; the law of those tokens
must be the target's, prod_t p(x_t | c, x_<t), whatever the drafter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

TargetRow = Callable[[tuple], np.ndarray]
"""suffix -> p(. | prompt + suffix), float64 [V]."""
DrafterBlocks = Callable[[tuple], list]
"""suffix -> [(q(z | prompt + suffix), row)] per code z, ``row(drafted) -> q(. | z, ..., drafted)``."""


def round_law(target_row: TargetRow, blocks: DrafterBlocks, context: tuple, count: int) -> dict[tuple, float]:
    """The law of the tokens one round emits after `context` with `count` drafts (accepted, then one)."""
    law: dict[tuple, float] = {}

    def add(outcome: tuple, mass: float) -> None:
        law[outcome] = law.get(outcome, 0.0) + mass

    def walk(row, drafted: tuple, mass: float) -> None:
        p = target_row(context + drafted)
        if len(drafted) == count:
            for token in np.flatnonzero(p):
                add(drafted + (int(token),), mass * p[token])
            return
        q = row(drafted)
        both = np.minimum(p, q)
        for token in np.flatnonzero(both):
            walk(row, drafted + (int(token),), mass * both[token])
        residual = np.maximum(p - q, 0.0)
        rejected = 1.0 - both.sum()
        if residual.sum() > 0 and rejected > 0:
            for token in np.flatnonzero(residual):
                add(drafted + (int(token),), mass * rejected * residual[token] / residual.sum())

    for weight, row in blocks(context):
        if weight > 0:
            walk(row, (), weight)
    return law


def drafted_law(target_row: TargetRow, blocks: DrafterBlocks, length: int, num_draft: int) -> dict[tuple, float]:
    """The law of the first `length` tokens of drafted generation, `num_draft` drafts a round (fewer
    when fewer tokens remain), as ``{tokens: probability}``."""

    @functools.cache
    def law_after(context: tuple, remaining: int) -> tuple:
        out: dict[tuple, float] = {}
        for emitted, mass in round_law(target_row, blocks, context, min(num_draft, remaining)).items():
            emitted = emitted[:remaining]
            if len(emitted) == remaining:
                out[emitted] = out.get(emitted, 0.0) + mass
                continue
            for rest, more in law_after(context + emitted, remaining - len(emitted)):
                out[emitted + rest] = out.get(emitted + rest, 0.0) + mass * more
        return tuple(out.items())

    return dict(law_after((), length))


def sequence_law(rows: Callable[[np.ndarray], np.ndarray], prompt: list[int], length: int) -> np.ndarray:
    """The exact float64 law of the first `length` tokens after `prompt`, enumerated level by level: `rows(sequences
    [N, T])` gives the sampling law ``[N, V]`` after each (prompt and a continuation, one batch a level). Entry
    ``x_1 V^(L-1) + ... + x_L`` (`mlx_lm_real.models.outcome_index`'s order) is the probability of ``x_1 .. x_L``."""
    law = np.ones(1)
    continuations = np.zeros((1, 0), dtype=np.int64)
    for _ in range(length):
        sequences = np.concatenate([np.tile(prompt, (len(continuations), 1)), continuations], axis=1)
        step = np.asarray(rows(sequences), dtype=np.float64)
        law = (law[:, None] * step).ravel()
        continuations = np.concatenate(
            [
                np.repeat(continuations, step.shape[1], axis=0),
                np.tile(np.arange(step.shape[1]), len(continuations))[:, None],
            ],
            axis=1,
        )
    return law


def target_law(target_row: TargetRow, length: int) -> dict[tuple, float]:
    """prod_t p(x_t | prompt, x_<t) over every sequence of `length` tokens."""
    law: dict[tuple, float] = {(): 1.0}
    for _ in range(length):
        law = {s + (int(t),): m * target_row(s)[t] for s, m in law.items() for t in np.flatnonzero(target_row(s))}
    return law


def first_draft_acceptance(target_row: TargetRow, blocks: DrafterBlocks) -> float:
    """P(the first round's first draft stands) = sum_z q(z) sum_x min(p(x), q_1(x | z))."""
    p = target_row(())
    return float(sum(weight * np.minimum(p, row(())).sum() for weight, row in blocks(())))


def one_draft_round(p_rows: np.ndarray, q_row: np.ndarray, draft: int) -> list[tuple[int, int, float]]:
    """The outcomes of a one-draft round given its draft, under the rows it was verified with, as
    ``(accepted, token, probability)``: kept with probability min(1, p_0(x) / q(x)) and a bonus from p_1, else a
    token from the normalised max(p_0 - q, 0) (the rule `round_law` walks)."""
    p_rows, q_row = np.asarray(p_rows, dtype=np.float64), np.asarray(q_row, dtype=np.float64)
    p, bonus = p_rows[0] / p_rows[0].sum(), p_rows[1] / p_rows[1].sum()
    q = q_row / q_row.sum()
    kept = min(p[draft], q[draft]) / q[draft] if q[draft] > 0 else 1.0
    outcomes = [(1, int(y), kept * bonus[y]) for y in np.flatnonzero(bonus)] if kept > 0 else []
    residual = np.maximum(p - q, 0.0)
    if kept < 1 and residual.sum() > 0:
        outcomes += [(0, int(y), (1 - kept) * residual[y] / residual.sum()) for y in np.flatnonzero(residual)]
    return outcomes
