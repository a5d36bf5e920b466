"""Block verification in float64: the rule, its laws enumerated, the step at given uniforms.

Sun et al., "Block Verification Accelerates Speculative Decoding" (arXiv 2403.10444), Algorithm 2, for a
block of g drafts x_1..x_g drawn from q_1..q_g (``q_i = q(. | x_<i)``, p likewise, p_{g+1} the bonus row):
``w_0 = 1``, ``w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)``; ``rho_i = sum_x max(w_{i-1} p_i(x) - q_i(x), 0)``;
``h_i = rho_{i+1} / (rho_{i+1} + 1 - w_i)`` for i < g (1 at 0 / 0) and ``h_g = w_g``. Independent uniforms
``eta_i``; tau is the last i with ``eta_i < h_i`` (0 if none), so ``P(tau = i) = h_i prod_{j > i} (1 - h_j)``;
the last token comes from ``norm(max(w_tau p_{tau+1} - q_{tau+1}, 0))`` when tau < g, else from p_{g+1}.

A *block rule* gives, for one drafted block, the law of tau and the last token's law given tau, so that
published variants and planted bugs are judged by the same enumerations. Nothing here imports the reference.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from typing import Protocol

import numpy as np

from ncm_verify.oracles.exact import (
    RESIDUAL_FLOOR,
    AutoregressiveFixture,
    StepComparison,
    chain_output_distribution,
    chain_round,
    inverse_cdf,
)
from ncm_verify.oracles.exact_tree import judge_draw
from ncm_verify.tolerances import (
    FLOAT32_EPS,
    cdf_boundary_slack,
    float32_exact,
    prefix_weight_slack,
    sums_exactly,
    threshold_boundary_slack,
)

__all__ = [
    "PAD_TOKEN",
    "BlockRule",
    "BlockQuantities",
    "PaperRule",
    "PAPER_RULE",
    "block_quantities",
    "weighted_residual",
    "round_law",
    "accepted_length_law",
    "chain_accepted_length_law",
    "round_outcome_law",
    "output_distribution",
    "expected_accepted",
    "step",
    "compare_block_step",
    "boundaries",
]

PAD_TOKEN = -1


class BlockRule(Protocol):
    """A verification rule for one drafted block (rows of the block's contexts, as float64)."""

    def length_law(self, target: np.ndarray, draft: np.ndarray, drafts: np.ndarray) -> np.ndarray:
        """``[g+1]``: P(tau = i) for a block of g drafts; `target` ``[g+1, V]``, `draft` ``[g, V]``."""
        ...

    def last_row(self, target: np.ndarray, draft: np.ndarray, drafts: np.ndarray, tau: int) -> np.ndarray:
        """``[V]``: the law of the token emitted after tau accepted drafts."""
        ...


@dataclasses.dataclass(frozen=True)
class BlockQuantities:
    """``weights [g+1]`` w_0..w_g; ``masses [g]`` rho_1..rho_g; ``thresholds [g]`` h_1..h_g;
    ``terms [g]``: the positive terms of each rho; ``weight_errors [g+1]`` and ``mass_errors [g]``: how far a float32
    kernel's w and rho may sit from these, counting only the roundings the rows allow (`block_quantities`)."""

    weights: np.ndarray
    masses: np.ndarray
    thresholds: np.ndarray
    terms: np.ndarray
    weight_errors: np.ndarray
    mass_errors: np.ndarray


def weight_step_is_exact(previous: float, p_x: float, q_x: float) -> bool:
    """Whether float32 computes ``min(previous p(x) / q(x), 1)`` without rounding, product or quotient first: a true
    value of at least 1 clips to 1 however it rounds; else every intermediate must be a float32 value."""
    if q_x <= 0:
        return False
    if previous * p_x >= q_x:
        return True
    quotient, scaled = p_x / q_x, previous * p_x / q_x
    return bool(
        float32_exact(previous * p_x)
        and float32_exact(quotient)
        and quotient * q_x == p_x  # the float64 quotient itself exact
        and float32_exact(scaled)
        and scaled * q_x == previous * p_x
        and float32_exact(previous * quotient)
    )


def residual_terms_are_exact(weight: float, p: np.ndarray, q: np.ndarray) -> bool:
    """Whether float32 forms every positive ``w p(x) - q(x)`` and sums them without rounding, in any order (a
    negative one clips to 0 however it rounds: rounding is monotone and q(x) a float32 value)."""
    scaled = weight * p
    kept = np.maximum(scaled - q, 0.0)
    positive = kept > 0
    return bool(float32_exact(scaled[positive]).all() and float32_exact(kept).all() and sums_exactly(kept))


def denominator_error(mass: float, weight: float) -> float:
    """Rounding of ``rho + 1 - w`` in float32, either order: 0 where every partial result is a float32 value."""
    partials = (1.0 - weight, mass + (1.0 - weight), mass + 1.0, (mass + 1.0) - weight)
    return 0.0 if float32_exact(np.array(partials)).all() else 2 * FLOAT32_EPS * (mass + 1.0)


def block_quantities(target: np.ndarray, draft: np.ndarray, drafts: np.ndarray) -> BlockQuantities:
    """The paper's w, rho and h for one block, in float64, with float32's errors on w and rho.

    An error is 0 where float32 computes the value exactly whatever the order (rows of few-bit multiples of one power
    of two: `exact_steps`); else the any-order bound: 2 i eps32 w_i (`prefix_weight_slack`) and, for rho, w's
    error plus `cdf_boundary_slack` of its m positive terms.
    """
    count = len(drafts)
    weights, weight_errors = np.ones(count + 1), np.zeros(count + 1)
    for i, x in enumerate(drafts):
        weights[i + 1] = min(weights[i] * target[i, x] / draft[i, x], 1.0)
        exact = weight_errors[i] == 0 and weight_step_is_exact(weights[i], target[i, x], draft[i, x])
        weight_errors[i + 1] = 0.0 if exact else prefix_weight_slack(i + 1, weights[i + 1])
    terms = np.maximum(weights[:count, None] * target[:count] - draft, 0.0)
    masses = terms.sum(axis=1)
    positive = (terms > 0).sum(axis=1)
    mass_errors = np.zeros(count)
    for k in range(count):
        if weight_errors[k] or not residual_terms_are_exact(weights[k], target[k], draft[k]):
            mass_errors[k] = weight_errors[k] + cdf_boundary_slack(weights[k] + 1.0, int(positive[k]))
    thresholds = np.empty(count)
    for i in range(1, count + 1):
        if i == count:
            thresholds[i - 1] = weights[count]
            continue
        denominator = masses[i] + 1.0 - weights[i]
        thresholds[i - 1] = masses[i] / denominator if denominator > 0 else 1.0
    return BlockQuantities(weights, masses, thresholds, positive, weight_errors, mass_errors)


def weighted_residual(weight: float, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``norm(max(w p - q, 0))``; p where that mass is zero (as the chain's residual falls back)."""
    rest = np.maximum(weight * p - q, 0.0)
    mass = rest.sum()
    return rest / mass if mass > RESIDUAL_FLOOR else p


def last_passing_law(thresholds: np.ndarray) -> np.ndarray:
    """P(tau = i) when tau is the last i with an independent ``eta_i < h_i`` (0 if none)."""
    count = len(thresholds)
    law = np.empty(count + 1)
    for i in range(count + 1):
        law[i] = (thresholds[i - 1] if i else 1.0) * np.prod(1.0 - thresholds[i:])
    return law


class PaperRule:
    """Sun et al., Algorithm 2 (arXiv 2403.10444): the longest prefix passing its threshold stands."""

    def length_law(self, target, draft, drafts) -> np.ndarray:
        return last_passing_law(block_quantities(target, draft, drafts).thresholds)

    def last_row(self, target, draft, drafts, tau: int) -> np.ndarray:
        if tau == len(drafts):
            return target[tau]
        weight = block_quantities(target, draft, drafts).weights[tau]
        return weighted_residual(weight, target[tau], draft[tau])


PAPER_RULE = PaperRule()


def _blocks(fixture: AutoregressiveFixture, context: tuple[int, ...], count: int):
    """Every block of `count` drafts with positive draft probability after `context`: its probability, its
    target rows ``[count+1, V]`` and draft rows ``[count, V]``, grown prefix by prefix."""

    def grow(block: tuple[int, ...], probability: float, targets: list, drafts: list):
        targets = targets + [fixture.row(fixture.target, context + block)]
        if len(block) == count:
            yield block, probability, np.array(targets), np.array(drafts).reshape(count, fixture.vocab)
            return
        q = fixture.row(fixture.draft, context + block)
        for x in np.flatnonzero(q > 0):
            yield from grow(block + (int(x),), probability * q[x], targets, drafts + [q])

    yield from grow((), 1.0, [], [])


def round_law(rule: BlockRule, fixture: AutoregressiveFixture, context: tuple[int, ...], num_draft: int) -> dict:
    """The law of the tokens one round of `rule` emits after `context` with `num_draft` drafts."""
    emitted: dict[tuple[int, ...], float] = defaultdict(float)
    for block, probability, target, draft in _blocks(fixture, context, num_draft):
        drafts = np.array(block, dtype=np.int64)
        for tau, chance in enumerate(rule.length_law(target, draft, drafts)):
            if chance <= 0:
                continue
            row = rule.last_row(target, draft, drafts, tau)
            for y in np.flatnonzero(row > 0):
                emitted[block[:tau] + (int(y),)] += probability * chance * row[y]
    return dict(emitted)


def accepted_length_law(rule: BlockRule, fixture: AutoregressiveFixture, context: tuple, num_draft: int) -> np.ndarray:
    """``[num_draft + 1]``: the law of the accepted count of one round."""
    law = np.zeros(num_draft + 1)
    for block, probability, target, draft in _blocks(fixture, context, num_draft):
        law += probability * rule.length_law(target, draft, np.array(block, dtype=np.int64))
    return law


def chain_accepted_length_law(fixture: AutoregressiveFixture, context: tuple, num_draft: int) -> np.ndarray:
    """The chain rule's accepted-count law of the same round (from `exact.chain_round`)."""
    law = np.zeros(num_draft + 1)
    for tokens, probability in chain_round(fixture, context, num_draft).items():
        law[len(tokens) - 1] += probability
    return law


def round_outcome_law(round_law, fixture: AutoregressiveFixture, max_draft: int) -> np.ndarray:
    """Exact law of (drafts g, accepted count, last token) of one round at the empty context when g is uniform
    on 0..G: ``[G+1, G+1, V]``; ``round_law(fixture, context, g)`` is a rule's (`round_law`, `exact.chain_round`)."""
    law = np.zeros((max_draft + 1, max_draft + 1, fixture.vocab))
    for drafts in range(max_draft + 1):
        for tokens, probability in round_law(fixture, (), drafts).items():
            law[drafts, len(tokens) - 1, tokens[-1]] += probability / (max_draft + 1)
    return law


def expected_accepted(law: np.ndarray) -> float:
    """E[tau] of an accepted-count law; tokens per target pass are one more."""
    return float(np.dot(np.arange(len(law)), law))


def output_distribution(rule: BlockRule, fixture: AutoregressiveFixture, draft_length) -> dict:
    """The law of the first `fixture.length` tokens of repeated rounds of `rule` (``draft_length(context)``)."""
    return chain_output_distribution(fixture, draft_length, round_law=functools.partial(round_law, rule))


# --- one step at given uniforms: the float64 oracle of apply_block ---------------------------


def _widened(target, draft, drafts, num_draft, uniforms):
    return (
        np.asarray(target, dtype=np.float64),
        np.asarray(draft, dtype=np.float64),
        np.asarray(drafts, dtype=np.int64),
        np.asarray(num_draft, dtype=np.int64),
        np.asarray(uniforms, dtype=np.float64),
    )


def _sequence(target, draft, drafts, num_draft, b: int):
    g = int(num_draft[b])
    return target[b, : g + 1], draft[b, :g], drafts[b, :g]


def _decided_length(quantities: BlockQuantities, uniforms_row: np.ndarray) -> int:
    passed = [i + 1 for i, h in enumerate(quantities.thresholds) if uniforms_row[i] < h]
    return max(passed, default=0)


def _last_weights(target, draft, quantities: BlockQuantities, tau: int) -> np.ndarray:
    """Unnormalised weights of the last draw: ``max(w_tau p - q, 0)`` (p if that is 0), or the bonus row."""
    if tau == len(quantities.thresholds):
        return target[tau]
    rest = np.maximum(quantities.weights[tau] * target[tau] - draft[tau], 0.0)
    return rest if rest.sum() > RESIDUAL_FLOOR else target[tau]


def step(target, draft, drafts, num_draft, uniforms) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens [B, G+1], num_accepted [B])`` of the block step in float64 given uniforms ``[B, 2, G+1]``."""
    target, draft, drafts, num_draft, uniforms = _widened(target, draft, drafts, num_draft, uniforms)
    batch, width = drafts.shape[0], drafts.shape[1] + 1
    tokens, accepted = np.full((batch, width), PAD_TOKEN), np.zeros(batch, dtype=np.int64)
    for b in range(batch):
        p, q, x = _sequence(target, draft, drafts, num_draft, b)
        quantities = block_quantities(p, q, x)
        tau = _decided_length(quantities, uniforms[b, 0])
        accepted[b], tokens[b, :tau] = tau, x[:tau]
        tokens[b, tau] = inverse_cdf(_last_weights(p, q, quantities, tau), uniforms[b, 1, 0])
    return tokens, accepted


def boundaries(args: tuple, uniforms: np.ndarray, b: int, row: int, column: int) -> np.ndarray:
    """Where the float64 step's decision for ``uniforms[b, row, column]`` flips, given the uniforms before it."""
    target, draft, drafts, num_draft, wide = _widened(args[0], args[1], args[2], args[3], uniforms)
    p, q, x = _sequence(target, draft, drafts, num_draft, b)
    quantities = block_quantities(p, q, x)
    if row == 0:
        if column >= len(x):
            return np.zeros(0)
        h = quantities.thresholds[column]
        return np.array([h]) if 0 < h < 1 else np.zeros(0)
    if column:
        return np.zeros(0)
    weights = _last_weights(p, q, quantities, _decided_length(quantities, wide[b, 0]))
    cumulative = np.cumsum(weights) / weights.sum()
    return cumulative[np.flatnonzero(weights > 0)[:-1]]


def _judge_threshold(comparison: StepComparison, where: str, kernel: bool, u: float, q: BlockQuantities, i: int):
    """Position i (1-based) passed iff ``u < h_i``; near h excused within `threshold_boundary_slack` of w's and
    rho's float32 errors (`BlockQuantities`): two ulps of h where the rows make both exact."""
    comparison.decisions += 1
    h = float(q.thresholds[i - 1])
    if bool(kernel) == (u < h):
        return
    count = len(q.thresholds)
    if i == count:
        slack = q.weight_errors[i] + 2 * FLOAT32_EPS * max(u, h)
    else:
        mass, weight = float(q.masses[i]), float(q.weights[i])
        rounding = denominator_error(mass, weight)
        slack = threshold_boundary_slack(u, mass, weight, q.mass_errors[i], q.weight_errors[i], rounding)
    line = f"{where}: passed={bool(kernel)}, float64 says {u < h} (u={u!r}, h={h!r}, u-h={u - h:.3g})"
    (comparison.excused if abs(u - h) <= slack else comparison.mismatches).append(line)


def compare_block_step(target, draft, drafts, num_draft, uniforms, tokens, num_accepted) -> StepComparison:
    """`apply_block`'s outcome against the float64 step, decision by decision.

    The outcome shows tau: position tau passed its threshold and every later one failed (earlier ones are
    not observed). Then the kept drafts, the padding and the last draw, whose weights may drift by the float32
    prefix weight's error.
    """
    target, draft, drafts, num_draft, uniforms = _widened(target, draft, drafts, num_draft, uniforms)
    tokens, num_accepted = np.asarray(tokens), np.asarray(num_accepted)
    comparison = StepComparison()
    for b in range(len(num_draft)):
        p, q, x = _sequence(target, draft, drafts, num_draft, b)
        g, k = len(x), int(num_accepted[b])
        if not 0 <= k <= g:
            comparison.mismatches.append(f"sequence {b}: {k} accepted of {g} drafts")
            continue
        quantities = block_quantities(p, q, x)
        for i in range(max(k, 1), g + 1):
            _judge_threshold(
                comparison, f"sequence {b} position {i}", i == k, float(uniforms[b, 0, i - 1]), quantities, i
            )
        comparison.same(f"sequence {b} kept drafts", tokens[b, :k], x[:k])
        comparison.same(f"sequence {b} padding", tokens[b, k + 1 :], np.full(tokens.shape[1] - k - 1, PAD_TOKEN))
        weights = _last_weights(p, q, quantities, k)
        if k < g:
            w, rounded = quantities.weights[k], quantities.mass_errors[k] > 0
            error = quantities.weight_errors[k] * p[k] + rounded * 2 * FLOAT32_EPS * (w * p[k] + q[k])
        else:
            error = np.zeros_like(weights)
        what = "correction" if k < g else "bonus"
        judge_draw(
            comparison, f"sequence {b} {what} at position {k}", int(tokens[b, k]), weights, error, uniforms[b, 1, 0]
        )
    return comparison
