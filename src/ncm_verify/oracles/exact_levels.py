"""Exact laws of whole-level generation on a tiny NCM, in float64, by enumeration.

The model's own level-by-level distributions are tabulated for every filling of
the earlier levels (`ncm_verify.harness.level_models.make_level_tables`); from those tables the target's law of
(latent, tokens) per level follows by the chain rule, and the law of speculative
level drafting by following the procedure branch by branch: draft, latent
accepted or corrected from the residual, tokens accepted or corrected given the
latent, the round ending at the first changed level, the bonus level when every
draft stood. Only for tiny configs (vocabulary <= 4, levels of 1-2 slots).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict

import mlx.core as mx
import numpy as np

from ncm_verify.oracles.exact import acceptance, product_distribution, residual

Context = tuple[tuple[int, ...], ...]
"""The tokens of every earlier level, one tuple per level."""


@dataclasses.dataclass(frozen=True)
class LevelTables:
    """``latent[ctx]`` is p(z | ctx) ``[K]``; ``tokens[ctx]`` is p(x_i | z, ctx) ``[K, n, V]``, for the next level."""

    latent: dict
    tokens: dict
    level_sizes: tuple[int, ...]


def softmax64(logits: mx.array) -> np.ndarray:
    wide = np.array(logits.astype(mx.float32)).astype(np.float64)
    wide = np.exp(wide - wide.max(axis=-1, keepdims=True))
    return wide / wide.sum(axis=-1, keepdims=True)


def flatten(levels) -> tuple[int, ...]:
    """((z, tokens), ...) -> (z_1, *x_1, z_2, *x_2, ...): the outcome the samplers report."""
    return tuple(value for z, x in levels for value in (z, *x))


def level_law(tables: LevelTables, ctx: Context) -> dict:
    """p(z, x | ctx) = p(z | ctx) prod_i p(x_i | z, ctx) over (z, tokens)."""
    law = {}
    for z in np.flatnonzero(tables.latent[ctx] > 0):
        for x, probability in product_distribution(list(tables.tokens[ctx][z])).items():
            law[(int(z), x)] = tables.latent[ctx][z] * probability
    return law


def target_level_law(tables: LevelTables) -> dict:
    """The target's law of every level's latent and tokens, generated level by level."""
    law: dict = defaultdict(float)

    def grow(ctx: Context, levels: tuple, mass: float) -> None:
        if len(ctx) == len(tables.level_sizes):
            law[flatten(levels)] += mass
            return
        for (z, x), probability in level_law(tables, ctx).items():
            grow(ctx + (x,), levels + ((z, x),), mass * probability)

    grow((), (), 1.0)
    return dict(law)


def position_outcomes(p: np.ndarray, q: np.ndarray) -> dict:
    """One slot verified given the latent: (token, accepted) -> probability, draft x ~ q."""
    out: dict = defaultdict(float)
    correction = residual(p, q)
    for x in np.flatnonzero(q > 0):
        accept = acceptance(p[x], q[x])
        if accept > 0:
            out[(int(x), True)] += q[x] * accept
        if accept < 1:
            for y in np.flatnonzero(correction > 0):
                out[(int(y), False)] += q[x] * (1.0 - accept) * correction[y]
    return out


def level_step(target: LevelTables, draft: LevelTables, ctx: Context) -> tuple[dict, dict]:
    """One drafted level decided: ``(stood, changed)``, each (z, tokens) -> probability."""
    p_z, q_z = target.latent[ctx], draft.latent[ctx]
    stood: dict = defaultdict(float)
    changed: dict = defaultdict(float)
    correction = residual(p_z, q_z)
    for z_draft in np.flatnonzero(q_z > 0):
        accept = acceptance(p_z[z_draft], q_z[z_draft])
        if accept > 0:  # the latent stands: each slot accepted or corrected given it
            slots = [position_outcomes(p, q) for p, q in zip(target.tokens[ctx][z_draft], draft.tokens[ctx][z_draft])]
            for combination in itertools.product(*(slot.items() for slot in slots)):
                tokens = tuple(token for (token, _), _ in combination)
                mass = q_z[z_draft] * accept * float(np.prod([probability for _, probability in combination]))
                every = all(flag for (_, flag), _ in combination)
                (stood if every else changed)[(int(z_draft), tokens)] += mass
        if accept < 1:  # the latent is corrected: the level's tokens come from the target given it
            for z in np.flatnonzero(correction > 0):
                for tokens, probability in product_distribution(list(target.tokens[ctx][z])).items():
                    changed[(int(z), tokens)] += q_z[z_draft] * (1.0 - accept) * correction[z] * probability
    return stood, changed


def round_law(target: LevelTables, draft: LevelTables, ctx: Context, num_draft: int) -> dict:
    """Levels one round emits after `ctx`: ``(levels, accepted)`` -> probability."""
    levels = len(target.level_sizes)
    count = min(num_draft, levels - len(ctx))
    law: dict = defaultdict(float)

    def branch(here: Context, emitted: tuple, mass: float) -> None:
        stood, changed = level_step(target, draft, here)
        for level, probability in changed.items():
            law[(emitted + (level,), len(emitted))] += mass * probability
        for level, probability in stood.items():
            grown, kept = here + (level[1],), emitted + (level,)
            if len(kept) < count:
                branch(grown, kept, mass * probability)
            elif len(grown) < levels:  # every draft stood: the bonus level from the target
                for extra, bonus in level_law(target, grown).items():
                    law[(kept + (extra,), count)] += mass * probability * bonus
            else:
                law[(kept, count)] += mass * probability

    branch(ctx, (), 1.0)
    return dict(law)


def speculative_level_law(target: LevelTables, draft: LevelTables, num_draft: int) -> dict:
    """Law of ``(outcome, target passes, accepted levels, verified levels)`` of speculative level drafting.

    A round verifies its drafted levels up to the first that changed, or all of them.
    """
    finished: dict = defaultdict(float)
    frontier = {((), (), 0, 0, 0): 1.0}
    rounds: dict = {}
    while frontier:
        following: dict = defaultdict(float)
        for (ctx, levels, passes, accepted, verified), mass in frontier.items():
            if ctx not in rounds:
                rounds[ctx] = round_law(target, draft, ctx, num_draft)
            count = min(num_draft, len(target.level_sizes) - len(ctx))
            for (emitted, stood), probability in rounds[ctx].items():
                key = (
                    ctx + tuple(x for _, x in emitted),
                    levels + emitted,
                    passes + 1,
                    accepted + stood,
                    verified + min(stood + 1, count),
                )
                if len(key[0]) == len(target.level_sizes):
                    outcome = (flatten(key[1]), *key[2:])
                    finished[outcome] += mass * probability
                else:
                    following[key] += mass * probability
        frontier = following
    return dict(finished)


def outcome_law(law: dict) -> dict:
    """The outcome marginal of a `speculative_level_law`."""
    marginal: dict = defaultdict(float)
    for (outcome, *_), probability in law.items():
        marginal[outcome] += probability
    return dict(marginal)


def expected_cost(law: dict) -> tuple[float, float, float]:
    """Expected target passes, accepted levels and verified drafted levels per generation."""
    return tuple(sum(key[i] * probability for key, probability in law.items()) for i in (1, 2, 3))


def outcome_shape(config) -> tuple[int, ...]:
    """Shape of the flattened outcome ``(z_1, *x_1, ...)``, for dense vectors and sample indices."""
    return tuple(n for size in config.level_sizes for n in (config.codebook_size, *(config.vocab_size,) * size))
