"""Tree verification in float64: sibling rules, the step at given uniforms, and the exact laws.

The shared format is ``notes/tree_interface.md``. A *sibling rule* decides, at one
visited node, which of its children stands; it is stateful so that published rules fit it:

``start(p_row, q_row) -> state``; ``accept(state, i, x) -> probability`` of accepting child i
(token x) given that every earlier sibling was rejected; ``reject(state, i, x) -> state``;
``correction(state) -> row`` (the law after every child was rejected); ``bonus(p_row) -> row``
(the law after an accepted leaf).

How the children were drawn is a separate *mode* (`MODES`): i.i.d. from q, from q without
replacement, or the top k of q. The enumerator takes any rule with any mode, so that literature
rules and planted bugs are judged by the same laws. Nothing here imports the reference kernels.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from ncm_verify.oracles.exact import (
    RESIDUAL_FLOOR,
    AutoregressiveFixture,
    StepComparison,
    acceptance,
    inverse_cdf,
    target_joint,
)
from ncm_verify.tolerances import (
    CDF_BOUNDARY_TERMS,
    FLOAT32_EPS,
    accept_boundary_slack,
    draw_boundary_slack,
    float32_exact,
    sums_exactly,
)

__all__ = [
    "MODES",
    "PAD_TOKEN",
    "SiblingRule",
    "SiblingState",
    "ResidualRule",
    "REFERENCE_RULES",
    "reference_rule",
    "proposal",
    "children_law",
    "TreeLaws",
    "round_law",
    "tree_laws",
    "tree_nodes",
    "chain_parents",
    "TreeStep",
    "Walk",
    "walk",
    "step",
    "boundaries",
    "compare_tree_step",
    "residual_drift",
    "proposal_error",
    "residual_error",
    "target_joint",
]

MODES = ("with_replacement", "without_replacement", "top_k")
"""How a node's children were drawn from its draft row q."""
PAD_TOKEN = -1


class SiblingRule(Protocol):
    """The decisions at one visited node, child by child (see the module docstring)."""

    def start(self, p_row: np.ndarray, q_row: np.ndarray) -> Any: ...

    def accept(self, state: Any, i: int, x: int) -> float: ...

    def reject(self, state: Any, i: int, x: int) -> Any: ...

    def correction(self, state: Any) -> np.ndarray: ...

    def bonus(self, p_row: np.ndarray) -> np.ndarray: ...


class SiblingState(NamedTuple):
    """The reference rules' state: the current residual, the node's draft row, the siblings tried.

    ``error`` bounds, per id, how far a float32 kernel's residual (normalised) may sit from ``residual``
    after the same rejections: zero at a fresh node, grown by `residual_drift` at each rejection.
    """

    residual: np.ndarray
    draft: np.ndarray
    tried: tuple[int, ...]
    error: np.ndarray


def proposal(mode: str, draft: np.ndarray, tried: Sequence[int], x: int) -> np.ndarray:
    """q_i: the law child i (token x) was drawn from, given the earlier siblings' tokens `tried`.

    with_replacement: q; without_replacement: q renormalised over the tokens not tried; top_k: a point mass at x.
    """
    if mode == "with_replacement":
        return draft
    if mode == "without_replacement":
        if not tried:  # q itself, undivided, as the kernels take it
            return draft
        left = draft.copy()
        left[list(tried)] = 0.0
        mass = left.sum()
        return left / mass if mass > 0 else left
    if mode == "top_k":
        point = np.zeros_like(draft)
        point[x] = 1.0
        return point
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


def _renormalised_residual(residual: np.ndarray, q_i: np.ndarray) -> np.ndarray:
    """norm(max(r - q_i, 0)); r itself where that mass is zero (rejection then had probability 0)."""
    rest = np.maximum(residual - q_i, 0.0)
    mass = rest.sum()
    return rest / mass if mass > RESIDUAL_FLOOR else residual


def residual_drift(state: SiblingState, q_i: np.ndarray, q_error: np.ndarray) -> np.ndarray:
    """A first-order bound (each rounding counted at a full eps32) on a float32 kernel's r' = norm(max(r - q_i, 0)).

    The difference carries r's and q_i's errors and its own roundings (``m q_i`` is exact at a fresh
    node, where m = 1); the mass sums m positive terms. Where the mass is within its own error, float32
    cannot tell the residual at all: every id's bound is then above 1.
    """
    fresh = not state.tried
    difference = state.residual - q_i
    # A negative difference clips to 0 however it rounds (rounding is monotone): only the kept terms must be exact.
    kept = np.maximum(difference, 0.0)
    if not state.error.any() and not q_error.any() and float32_exact(kept).all() and sums_exactly(kept):
        return normalisation_error(kept)
    error = state.error + q_error + FLOAT32_EPS * (np.abs(difference) + (0.0 if fresh else q_i))
    rest = np.maximum(difference, 0.0)
    mass, terms = rest.sum(), np.count_nonzero(rest + error)
    mass_error = error.sum() + terms * FLOAT32_EPS * (mass + error.sum())
    if mass <= RESIDUAL_FLOOR:
        return state.error if mass + mass_error <= RESIDUAL_FLOOR else state.residual + 1.0
    if mass <= mass_error:
        return rest / mass + 1.0
    return (error + rest / mass * mass_error) / (mass - mass_error)


def normalisation_error(rest: np.ndarray) -> np.ndarray:
    """Per id, how far float32's ``rest / sum(rest)`` may sit from its float64 value when the sum is exact in any
    order (`sums_exactly`): nothing for a power-of-two sum (or none), else the division's one rounding."""
    mass = rest.sum()
    if mass <= RESIDUAL_FLOOR or np.frexp(mass)[0] == 0.5:
        return np.zeros_like(rest)
    return FLOAT32_EPS * rest / mass


def proposal_error(mode: str, state: SiblingState, q_i: np.ndarray) -> np.ndarray:
    """Bound on a float32 q_i: without replacement, after a sibling, q divided by a float32 sum of m terms (its one
    rounding where the sum is exact in any order)."""
    if mode != "without_replacement" or not state.tried:
        return np.zeros_like(q_i)
    left = state.draft.copy()
    left[list(state.tried)] = 0.0
    if float32_exact(left).all() and sums_exactly(left):
        return normalisation_error(left)
    return (np.count_nonzero(q_i) + CDF_BOUNDARY_TERMS) * FLOAT32_EPS * q_i


@dataclasses.dataclass(frozen=True)
class ResidualRule:
    """The exact sibling rule: accept child i iff u q_i(x) < r(x); on rejection r <- norm(max(r - q_i, 0))."""

    mode: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {self.mode!r}")

    def start(self, p_row: np.ndarray, q_row: np.ndarray) -> SiblingState:
        p_row = np.asarray(p_row, dtype=np.float64)
        return SiblingState(p_row, np.asarray(q_row, dtype=np.float64), (), np.zeros_like(p_row))

    def pair(self, state: SiblingState, i: int, x: int) -> tuple[float, float]:
        """``(r(x), q_i(x))``: child i is accepted iff ``u * q_i(x) < r(x)``."""
        return float(state.residual[x]), float(proposal(self.mode, state.draft, state.tried, x)[x])

    def accept(self, state: SiblingState, i: int, x: int) -> float:
        return acceptance(*self.pair(state, i, x))

    def reject(self, state: SiblingState, i: int, x: int) -> SiblingState:
        q_i = proposal(self.mode, state.draft, state.tried, x)
        error = residual_drift(state, q_i, proposal_error(self.mode, state, q_i))
        return SiblingState(_renormalised_residual(state.residual, q_i), state.draft, state.tried + (x,), error)

    def correction(self, state: SiblingState) -> np.ndarray:
        return state.residual

    def bonus(self, p_row: np.ndarray) -> np.ndarray:
        return np.asarray(p_row, dtype=np.float64)


REFERENCE_RULES = {mode: ResidualRule(mode) for mode in MODES}


def reference_rule(mode: str) -> ResidualRule:
    """The exact rule for children drawn by `mode`."""
    if mode not in REFERENCE_RULES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    return REFERENCE_RULES[mode]


# --- the draft tree's law -----------------------------------------------------------------


def children_law(q: np.ndarray, count: int, mode: str) -> list[tuple[tuple[int, ...], float]]:
    """Every tuple of `count` children a node with draft row `q` can draw, with its probability.

    Without replacement, a node whose support has fewer tokens draws them all; top_k takes the
    `count` most likely tokens (ties to the smaller id), deterministically.
    """
    q = np.asarray(q, dtype=np.float64)
    support = [int(x) for x in np.flatnonzero(q > 0)]
    if mode == "with_replacement":
        return [
            (children, float(np.prod([q[x] for x in children])))
            for children in itertools.product(support, repeat=count)
        ]
    if mode == "without_replacement":
        laws = []
        for children in itertools.permutations(support, min(count, len(support))):
            probability = 1.0
            for j, x in enumerate(children):
                # The mass left summed afresh: 1 - q(x) cancels when q(x) is near 1.
                probability *= q[x] / np.delete(q, children[:j]).sum()
            laws.append((children, probability))
        return laws
    if mode == "top_k":
        order = np.argsort(-q, kind="stable")[: min(count, len(q))]
        return [(tuple(int(x) for x in order), 1.0)]
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")


@dataclasses.dataclass(frozen=True)
class TreeLaws:
    """What one tree round does, exactly.

    ``round``: law of the round's emitted tokens (the accepted path, then one corrected or bonus
    token); ``emitted``: that continued by target samples to the fixture's length; ``accepted_length``:
    law of the path's length; ``tokens_per_pass``: expected tokens emitted per target pass (the round).
    """

    round: dict
    emitted: dict
    accepted_length: dict
    tokens_per_pass: float


def _check_shape(shape: Sequence[int], room: int) -> tuple[int, ...]:
    shape = tuple(int(k) for k in shape)
    if any(k < 1 for k in shape):
        raise ValueError(f"shape: children per depth must be >= 1, got {shape}")
    if len(shape) > room:
        raise ValueError(f"shape: depth {len(shape)} leaves no room for the bonus within {room + 1} tokens")
    return shape


def round_law(
    rule: SiblingRule, fixture: AutoregressiveFixture, shape: Sequence[int], mode: str, context: tuple[int, ...] = ()
) -> dict:
    """Law of the tokens one tree round emits after `context`: every draft tree of `shape` drawn by `mode`
    (children per depth) times every acceptance branch of `rule`."""
    shape = _check_shape(shape, fixture.length - len(context) - 1)

    @functools.cache
    def node(here: tuple[int, ...], depth: int) -> dict:
        p = fixture.row(fixture.target, here)
        emitted: dict[tuple[int, ...], float] = defaultdict(float)
        if depth == len(shape):
            _spread(emitted, (), rule.bonus(p), 1.0)
            return dict(emitted)
        q = fixture.row(fixture.draft, here)
        for children, drawn in children_law(q, shape[depth], mode):
            state, left = rule.start(p, q), drawn
            for i, x in enumerate(children):
                accept = float(rule.accept(state, i, x))
                if accept > 0:
                    for tail, probability in node(here + (x,), depth + 1).items():
                        emitted[(x,) + tail] += left * accept * probability
                left *= 1.0 - accept
                if left <= 0:
                    break
                state = rule.reject(state, i, x)
            if left > 0:
                _spread(emitted, (), rule.correction(state), left)
        return dict(emitted)

    return node(tuple(context), 0)


def handed_round_outcomes(target, draft, tree_tokens, parents, mode: str) -> list[tuple[tuple[int, ...], int, float]]:
    """The outcomes of verifying one drafted tree, under the rows it was handed: ``(accepted path, last token,
    probability)`` for every branch of the exact rule (`reference_rule`), its children taken as drawn.

    `target` and `draft` are ``[N+1, V]`` (the root's row first), `tree_tokens` and `parents` ``[N]``.
    """
    rule = reference_rule(mode)
    target, draft = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    outcomes: list[tuple[tuple[int, ...], int, float]] = []

    def visit(current: int, path: tuple[int, ...], mass: float) -> None:
        children = [n for n in range(len(parents)) if int(parents[n]) == current]
        if not children:
            row = rule.bonus(target[current + 1])
            outcomes.extend((path, int(y), mass * row[y] / row.sum()) for y in np.flatnonzero(row > 0))
            return
        state, left = rule.start(target[current + 1], draft[current + 1]), mass
        for i, n in enumerate(children):
            accept = float(rule.accept(state, i, int(tree_tokens[n])))
            if accept > 0:
                visit(n, path + (n,), left * accept)
            left *= 1.0 - accept
            if left <= 0:
                return
            state = rule.reject(state, i, int(tree_tokens[n]))
        row = rule.correction(state)
        outcomes.extend((path, int(y), left * row[y] / row.sum()) for y in np.flatnonzero(row > 0))

    visit(-1, (), 1.0)
    return outcomes


def _spread(into: dict, prefix: tuple[int, ...], row: np.ndarray, mass: float) -> None:
    """Add ``mass * row[y]`` to ``prefix + (y,)`` for every y in the row's support (normalised)."""
    row = np.asarray(row, dtype=np.float64)
    total = row.sum()
    for y in np.flatnonzero(row > 0):
        into[prefix + (int(y),)] += mass * row[y] / total


def tree_laws(rule: SiblingRule, fixture: AutoregressiveFixture, shape: Sequence[int], mode: str) -> TreeLaws:
    """The exact laws of one tree round from the empty context (see `TreeLaws`).

    For an exact rule ``emitted`` equals ``target_joint(fixture)`` (|Δ| <= 1e-12).
    """
    tokens = round_law(rule, fixture, shape, mode)
    completions = _target_completions(fixture)
    emitted: dict[tuple[int, ...], float] = defaultdict(float)
    accepted: dict[int, float] = defaultdict(float)
    for prefix, probability in tokens.items():
        accepted[len(prefix) - 1] += probability
        for full, weight in completions(prefix).items():
            emitted[full] += probability * weight
    mean = sum(k * probability for k, probability in accepted.items())
    return TreeLaws(dict(tokens), dict(emitted), dict(accepted), mean + 1.0)


def _target_completions(fixture: AutoregressiveFixture):
    """``prefix -> {full sequence: probability}``: the prefix continued by target samples to the length."""

    @functools.cache
    def complete(prefix: tuple[int, ...]) -> dict:
        if len(prefix) >= fixture.length:
            return {prefix[: fixture.length]: 1.0}
        out: dict[tuple[int, ...], float] = defaultdict(float)
        p = fixture.row(fixture.target, prefix)
        for y in np.flatnonzero(p > 0):
            for full, weight in complete(prefix + (int(y),)).items():
                out[full] += p[y] * weight
        return dict(out)

    return complete


# --- trees as the kernels take them ---------------------------------------------------------


def tree_nodes(shape: Sequence[int]) -> list[int]:
    """Parents (-1 = root) of the full tree of `shape`, in breadth-first (topological) order."""
    parents: list[int] = []
    level = [-1]
    for count in shape:
        following = []
        for parent in level:
            for _ in range(count):
                parents.append(parent)
                following.append(len(parents) - 1)
        level = following
    return parents


def chain_parents(length: int) -> list[int]:
    """A chain of `length` drafts as a tree: parents ``[-1, 0, 1, ..., length - 2]``."""
    return list(range(-1, length - 1))


class TreeStep(NamedTuple):
    """`apply_tree`'s outcome in NumPy: tokens ``[B, N+1]``, num_accepted ``[B]``, path ``[B, N]``."""

    tokens: np.ndarray
    num_accepted: np.ndarray
    path: np.ndarray


class Walk(NamedTuple):
    """Where one sequence's walk ended: the accepted path, the last node's state and the law of its last token."""

    path: list[int]
    state: Any
    last_row: np.ndarray
    had_children: bool


Decide = Callable[[int, int, int, Any], bool]
"""``decide(node, sibling, token, state) -> accepted`` for a node tried by the walk."""


def walk(rule: SiblingRule, target, draft, tree_tokens, parents, real: int, decide: Decide) -> Walk:
    """One sequence's walk in node order, as the kernel takes it: node n is tried iff its parent is current.

    Children of a node come in increasing index and after it, so this is the sibling-by-sibling rule.
    """
    current, path, sibling, had_children = -1, [], 0, False
    state = rule.start(target[0], draft[0])
    for n in range(real):
        if int(parents[n]) != current:
            continue
        x, had_children = int(tree_tokens[n]), True
        if decide(n, sibling, x, state):
            path.append(n)
            current, sibling, had_children = n, 0, False
            state = rule.start(target[n + 1], draft[n + 1])
        else:
            state = rule.reject(state, sibling, x)
            sibling += 1
    last_row = rule.correction(state) if had_children else rule.bonus(target[current + 1])
    return Walk(path, state, np.asarray(last_row, dtype=np.float64), had_children)


def _decide(rule: SiblingRule, state: Any, i: int, x: int, u: float) -> bool:
    """Accept iff ``u q_i(x) < r(x)`` for a rule that gives the pair, else iff ``u < P(accept)``."""
    pair = getattr(rule, "pair", None)
    if pair is not None:
        r_x, q_x = pair(state, i, x)
        return u * q_x < r_x
    return u < float(rule.accept(state, i, x))


def _widened(target, draft, tree_tokens, parents, num_nodes, uniforms):
    target, draft = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    tree_tokens, parents = np.asarray(tree_tokens), np.asarray(parents)
    count = tree_tokens.shape[1]
    reals = np.full(len(tree_tokens), count) if num_nodes is None else np.asarray(num_nodes)
    return target, draft, tree_tokens, parents, reals, np.asarray(uniforms, dtype=np.float64)


def step(target, draft, tree_tokens, parents, num_nodes, uniforms, *, mode: str, rule=None) -> TreeStep:
    """The tree step in float64 given uniforms ``[B, 2, N+1]`` (the kernel's inputs, widened as they are).

    `rule` defaults to the reference rule of `mode`.
    """
    rule = rule or reference_rule(mode)
    target, draft, tree_tokens, parents, reals, uniforms = _widened(
        target, draft, tree_tokens, parents, num_nodes, uniforms
    )
    batch, count = tree_tokens.shape
    out = np.full((batch, count + 1), PAD_TOKEN, dtype=np.int32)
    path = np.full((batch, count), PAD_TOKEN, dtype=np.int32)
    accepted = np.zeros(batch, dtype=np.int32)
    for b in range(batch):

        def decide(n, i, x, state, b=b):
            return _decide(rule, state, i, x, float(uniforms[b, 0, n]))

        ended = walk(rule, target[b], draft[b], tree_tokens[b], parents[b], int(reals[b]), decide)
        k = len(ended.path)
        accepted[b], path[b, :k], out[b, :k] = k, ended.path, tree_tokens[b, ended.path]
        out[b, k] = inverse_cdf(ended.last_row, float(uniforms[b, 1, 0]))
    return TreeStep(out, accepted, path)


def boundaries(target, draft, tree_tokens, parents, num_nodes, uniforms, b: int, row: int, column: int, *, mode: str):
    """Where the float64 step's decision for ``uniforms[b, row, column]`` flips, given the uniforms before it.

    Row 0: r(x)/q_i(x) of node `column` if the walk tries it (and 0 < r < q_i); row 1 column 0: the
    normalised cumulative weights of the last token's law. Empty where the uniform is unused.
    """
    rule = reference_rule(mode)
    target, draft, tree_tokens, parents, reals, uniforms = _widened(
        target, draft, tree_tokens, parents, num_nodes, uniforms
    )
    found: list[float] = []

    def decide(n, i, x, state):
        r_x, q_x = rule.pair(state, i, x)
        if row == 0 and n == column and 0 < r_x < q_x:
            found.append(r_x / q_x)
        return uniforms[b, 0, n] * q_x < r_x

    ended = walk(rule, target[b], draft[b], tree_tokens[b], parents[b], int(reals[b]), decide)
    if row == 0:
        return np.array(found)
    if column:
        return np.zeros(0)
    weights = ended.last_row
    cumulative = np.cumsum(weights) / weights.sum()
    return cumulative[np.flatnonzero(weights > 0)[:-1]]


def _judge_acceptance(comparison: StepComparison, where: str, kernel: bool, pair, u: float, bound: float) -> None:
    """As `StepComparison.acceptance`, with `bound` added: how far the kernel's float32 residual may sit from r."""
    comparison.decisions += 1
    r_x, q_x = pair
    exact_accept = u * q_x < r_x
    if bool(kernel) == exact_accept:
        return
    gap = u * q_x - r_x
    line = f"{where}: accepted={bool(kernel)}, float64 says {exact_accept} "
    line += f"(u={u!r}, r={r_x!r}, q_i={q_x!r}, uq-r={gap:.3g}, residual bound {bound:.3g})"
    near = abs(gap) <= accept_boundary_slack(u * q_x, r_x) + bound
    (comparison.excused if near else comparison.mismatches).append(line)


def judge_draw(comparison: StepComparison, where: str, kernel_id: int, weights, error, u: float) -> None:
    """As `StepComparison.draw`, with the float32 residual's error bound `error` (per id) added to the slack."""
    comparison.decisions += 1
    exact_id = inverse_cdf(weights, u)
    if kernel_id == exact_id:
        return
    total = weights.sum()
    line = f"{where}: drew id {kernel_id}, float64 inverse CDF gives {exact_id} (u={u!r})"
    possible = 0 <= kernel_id < len(weights) and (weights[kernel_id] > 0 or error[kernel_id] > 0)
    cumulative = np.cumsum(weights)
    between = cumulative[min(kernel_id, exact_id) : max(kernel_id, exact_id)]
    slack = draw_boundary_slack(weights) + error.sum()
    near = possible and bool(np.all(np.abs(u * total - between) <= slack))
    (comparison.excused if near else comparison.mismatches).append(line)


def compare_tree_step(target, draft, tree_tokens, parents, num_nodes, uniforms, *outcome, mode: str) -> StepComparison:
    """`apply_tree`'s outcome (tokens, num_accepted, path) against the float64 step, decision by decision.

    The walk follows the kernel's path; each acceptance and the last draw are judged in float64, a
    decision near its boundary excused within float32 rounding plus the bound on how far the kernel's
    float32 residual may have drifted over the rejections before it (`residual_error`).
    """
    rule = reference_rule(mode)
    target, draft, tree_tokens, parents, reals, uniforms = _widened(
        target, draft, tree_tokens, parents, num_nodes, uniforms
    )
    tokens, num_accepted, path = (np.asarray(a) for a in outcome)
    comparison = StepComparison()
    batch, count = tree_tokens.shape
    for b in range(batch):
        k = int(num_accepted[b])
        if not 0 <= k <= count:
            comparison.mismatches.append(f"sequence {b}: {k} accepted of {count} nodes")
            continue
        kernel_path = [int(n) for n in path[b, :k]]

        def decide(n, i, x, state, b=b, kernel_path=kernel_path):
            taken = n in kernel_path
            where = f"sequence {b} node {n} (id {x}, sibling {i})"
            bound = residual_error(state, mode, x)
            _judge_acceptance(comparison, where, taken, rule.pair(state, i, x), float(uniforms[b, 0, n]), bound)
            return taken

        ended = walk(rule, target[b], draft[b], tree_tokens[b], parents[b], int(reals[b]), decide)
        if ended.path != kernel_path:
            comparison.mismatches.append(f"sequence {b}: path {kernel_path} is not a walk of the tree ({ended.path})")
            continue
        what = "correction" if ended.had_children else "bonus"
        error = ended.state.error if ended.had_children else np.zeros_like(ended.last_row)
        judge_draw(comparison, f"sequence {b} {what}", int(tokens[b, k]), ended.last_row, error, uniforms[b, 1, 0])
        comparison.same(f"sequence {b} kept tokens", tokens[b, :k], tree_tokens[b, kernel_path])
        comparison.same(f"sequence {b} padding", tokens[b, k + 1 :], np.full(count - k, PAD_TOKEN))
        comparison.same(f"sequence {b} path padding", path[b, k:], np.full(count - k, PAD_TOKEN))
    return comparison


def residual_error(state: SiblingState, mode: str, x: int) -> float:
    """How far the kernel's float32 judgement of token x may sit from ``u q_i(x) - r(x)`` beyond one rounding.

    Its residual's drift (`SiblingState.error`) plus q_i's: without replacement q_i is divided by a
    float32 sum of the tokens left, off by (m + 2) eps32 of itself at most.
    """
    q_i = proposal(mode, state.draft, state.tried, x)
    return float(state.error[x] + proposal_error(mode, state, q_i)[x])
