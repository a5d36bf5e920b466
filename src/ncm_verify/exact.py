"""Exact output distributions in float64, by enumerating each procedure's branches.

Only for tiny fixtures (vocabulary <= 8, a few positions). Each enumeration
follows the procedure step by step, residual normalisation and its fallback
included, rather than a closed form, so a flaw in the procedure shows here.
A distribution is a dict from an outcome (a tuple of ids) to its probability.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from typing import Callable

import numpy as np

RESIDUAL_FLOOR = 1e-30


# --- fixtures -------------------------------------------------------------------


def context_offsets(vocab: int, length: int) -> np.ndarray:
    """Row offset of the contexts of each length 0..length in a table."""
    return np.concatenate([[0], np.cumsum(vocab ** np.arange(length + 1))]).astype(np.int64)


def context_rows(contexts: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
    """Table row of each context ``contexts[b, :lengths[b]]`` (mixed-radix index)."""
    contexts = np.asarray(contexts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = context_offsets(vocab, contexts.shape[1] if contexts.ndim == 2 else 0)
    index = np.zeros(len(lengths), dtype=np.int64)
    for position in range(contexts.shape[1] if contexts.ndim == 2 else 0):
        inside = position < lengths
        index = np.where(inside, index * vocab + contexts[:, position], index)
    return offsets[lengths] + index


@dataclasses.dataclass(frozen=True)
class AutoregressiveFixture:
    """Target and draft tables p(x_t | x_<t), q(x_t | x_<t) for t < length.

    ``target`` and ``draft`` are ``[C, V]`` float64 arrays with one row per
    context of length 0..length-1, in the order of `context_rows`.
    """

    target: np.ndarray
    draft: np.ndarray
    vocab: int
    length: int

    def row(self, table: np.ndarray, context: tuple[int, ...]) -> np.ndarray:
        index = sum(self.vocab**j for j in range(len(context)))
        position = 0
        for token in context:
            position = position * self.vocab + token
        return table[index + position]


@dataclasses.dataclass(frozen=True)
class LatentFixture:
    """One NCM level: p(z), p(x_i | z) and the draft's q(z), q(x_i | z).

    Shapes: ``target_latent [K]``, ``target_tokens [K, N, V]`` and likewise for the draft.
    """

    target_latent: np.ndarray
    target_tokens: np.ndarray
    draft_latent: np.ndarray
    draft_tokens: np.ndarray


# --- single-step branches ---------------------------------------------------------


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Normalised max(p - q, 0); p itself where that mass is zero (as the kernels do)."""
    mass_row = np.maximum(p - q, 0.0)
    mass = mass_row.sum()
    return mass_row / mass if mass > RESIDUAL_FLOOR else p


def acceptance(p_x: float, q_x: float) -> float:
    """P(u * q < p) for u uniform on (0, 1): min(1, p/q); 1 when q = 0 < p."""
    if q_x <= 0:
        return 1.0 if p_x > 0 else 0.0
    return min(1.0, p_x / q_x)


def factorized_position(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Output distribution of one position: draft x ~ q, accept or correct."""
    return flawed_position(p, q, q)


def product_distribution(rows: list[np.ndarray]) -> dict[tuple[int, ...], float]:
    """Joint of independent positions with the given marginals."""
    joint: dict[tuple[int, ...], float] = {}
    supports = [np.flatnonzero(row > 0) for row in rows]
    for outcome in itertools.product(*supports):
        joint[tuple(int(x) for x in outcome)] = float(np.prod([row[x] for row, x in zip(rows, outcome)]))
    return joint


def add_into(total: dict, part: dict, weight: float, prefix: tuple = ()) -> None:
    for outcome, probability in part.items():
        total[prefix + outcome] += weight * probability


# --- chain verification ------------------------------------------------------------


DraftLength = Callable[[tuple[int, ...]], int]


def chain_round(fixture: AutoregressiveFixture, context: tuple[int, ...], num_draft: int) -> dict:
    """Distribution of the tokens one chain round emits after `context`."""
    emitted: dict[tuple[int, ...], float] = defaultdict(float)

    def branch(accepted: tuple[int, ...], mass: float) -> None:
        here = context + accepted
        p = fixture.row(fixture.target, here)
        if len(accepted) == num_draft:  # every draft stood: the bonus token
            for y in np.flatnonzero(p > 0):
                emitted[accepted + (int(y),)] += mass * p[y]
            return
        q = fixture.row(fixture.draft, here)
        correction = residual(p, q)
        for x in np.flatnonzero(q > 0):
            accept = acceptance(p[x], q[x])
            if accept > 0:
                branch(accepted + (int(x),), mass * q[x] * accept)
            if accept < 1:
                for y in np.flatnonzero(correction > 0):
                    emitted[accepted + (int(y),)] += mass * q[x] * (1.0 - accept) * correction[y]

    branch((), 1.0)
    return dict(emitted)


def chain_output_distribution(fixture: AutoregressiveFixture, draft_length: DraftLength) -> dict:
    """Distribution of the first `fixture.length` tokens of repeated chain rounds.

    ``draft_length(context)`` gives each round's number of drafts; it must leave
    room for the round's corrected or bonus token inside the fixture's length.
    """
    finished: dict[tuple[int, ...], float] = defaultdict(float)
    frontier = {(): 1.0}
    while frontier:
        following: dict[tuple[int, ...], float] = defaultdict(float)
        for context, mass in frontier.items():
            num_draft = draft_length(context)
            if not 0 <= num_draft <= fixture.length - len(context) - 1:
                raise ValueError(f"draft_length: {num_draft} drafts do not fit after {context}")
            for tokens, probability in chain_round(fixture, context, num_draft).items():
                grown = context + tokens
                target = finished if len(grown) == fixture.length else following
                target[grown] += mass * probability
        frontier = following
    return dict(finished)


def acceptance_law(fixture: AutoregressiveFixture, context: tuple[int, ...], num_draft: int) -> np.ndarray:
    """Exact law of the number of accepted drafts in one round: ``[num_draft + 1]``."""
    law = np.zeros(num_draft + 1)
    for tokens, probability in chain_round(fixture, context, num_draft).items():
        law[len(tokens) - 1] += probability
    return law


def target_joint(fixture: AutoregressiveFixture) -> dict:
    """The target's joint distribution of its first `fixture.length` tokens."""
    joint = {}
    for outcome in itertools.product(range(fixture.vocab), repeat=fixture.length):
        probability = 1.0
        for t in range(fixture.length):
            probability *= fixture.row(fixture.target, outcome[:t])[outcome[t]]
        if probability > 0:
            joint[outcome] = probability
    return joint


def greedy_decoding(fixture: AutoregressiveFixture) -> tuple[int, ...]:
    """The target's argmax decoding (first index on ties, as argmax does)."""
    tokens: tuple[int, ...] = ()
    for _ in range(fixture.length):
        tokens += (int(np.argmax(fixture.row(fixture.target, tokens))),)
    return tokens


# --- latent-conditioned verification ----------------------------------------------------


def latent_marginal(fixture: LatentFixture) -> dict:
    """p(x) = sum_z p(z) prod_i p(x_i | z): the distribution a level must keep."""
    marginal: dict[tuple[int, ...], float] = defaultdict(float)
    for z in np.flatnonzero(fixture.target_latent > 0):
        add_into(marginal, product_distribution(list(fixture.target_tokens[z])), fixture.target_latent[z])
    return dict(marginal)


def factorized_output_distribution(target: np.ndarray, draft: np.ndarray) -> dict:
    """Output of factorised verification of ``[N, V]`` target and draft rows."""
    return product_distribution([factorized_position(p, q) for p, q in zip(target, draft)])


def latent_chain_output_distribution(fixture: LatentFixture, *, flawed: bool = False) -> dict:
    """Joint distribution of (latent, tokens) emitted by latent-chain verification.

    With ``flawed=True``: the tokens drafted under the draft's latent are always
    kept in play and verified against the emitted latent's target rows, with the
    draft's rows for the emitted latent standing in for the ones sampled from.
    """
    joint: dict[tuple[int, ...], float] = defaultdict(float)
    p_z, q_z = fixture.target_latent, fixture.draft_latent
    correction = residual(p_z, q_z)
    for z_draft in np.flatnonzero(q_z > 0):
        accept = acceptance(p_z[z_draft], q_z[z_draft])
        outcomes = [(z_draft, q_z[z_draft] * accept)]
        outcomes += [(z, q_z[z_draft] * (1 - accept) * correction[z]) for z in np.flatnonzero(correction > 0)]
        for z, mass in outcomes:
            if mass <= 0:
                continue
            target_rows = fixture.target_tokens[z]
            if z == z_draft:
                rows = [factorized_position(p, q) for p, q in zip(target_rows, fixture.draft_tokens[z])]
            elif flawed:
                rows = [
                    flawed_position(p, q_sampled, q_claimed)
                    for p, q_sampled, q_claimed in zip(target_rows, fixture.draft_tokens[z_draft], fixture.draft_tokens[z])
                ]
            else:  # a changed latent ends the chain: tokens come from the target
                rows = list(target_rows)
            add_into(joint, product_distribution(rows), mass, (int(z),))
    return dict(joint)


def flawed_position(p: np.ndarray, q_sampled: np.ndarray, q_claimed: np.ndarray) -> np.ndarray:
    """A position drafted from `q_sampled` but verified as if from `q_claimed` (correct when equal)."""
    out = np.zeros_like(p)
    correction = residual(p, q_claimed)
    for x in np.flatnonzero(q_sampled > 0):
        accept = acceptance(p[x], q_claimed[x])
        out[x] += q_sampled[x] * accept
        out += q_sampled[x] * (1.0 - accept) * correction
    return out


def tokens_marginal(joint: dict) -> dict:
    """Drop the latent (first entry) of a (latent, tokens) distribution."""
    marginal: dict[tuple[int, ...], float] = defaultdict(float)
    for outcome, probability in joint.items():
        marginal[outcome[1:]] += probability
    return dict(marginal)


def total_variation(first: dict, second: dict) -> float:
    outcomes = set(first) | set(second)
    return 0.5 * sum(abs(first.get(o, 0.0) - second.get(o, 0.0)) for o in outcomes)


def as_vector(distribution: dict, shape: tuple[int, ...]) -> np.ndarray:
    """Dense probabilities over all outcomes of `shape`, row-major (for chi-square plans)."""
    dense = np.zeros(int(np.prod(shape)))
    for outcome, probability in distribution.items():
        dense[np.ravel_multi_index(outcome, shape)] += probability
    return dense
