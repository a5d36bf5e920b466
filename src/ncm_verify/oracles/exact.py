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
from collections.abc import Callable

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


def residual(p, q) -> np.ndarray:
    """Normalised max(p - q, 0) per row of ``[..., V]``, in float64; p where that mass is zero (as the kernels do)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    mass_rows = np.maximum(p - q, 0.0)
    mass = mass_rows.sum(axis=-1, keepdims=True)
    return np.where(mass > RESIDUAL_FLOOR, mass_rows / np.maximum(mass, RESIDUAL_FLOOR), p)


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


def chain_output_distribution(fixture: AutoregressiveFixture, draft_length: DraftLength, round_law=None) -> dict:
    """Distribution of the first `fixture.length` tokens of repeated chain rounds.

    ``draft_length(context)`` gives each round's number of drafts; it must leave
    room for the round's corrected or bonus token inside the fixture's length.
    ``round_law(fixture, context, num_draft)`` replaces `chain_round` (another rule's rounds).
    """
    round_law = round_law or chain_round
    finished: dict[tuple[int, ...], float] = defaultdict(float)
    frontier = {(): 1.0}
    while frontier:
        following: dict[tuple[int, ...], float] = defaultdict(float)
        for context, mass in frontier.items():
            num_draft = draft_length(context)
            if not 0 <= num_draft <= fixture.length - len(context) - 1:
                raise ValueError(f"draft_length: {num_draft} drafts do not fit after {context}")
            for tokens, probability in round_law(fixture, context, num_draft).items():
                grown = context + tokens
                target = finished if len(grown) == fixture.length else following
                target[grown] += mass * probability
        frontier = following
    return dict(finished)


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
                    for p, q_sampled, q_claimed in zip(
                        target_rows, fixture.draft_tokens[z_draft], fixture.draft_tokens[z]
                    )
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


# --- one step given its uniforms: float64 oracles of the apply_* kernels ----------------
#
# The protocol's uniforms ``[B, 2, C]``: row 0 decides acceptance (draft i accepted iff
# u q(x) < p(x), i.e. u < min(1, p/q)); row 1 draws corrections by inverse CDF, the
# smallest id k with u S_V <= S_k over the cumulative weights S. The chain draws its
# corrected or bonus token with column 0 of row 1; the factorised step position i with
# column i; the latent chain its latent with column 0 and token i with column i + 1.


def inverse_cdf(weights: np.ndarray, u: float) -> int:
    """The id an inverse-CDF draw with uniform `u` takes from unnormalised `weights`."""
    cumulative = np.cumsum(weights)
    return int(np.count_nonzero(cumulative < float(u) * cumulative[-1]))


def draw_is_excused(weights: np.ndarray, u: float, drawn: int, exact_id: int) -> bool:
    """Whether a float32 draw of `drawn` instead of `exact_id` lies within rounding (see tolerances)."""
    from ncm_verify.tolerances import draw_boundary_slack

    if not 0 <= drawn < len(weights) or weights[drawn] <= 0:
        return False
    cumulative = np.cumsum(weights)
    boundaries = cumulative[min(drawn, exact_id) : max(drawn, exact_id)]
    slack = draw_boundary_slack(weights)
    return bool(np.all(np.abs(float(u) * cumulative[-1] - boundaries) <= slack))


@dataclasses.dataclass
class StepComparison:
    """A kernel's decisions against the float64 step, one sequence at a time.

    Where the kernel took a near-boundary decision the other way, the oracle follows
    it (counted in `excused`) and compares what follows; anything else is a mismatch.
    """

    decisions: int = 0
    excused: list = dataclasses.field(default_factory=list)
    mismatches: list = dataclasses.field(default_factory=list)

    def acceptance(self, where: str, kernel: bool, p_x: float, q_x: float, u: float) -> None:
        """Draft accepted iff u q < p (q = 0 < p accepts; p = 0 never does)."""
        from ncm_verify.tolerances import accept_boundary_slack

        self.decisions += 1
        p_x, q_x, u = float(p_x), float(q_x), float(u)
        exact_accept = u * q_x < p_x
        if bool(kernel) == exact_accept:
            return
        gap = u * q_x - p_x
        line = (
            f"{where}: accepted={bool(kernel)}, float64 says {exact_accept} "
            f"(u={u!r}, p={p_x!r}, q={q_x!r}, uq-p={gap:.3g})"
        )
        near = abs(gap) <= accept_boundary_slack(u * q_x, p_x)
        (self.excused if near else self.mismatches).append(line)

    def draw(self, where: str, kernel_id: int, weights: np.ndarray, u: float) -> None:
        """An inverse-CDF draw from `weights` with uniform `u`."""
        self.decisions += 1
        u, kernel_id = float(u), int(kernel_id)
        exact_id = inverse_cdf(weights, u)
        if int(kernel_id) == exact_id:
            return
        weight = weights[kernel_id] if 0 <= kernel_id < len(weights) else float("nan")
        line = f"{where}: drew id {kernel_id} (weight {weight:.3g}), float64 inverse CDF gives {exact_id} (u={u!r})"
        excused = draw_is_excused(weights, u, int(kernel_id), exact_id)
        (self.excused if excused else self.mismatches).append(line)

    def same(self, where: str, kernel, expected) -> None:
        """Values the step fixes outright (kept drafts, padding, flags of ineligible drafts)."""
        kernel, expected = np.asarray(kernel), np.asarray(expected)
        if kernel.shape != expected.shape or not np.array_equal(kernel, expected):
            self.mismatches.append(f"{where}: {kernel.tolist()}, expected {expected.tolist()}")


def compare_position(comparison: StepComparison, where: str, p, q, draft: int, u_accept, u_draw, accepted, token):
    """One factorised position: draft accepted, or a correction from residual(p, q)."""
    comparison.acceptance(f"{where} accept", accepted, p[draft], q[draft], u_accept)
    if accepted:
        comparison.same(f"{where} token", token, draft)
    else:
        comparison.draw(f"{where} correction", token, residual(p, q), u_draw)


def compare_chain_step(target, draft, drafts, num_draft, uniforms, tokens, num_accepted) -> StepComparison:
    """`apply_chain`'s outcome against the chain step in float64 (arrays as NumPy)."""
    comparison = StepComparison()
    for b in range(len(num_draft)):
        n, k = int(num_draft[b]), int(num_accepted[b])
        if not 0 <= k <= n:
            comparison.mismatches.append(f"sequence {b}: {k} accepted of {n} drafts")
            continue
        for i in range(min(k + 1, n)):
            x = int(drafts[b, i])
            where = f"sequence {b} draft {i} (id {x})"
            comparison.acceptance(where, i < k, target[b, i, x], draft[b, i, x], uniforms[b, 0, i])
        comparison.same(f"sequence {b} kept drafts", tokens[b, :k], drafts[b, :k])
        comparison.same(f"sequence {b} padding", tokens[b, k + 1 :], np.full(len(tokens[b]) - k - 1, -1))
        weights = residual(target[b, k], draft[b, k]) if k < n else target[b, k]
        what = "correction" if k < n else "bonus"
        comparison.draw(f"sequence {b} {what} at position {k}", tokens[b, k], weights, uniforms[b, 1, 0])
    return comparison


def compare_factorized_step(target, draft, drafts, uniforms, tokens, accepted) -> StepComparison:
    """`apply_factorized`'s outcome against the factorised step in float64."""
    comparison = StepComparison()
    for b, i in np.ndindex(*drafts.shape):
        compare_position(
            comparison,
            f"sequence {b} position {i}",
            target[b, i],
            draft[b, i],
            int(drafts[b, i]),
            uniforms[b, 0, i],
            uniforms[b, 1, i],
            bool(accepted[b, i]),
            int(tokens[b, i]),
        )
    return comparison


def compare_latent_chain_step(
    target_latent, draft_latent, drafted_latent, target_tokens, draft_tokens, drafts, uniforms, *outcome
) -> StepComparison:
    """`apply_latent_chain`'s outcome (latent, latent_accepted, tokens, accepted) against float64.

    The latent is a chain step over the codebook; if it stands the tokens are verified
    factorised under it, otherwise every token is drawn from the target given the new latent.
    """
    latent, latent_accepted, tokens, accepted = (np.asarray(a) for a in outcome)
    comparison = StepComparison()
    for b in range(len(drafted_latent)):
        z_draft, z = int(drafted_latent[b]), int(latent[b])
        compare_position(
            comparison,
            f"sequence {b} latent",
            target_latent[b],
            draft_latent[b],
            z_draft,
            uniforms[b, 0, 0],
            uniforms[b, 1, 0],
            bool(latent_accepted[b]),
            z,
        )
        if not 0 <= z < len(target_latent[b]):
            continue
        for i in range(drafts.shape[1]):
            where = f"sequence {b} token {i}"
            if latent_accepted[b]:
                compare_position(
                    comparison,
                    where,
                    target_tokens[b, z, i],
                    draft_tokens[b, z, i],
                    int(drafts[b, i]),
                    uniforms[b, 0, i + 1],
                    uniforms[b, 1, i + 1],
                    bool(accepted[b, i]),
                    int(tokens[b, i]),
                )
            else:
                comparison.same(f"{where} accepted after a changed latent", accepted[b, i], False)
                comparison.draw(f"{where} from the target", tokens[b, i], target_tokens[b, z, i], uniforms[b, 1, i + 1])
    return comparison


def chain_judged_pair(args: tuple, b: int, column: int) -> tuple[float, float] | None:
    """``(p(x), q(x))`` of the draft that column `column` of uniform row 0 judges in sequence `b`; None if unused.

    `args` are the kernel's float64 arguments (``num_draft`` last); the same holds for the other kernels.
    """
    target, draft, drafts, num_draft = args
    if column >= num_draft[b]:
        return None
    x = drafts[b, column]
    return target[b, column, x], draft[b, column, x]


def factorized_judged_pair(args: tuple, b: int, column: int) -> tuple[float, float] | None:
    target, draft, drafts = args
    x = drafts[b, column]
    return target[b, column, x], draft[b, column, x]


def latent_chain_judged_pair(args: tuple, b: int, column: int) -> tuple[float, float] | None:
    """Column 0 judges the latent, column i + 1 token i under it."""
    target_latent, draft_latent, drafted_latent, target_tokens, draft_tokens, drafts = args
    z = drafted_latent[b]
    if column == 0:
        return target_latent[b, z], draft_latent[b, z]
    x = drafts[b, column - 1]
    return target_tokens[b, z, column - 1, x], draft_tokens[b, z, column - 1, x]


def _accepted(judged_pair, args: tuple, uniforms: np.ndarray, b: int, column: int) -> bool:
    p_x, q_x = judged_pair(args, b, column)
    return uniforms[b, 0, column] * q_x < p_x


def chain_drawn_weights(args: tuple, uniforms: np.ndarray, b: int, column: int) -> np.ndarray | None:
    """The weights column `column` of uniform row 1 draws from in the exact step given `uniforms`; None if unused."""
    target, draft, _, num_draft = args
    if column:
        return None
    k = 0
    while k < num_draft[b] and _accepted(chain_judged_pair, args, uniforms, b, k):
        k += 1
    return residual(target[b, k], draft[b, k]) if k < num_draft[b] else target[b, k]


def factorized_drawn_weights(args: tuple, uniforms: np.ndarray, b: int, column: int) -> np.ndarray | None:
    return residual(args[0][b, column], args[1][b, column])


def latent_chain_drawn_weights(args: tuple, uniforms: np.ndarray, b: int, column: int) -> np.ndarray | None:
    target_latent, draft_latent, drafted_latent, target_tokens, draft_tokens, _ = args
    latent_row = residual(target_latent[b], draft_latent[b])
    if column == 0:
        return latent_row
    if _accepted(latent_chain_judged_pair, args, uniforms, b, 0):
        z = drafted_latent[b]
        return residual(target_tokens[b, z, column - 1], draft_tokens[b, z, column - 1])
    return target_tokens[b, inverse_cdf(latent_row, uniforms[b, 1, 0]), column - 1]


def decision_boundaries(judged_pair, drawn_weights):
    """``boundaries(args, uniforms, b, row, column)``: where a step's float64 decision for that uniform flips.

    At p/q for an acceptance (row 0, from `judged_pair`), at the cumulative weights for a draw (row 1, from
    `drawn_weights`, given the uniforms before it).
    """

    def boundaries(args: tuple, uniforms: np.ndarray, b: int, row: int, column: int) -> np.ndarray:
        if row == 0:
            pair = judged_pair(args, b, column)
            if pair is None or not 0 < pair[0] < pair[1]:
                return np.zeros(0)
            return np.array([pair[0] / pair[1]])
        weights = drawn_weights(args, uniforms, b, column)
        if weights is None:
            return np.zeros(0)
        cumulative = np.cumsum(weights) / weights.sum()
        return cumulative[np.flatnonzero(weights > 0)[:-1]]

    return boundaries
