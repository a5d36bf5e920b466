"""Published tree acceptance rules, written here in NumPy from their papers and code, as sibling rules.

Each rule fits the stateful float64 interface of the exact tree enumerator
(:mod:`ncm_verify.oracles.exact_tree`; see ``notes/tree_interface.md``):
``start(p_row, q_row) -> state``, ``accept(state, i, x) -> P(accept child i | earlier siblings
rejected)``, ``reject(state, i, x) -> state``, ``correction(state) -> row``, ``bonus(p_row) -> row``.
Each also has ``decide(state, i, x, u) -> bool``, the same decision given a uniform, which
:func:`apply_rule_tree` walks for the implementation modules (``peers.specinfer``, ``peers.eagle``,
``peers.sglang_tree``). A published rule does the same thing whatever the mode the children were
drawn in: ``mode`` only names the drawing that the enumerator judges it under.

Sources followed (read, then written here; no code copied):

- SpecInfer (Miao et al., ASPLOS'24, arXiv:2305.09781, Algorithm 2 "VerifyStochastic", multi-step
  speculative sampling, exact by its Theorem 4.2): child s of a node was drawn from its SSM's q; it is
  accepted with min(1, r(x)/q(x)); on rejection r <- norm(max(r - q, 0)) and s leaves the set; after
  all children, sample from r. Its token tree merges the SSMs' sequences into one tree, a trie: if
  siblings that drew the same token become one node, it is verified once, modelled by
  ``SpecInferRule(merge=True)`` (what a trie implies, judged here; not a claim about FlexFlow's code).
- EAGLE / EAGLE-2 (Li et al.; github.com/SafeAILab/EAGLE at cb7e0841, eagle/model/utils.py,
  ``evaluate_posterior``, sampling branch): child x accepted iff ``random() <= gtp[x]`` (qx = 1);
  on rejection ``gtp[x] = 0`` and renormalise; repeated tokens skipped (``candidates_set``);
  afterwards sample from gtp, or from the accepted leaf's target row.
- SGLang (github.com/sgl-project/sglang at 120affb9, sgl-kernel/csrc/speculative/speculative_sampling.cuh,
  ``TreeSpeculativeSamplingTargetOnly``; defaults ``speculative_accept_threshold_single = 1.0``,
  ``speculative_accept_threshold_acc = 1.0`` in server_args.py; the caller passes zero draft_probs):
  one coin per visited node; ``prob_acc`` sums the target mass of the children tried so far;
  child accepted iff ``coin <= prob_acc / threshold_acc`` or ``p(x) >= threshold_single``;
  a rejected child's draft entry is set to its target mass, so the final draw is from
  norm(relu(p - d)): p with the rejected children removed; ``threshold_acc`` is floored at 1e-9.
  The shared coin is modelled exactly: given earlier rejections it is uniform above their bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import mlx.core as mx
import numpy as np

from ncm_verify.oracles.exact import acceptance, inverse_cdf, residual
from ncm_verify.oracles.exact_tree import MODES, PAD_TOKEN, TreeStep
from ncm_verify.reference import speculative
from ncm_verify.reference._kernels.tree_inputs import check_tree_inputs
from ncm_verify.reference.tree import TreeOutcome

__all__ = [
    "EagleRule",
    "SGLangRule",
    "SpecInferRule",
    "PublishedRule",
    "published_rules",
    "apply_rule",
    "walk_tree",
    "tree_kernels",
]

SGLANG_ACC_FLOOR = 1e-9
"""SGLang caps ``threshold_acc`` from below (``fmaxf(threshold_acc, 1e-9f)``) before the kernel runs."""


@dataclasses.dataclass(frozen=True)
class NodeState:
    """The rule's state at one visited node: target row, draft row, running row and what was tried."""

    p: np.ndarray
    q: np.ndarray
    row: np.ndarray
    tried: frozenset = frozenset()
    mass_tried: float = 0.0
    coin_floor: float = 0.0
    coin: float | None = None


class PublishedRule:
    """A rule's shared parts: bonus from the target row; ``decide`` from ``accept`` unless shared coins."""

    name = "rule"

    def start(self, p_row, q_row) -> NodeState:
        p, q = np.asarray(p_row, np.float64), np.asarray(q_row, np.float64)
        return NodeState(p=p, q=q, row=p.copy())

    def accept(self, state: NodeState, i: int, x: int) -> float:
        raise NotImplementedError

    def reject(self, state: NodeState, i: int, x: int) -> NodeState:
        raise NotImplementedError

    def correction(self, state: NodeState) -> np.ndarray:
        return state.row

    def bonus(self, p_row) -> np.ndarray:
        return np.asarray(p_row, np.float64)

    def decide(self, state: NodeState, i: int, x: int, u: float) -> tuple[bool, NodeState]:
        """Whether child i is accepted given its uniform `u`, and the state the decision leaves."""
        return bool(u < self.accept(state, i, x)), state


class SpecInferRule(PublishedRule):
    """SpecInfer's multi-step speculative sampling; ``merge=True``: repeated sibling tokens are one node."""

    def __init__(self, merge: bool = False):
        self.merge = merge
        self.name = "specinfer_merged" if merge else "specinfer"

    def accept(self, state: NodeState, i: int, x: int) -> float:
        if self.merge and x in state.tried:
            return 0.0
        return acceptance(state.row[x], state.q[x])

    def reject(self, state: NodeState, i: int, x: int) -> NodeState:
        if self.merge and x in state.tried:  # the trie holds it once: nothing more to verify
            return state
        return dataclasses.replace(state, row=residual(state.row, state.q), tried=state.tried | {x})

    def decide(self, state: NodeState, i: int, x: int, u: float) -> tuple[bool, NodeState]:
        if self.merge and x in state.tried:
            return False, state
        return bool(u * state.q[x] < state.row[x]), state


class EagleRule(PublishedRule):
    """EAGLE's ``evaluate_posterior``: accept x with the running target mass r(x); remove x on rejection."""

    name = "eagle"

    def accept(self, state: NodeState, i: int, x: int) -> float:
        return 0.0 if x in state.tried else min(1.0, float(state.row[x]))

    def reject(self, state: NodeState, i: int, x: int) -> NodeState:
        if x in state.tried:  # candidates_set: a repeated token is skipped
            return state
        row = state.row.copy()
        row[x] = 0.0
        total = row.sum()
        # Only a child holding all the mass empties the row, and it is rejected with probability 0.
        return dataclasses.replace(state, row=row / total if total > 0 else state.row, tried=state.tried | {x})

    def decide(self, state: NodeState, i: int, x: int, u: float) -> tuple[bool, NodeState]:
        # EAGLE accepts on r <= p(x) with r = random.random() in [0, 1)
        return (x not in state.tried and u <= state.row[x]), state


class SGLangRule(PublishedRule):
    """SGLang's target-only tree sampling: one coin per node, cumulative and single-token thresholds."""

    def __init__(self, threshold_single: float = 1.0, threshold_acc: float = 1.0):
        self.threshold_single = float(threshold_single)
        self.threshold_acc = max(float(threshold_acc), SGLANG_ACC_FLOOR)
        self.name = f"sglang(single={threshold_single:g}, acc={threshold_acc:g})"

    def _bound(self, state: NodeState, x: int) -> float:
        """The coin's acceptance bound for child x: accept iff coin <= bound (before the single threshold)."""
        return min(1.0, (state.mass_tried + state.p[x]) / self.threshold_acc)

    def accept(self, state: NodeState, i: int, x: int) -> float:
        if state.p[x] >= self.threshold_single:
            return 1.0
        if state.coin_floor >= 1.0:  # earlier siblings took every coin: unreachable
            return 1.0
        # Given the earlier rejections the coin is uniform on (coin_floor, 1).
        return max(0.0, self._bound(state, x) - state.coin_floor) / (1.0 - state.coin_floor)

    def reject(self, state: NodeState, i: int, x: int) -> NodeState:
        row = state.row.copy()
        row[x] = 0.0  # draft_probs[x] = target_probs[x]: relu(p - d) drops x
        return dataclasses.replace(
            state,
            row=row,
            mass_tried=state.mass_tried + float(state.p[x]),
            coin_floor=max(state.coin_floor, self._bound(state, x)),
        )

    def correction(self, state: NodeState) -> np.ndarray:
        total = state.row.sum()
        if total > 0:
            return state.row / total
        last = np.zeros_like(state.row)  # the kernel's fallback: no valid id, the last one
        last[-1] = 1.0
        return last

    def decide(self, state: NodeState, i: int, x: int, u: float) -> tuple[bool, NodeState]:
        # The level's coin is the uniform of the first child tried there.
        coin = u if state.coin is None else state.coin
        state = dataclasses.replace(state, coin=coin)
        accepted = coin <= (state.mass_tried + state.p[x]) / self.threshold_acc or state.p[x] >= self.threshold_single
        return bool(accepted), state


def published_rules() -> dict[str, tuple[PublishedRule, tuple[str, ...]]]:
    """Each judged rule and the modes it targets (the tree its authors verify)."""
    return {
        "specinfer": (SpecInferRule(), ("with_replacement",)),
        "specinfer_merged": (SpecInferRule(merge=True), ("with_replacement",)),
        "eagle": (EagleRule(), ("top_k",)),
        "sglang": (SGLangRule(), ("top_k",)),
        "sglang_single_0.5_acc_0.5": (SGLangRule(0.5, 0.5), ("top_k",)),
        "sglang_single_1_acc_0.5": (SGLangRule(1.0, 0.5), ("top_k",)),
        "sglang_single_0.5_acc_1": (SGLangRule(0.5, 1.0), ("top_k",)),
    }


# --- the implementation modules' kernels: NumPy inside, MLX at the edges ------------------------


def apply_rule(rule: PublishedRule, target, draft, tokens, parents, num_nodes, uniforms) -> TreeStep:
    """`rule` walked over every sequence with its uniforms ``[B, 2, N+1]`` (NumPy in, NumPy out)."""
    batch, count = tokens.shape
    out = np.full((batch, count + 1), PAD_TOKEN, dtype=np.int32)
    path = np.full((batch, count), PAD_TOKEN, dtype=np.int32)
    accepted = np.zeros(batch, dtype=np.int32)
    for b in range(batch):
        walked, emitted = walk_tree(rule, target[b], draft[b], tokens[b], parents[b], int(num_nodes[b]), uniforms[b])
        accepted[b] = len(walked)
        path[b, : len(walked)] = walked
        out[b, : len(emitted)] = emitted
    return TreeStep(out, accepted, path)


def walk_tree(rule: PublishedRule, target, draft, tokens, parents, num_nodes: int, uniforms) -> tuple[list, list]:
    """One sequence's accepted nodes and emitted tokens, deciding with `uniforms` ``[2, N+1]``."""
    path: list[int] = []
    emitted: list[int] = []
    current = -1
    while True:
        kids = [n for n in range(num_nodes) if int(parents[n]) == current]
        p, q = target[current + 1], draft[current + 1]
        if not kids:  # an accepted leaf (or an empty tree): the bonus token
            emitted.append(inverse_cdf(rule.bonus(p), float(uniforms[1, 0])))
            return path, emitted
        state = rule.start(p, q)
        for i, child in enumerate(kids):
            x = int(tokens[child])
            accepted, state = rule.decide(state, i, x, float(uniforms[0, child]))
            if accepted:
                path.append(child)
                emitted.append(x)
                current = child
                break
            state = rule.reject(state, i, x)
        else:
            emitted.append(inverse_cdf(rule.correction(state), float(uniforms[1, 0])))
            return path, emitted


CAPABILITIES = {"traceable": "NumPy walks the tree on the host; mx.compile cannot trace it"}
"""What every tree peer here cannot do, with the reason; a property that needs it reads 'not applicable: <reason>'."""


def tree_kernels(rule: PublishedRule) -> tuple[Callable, Callable, Callable]:
    """``verify_tree``, ``apply_tree`` and ``draw_uniforms`` with the protocol's signatures, running `rule`.

    Input checks are the reference's (one definition of valid tree input); the walk is the rule's.
    """

    def apply_tree(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, mode="with_replacement"):
        """The rule's step given uniforms ``[B, 2, N+1]``, in NumPy on float32 copies widened to float64."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        target, draft = (np.asarray(a.astype(mx.float32), dtype=np.float64) for a in (target_probs, draft_probs))
        tokens, parent_table = np.asarray(tree_tokens), np.asarray(parents)
        real = np.full(tokens.shape[0], tokens.shape[1]) if num_nodes is None else np.asarray(num_nodes)
        step = apply_rule(rule, target, draft, tokens, parent_table, real, np.asarray(uniforms, dtype=np.float64))
        return TreeOutcome(*(mx.array(a) for a in step))

    def draw_uniforms(key, batch: int, shape: tuple[int, ...]) -> mx.array:
        """The uniforms a ``verify_tree`` call with `key` hands ``apply_tree``: the reference's draw."""
        return speculative.draw_uniforms(key, batch, shape)

    def verify_tree(
        target_probs, draft_probs, tree_tokens, parents, *, key, num_nodes=None, mode="with_replacement", validate=True
    ):
        """``apply_tree`` with the uniforms `key` gives, after the reference's input checks."""
        if validate:
            num_nodes = check_tree_inputs(target_probs, draft_probs, tree_tokens, parents, num_nodes, mode)
        batch, count = tree_tokens.shape
        uniforms = draw_uniforms(key, batch, (2, count + 1))
        return apply_tree(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, mode=mode)

    return verify_tree, apply_tree, draw_uniforms


def written_from(source: str):
    """A tree peer's ``versions()``: NumPy's version and the published code or paper its rule was written from."""
    return lambda: f"numpy {np.__version__}; written here from {source}"
