"""Tree verification in float64: sibling rules, the step at given uniforms, and the exact laws.

The shared format is ``notes/tree_interface.md`` (issue 19). A *sibling rule* decides, at one
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
from collections.abc import Sequence
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
    "step",
    "compare_tree_step",
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
    """The reference rules' state: the current residual, the node's draft row, the siblings tried."""

    residual: np.ndarray
    draft: np.ndarray
    tried: tuple[int, ...]


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


@dataclasses.dataclass(frozen=True)
class ResidualRule:
    """The exact rule of issue 19: accept child i iff u q_i(x) < r(x); on rejection r <- norm(max(r - q_i, 0))."""

    mode: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {self.mode!r}")

    def start(self, p_row: np.ndarray, q_row: np.ndarray) -> SiblingState:
        return SiblingState(np.asarray(p_row, dtype=np.float64), np.asarray(q_row, dtype=np.float64), ())

    def pair(self, state: SiblingState, i: int, x: int) -> tuple[float, float]:
        """``(r(x), q_i(x))``: child i is accepted iff ``u * q_i(x) < r(x)``."""
        return float(state.residual[x]), float(proposal(self.mode, state.draft, state.tried, x)[x])

    def accept(self, state: SiblingState, i: int, x: int) -> float:
        return acceptance(*self.pair(state, i, x))

    def reject(self, state: SiblingState, i: int, x: int) -> SiblingState:
        q_i = proposal(self.mode, state.draft, state.tried, x)
        return SiblingState(_renormalised_residual(state.residual, q_i), state.draft, state.tried + (x,))

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


def _children(parents: np.ndarray, count: int, node: int) -> list[int]:
    return [n for n in range(count) if int(parents[n]) == node]


def _decide(rule: SiblingRule, state: Any, i: int, x: int, u: float) -> bool:
    """Accept iff ``u q_i(x) < r(x)`` for a rule that gives the pair, else iff ``u < P(accept)``."""
    pair = getattr(rule, "pair", None)
    if pair is not None:
        r_x, q_x = pair(state, i, x)
        return u * q_x < r_x
    return u < float(rule.accept(state, i, x))


def step(target, draft, tree_tokens, parents, num_nodes, uniforms, *, mode: str, rule=None) -> TreeStep:
    """The tree step in float64 given uniforms ``[B, 2, N+1]`` (the kernel's inputs, widened as they are).

    `rule` defaults to the reference rule of `mode`.
    """
    rule = rule or reference_rule(mode)
    target, draft = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    tree_tokens, parents = np.asarray(tree_tokens), np.asarray(parents)
    uniforms = np.asarray(uniforms, dtype=np.float64)
    batch, count = tree_tokens.shape
    out = np.full((batch, count + 1), PAD_TOKEN, dtype=np.int32)
    path = np.full((batch, count), PAD_TOKEN, dtype=np.int32)
    accepted = np.zeros(batch, dtype=np.int32)
    for b in range(batch):
        real = int(num_nodes[b]) if num_nodes is not None else count
        current, walked = -1, []
        while True:
            children = _children(parents[b], real, current)
            state = rule.start(target[b, current + 1], draft[b, current + 1])
            chosen = None
            for i, n in enumerate(children):
                x = int(tree_tokens[b, n])
                if _decide(rule, state, i, x, float(uniforms[b, 0, n])):
                    chosen = n
                    break
                state = rule.reject(state, i, x)
            if chosen is None:
                row = rule.correction(state) if children else rule.bonus(target[b, current + 1])
                last = inverse_cdf(np.asarray(row, dtype=np.float64), float(uniforms[b, 1, 0]))
                break
            walked.append(chosen)
            current = chosen
        accepted[b] = len(walked)
        path[b, : len(walked)] = walked
        out[b, : len(walked)] = tree_tokens[b, walked]
        out[b, len(walked)] = last
    return TreeStep(out, accepted, path)


def compare_tree_step(
    target, draft, tree_tokens, parents, num_nodes, uniforms, outcome, *, mode: str
) -> StepComparison:
    """`apply_tree`'s outcome (tokens, num_accepted, path) against the float64 step, decision by decision.

    The walk follows the kernel's path; each acceptance and the final draw are judged in float64
    (a near-boundary difference is excused, as for the chain), and so are the kept tokens and padding.
    """
    rule = reference_rule(mode)
    target, draft = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    tree_tokens, parents = np.asarray(tree_tokens), np.asarray(parents)
    tokens, num_accepted, path = (np.asarray(a) for a in outcome)
    comparison = StepComparison()
    batch, count = tree_tokens.shape
    for b in range(batch):
        real = int(num_nodes[b]) if num_nodes is not None else count
        k = int(num_accepted[b])
        if not 0 <= k <= count:
            comparison.mismatches.append(f"sequence {b}: {k} accepted of {count} nodes")
            continue
        current = -1
        for depth in range(k + 1):
            kernel_next = int(path[b, depth]) if depth < k else None
            children = _children(parents[b], real, current)
            if kernel_next is not None and kernel_next not in children:
                comparison.mismatches.append(f"sequence {b}: path node {kernel_next} is no child of {current}")
                break
            state = rule.start(target[b, current + 1], draft[b, current + 1])
            for i, n in enumerate(children):
                x = int(tree_tokens[b, n])
                r_x, q_x = rule.pair(state, i, x)
                where = f"sequence {b} node {n} (id {x}, parent {current}, sibling {i})"
                comparison.acceptance(where, n == kernel_next, r_x, q_x, uniforms[b, 0, n])
                if n == kernel_next:
                    break
                state = rule.reject(state, i, x)
            if kernel_next is None:
                row = rule.correction(state) if children else rule.bonus(target[b, current + 1])
                what = "correction" if children else "bonus"
                comparison.draw(f"sequence {b} {what} after node {current}", tokens[b, k], row, uniforms[b, 1, 0])
            else:
                current = kernel_next
        walked = path[b, :k]
        comparison.same(f"sequence {b} kept tokens", tokens[b, :k], tree_tokens[b, walked])
        comparison.same(f"sequence {b} padding", tokens[b, k + 1 :], np.full(count - k, PAD_TOKEN))
        comparison.same(f"sequence {b} path padding", path[b, k:], np.full(count - k, PAD_TOKEN))
    return comparison
