"""The call-by-call check of a tree-decoding loop over mlx-lm models.

`check_tree_calls` judges a loop from what it handed `verify_tree` (recorded by `RecordingKernels`), exactly:
each call's tree is the loop's shape (without replacement, no more children than a row's support), its p row at
the root and at every node the target's conditional of the context and the root-to-node path, and its q rows the
draft's, both recomputed by plain causal passes over each root-to-leaf path (no cache, no tree mask: the row at
a node's position sees exactly its path); top-k children are their row's top k; and the loop emits what
`verify_tree` decided.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx
import numpy as np

from ncm_verify.harness.checks import as_numpy, assert_close, assert_equal
from ncm_verify.mlx_lm_real.models import logprobs_at_every_position
from ncm_verify.mlx_lm_real.text_drafters import ExpandedRound, assert_keys_never_reused, scaled_softmax
from ncm_verify.oracles import exact_tree


def path_rows(model, context: list[int], tokens: list[int], parents: list[int]) -> mx.array:
    """``[N+1, V]`` log-probabilities: row 0 after `context`, row n + 1 after `context` and node n's path,
    each from an uncached causal pass over a root-to-leaf path (its position sees exactly its path)."""
    paths = []
    for node in range(len(tokens)):
        path, at = [], node
        while at >= 0:
            path.append(at)
            at = parents[at]
        paths.append(path[::-1])
    children = {parent for parent in parents}
    leaves: list[int | None] = [node for node in range(len(tokens)) if node not in children] or [None]
    rows: list[mx.array | None] = [None] * (len(tokens) + 1)
    for leaf in leaves:
        path = [] if leaf is None else paths[leaf]
        sequence = mx.array([context + [tokens[n] for n in path]], dtype=mx.int32)
        scores = logprobs_at_every_position(model, sequence)[0, len(context) - 1 :]
        rows[0] = scores[0]
        for depth, node in enumerate(path):
            rows[node + 1] = scores[depth + 1]
    return mx.stack([row for row in rows if row is not None])


def expected_parents(branching, q_rows: np.ndarray, mode: str) -> list[int]:
    """The parents of the loop's breadth-first tree: ``branching[d]`` children per node of depth d, but without
    replacement no more than the tokens of positive mass in the node's q row ``q_rows[node + 1]`` (its support)."""
    parents: list[int] = []
    level = [-1]
    for count in branching:
        start = len(parents)
        for parent in level:
            # a row the loop did not hand (a short tree) is judged by the parents' comparison, not here
            support = int(np.count_nonzero(q_rows[parent + 1] > 0)) if parent + 1 < len(q_rows) else count
            parents += [parent] * (min(count, support) if mode == "without_replacement" else count)
        level = list(range(start, len(parents)))
    return parents


def check_children_drawn_from(q_row: np.ndarray, children: list[int], mode: str, *, row: int, call: str) -> None:
    """Each sampled child lies where the q row handed for its parent has mass: anywhere in its support i.i.d.; in
    what the earlier siblings left of it without replacement (never a token of probability 0).

    A sampled draw cannot be replayed, but a draft row with exact zeros (a peaked draft) shows a child drawn from
    another row at once; the draw's law within the support is the sampled check's.
    """
    left = q_row.copy()
    for j, child in enumerate(children):
        repeated = mode == "without_replacement" and child in children[:j]
        if repeated or left[child] <= 0:
            raise AssertionError(
                f"child {j} of tree row {row} is token {child}, where the q row handed to verify_tree has "
                f"{q_row[child]!r} ({mode}: siblings {children}, q's support {np.flatnonzero(q_row > 0).tolist()}): "
                f"it was not drawn from that row\n  call: {call}"
            )
        if mode == "without_replacement":
            left[child] = 0.0


def check_draws(
    draws: list[dict], q_rows: mx.array, nodes: list[int], parents: list[int], mode: str, draw, *, call: str
) -> None:
    """Every node's children came from one `draw_tree_children` call, in breadth-first order, handed the q row the
    loop then handed `verify_tree` for that node and `mode`; each draw is replayed from its recorded key on that
    row (`draw`, the implementation's own) and must give the children the tree holds.

    A sampled draw is judged exactly this way: a loop that draws from any other row or law, or past the recorded
    draws, hands a tree the replay does not give.
    """
    drawn_rows = sorted({parent + 1 for parent in parents})  # breadth-first: every row above the leaves
    if drawn_rows != list(range(len(draws))):
        raise AssertionError(
            f"the loop made {len(draws)} draw_tree_children calls for a tree whose rows {drawn_rows} have children: "
            f"every node's children must be drawn by one call, in breadth-first order\n  call: {call}"
        )
    for row, record in enumerate(draws):
        where = f"{call}  # draw_tree_children call {row} (tree row {row})"
        children = [nodes[n] for n in range(len(nodes)) if parents[n] == row - 1]
        if record["mode"] != mode:
            raise AssertionError(
                f"draw_tree_children was told mode {record['mode']!r}, the loop drafts {mode!r}\n  call: {where}"
            )
        assert_close(
            record["q_row"].reshape(-1),
            q_rows[row],
            dtype=mx.float32,
            label="q row a node's children were drawn from vs the q row handed to verify_tree for it",
            call=where,
        )
        assert_equal(
            np.asarray(record["children"]),
            np.asarray(children),
            label="children draw_tree_children returned vs the node's children in the tree handed to verify_tree",
            call=where,
        )
        replayed = draw(q_rows[row], record["count"], mode=mode, key=record["key"])
        assert_equal(
            np.asarray(replayed),
            np.asarray(children),
            label="children replayed from the recorded key on the handed q row vs the tree's",
            call=where,
        )


def check_tree_calls(
    calls: list,
    tokens: list[int] | None,
    target,
    draft,
    prompt: list[int],
    max_tokens: int,
    temperature: float,
    branching,
    mode: str,
    *,
    call: str,
    draw=None,
) -> list[tuple[int, list[int], list[int]]]:
    """Every `verify_tree` call got the loop's tree, the target's exact conditionals at every node and the
    draft's rows its children were drawn from; returns (accepted count, path, parents) per call.

    `tokens` is what the loop emitted (None when it raised: only the calls it made are judged). At
    temperature 0 the target's rows are one-hot at its argmax and the draft's are at temperature 1. With
    `draw` (the implementation's `draw_tree_children`) every draw the round made is judged too (`check_draws`).
    """
    vocab = target.args.vocab_size
    context = list(prompt)
    rounds: list[tuple[int, list[int], list[int]]] = []
    draws: list[dict] = []
    for name, record in calls:
        if name == "draw_tree_children":
            draws.append(record)
            continue
        if name != "verify_tree":
            continue
        where = f"{call}  # verify_tree call {len(rounds)}, after {len(context) - len(prompt)} emitted tokens"
        # a round drafts no deeper than the tokens still wanted
        shape = tuple(branching)[: max_tokens - (len(context) - len(prompt))]
        parents = as_numpy(record["parents"]).reshape(-1).astype(int).tolist()
        nodes = as_numpy(record["tree_tokens"]).reshape(-1).astype(int).tolist()
        q = record["q"].reshape(-1, vocab)
        assert_equal(
            np.asarray(parents),
            np.asarray(expected_parents(shape, as_numpy(q).astype(np.float64), mode)),
            label=f"parents handed to verify_tree vs the tree of branching {shape} (its rows' support {mode})",
            call=where,
        )
        if record["mode"] != mode:
            raise AssertionError(
                f"verify_tree was told mode {record['mode']!r}, the loop drafts {mode!r}\n  call: {where}"
            )
        exact_p = path_rows(target, context, nodes, parents)
        if temperature == 0:
            want_p = (mx.arange(vocab) == mx.argmax(exact_p, axis=-1, keepdims=True)).astype(mx.float32)
        else:
            want_p = scaled_softmax(exact_p, temperature)
        assert_close(
            record["p"].reshape(-1, vocab),
            want_p,
            dtype=mx.float32,
            label="p rows handed to verify_tree vs the target's uncached conditionals of each root-to-node path",
            call=where,
        )
        assert_close(
            q,
            scaled_softmax(path_rows(draft, context, nodes, parents), 1.0 if temperature == 0 else temperature),
            dtype=mx.float32,
            label="q rows handed to verify_tree vs the draft's uncached conditionals of each root-to-node path",
            call=where,
        )
        if draw is not None:
            check_draws(draws, q, nodes, parents, mode, draw, call=where)
        draws = []
        if mode != "top_k":
            q_rows = as_numpy(q).astype(np.float64)
            for parent in sorted(set(parents)):
                children = [nodes[n] for n in range(len(nodes)) if parents[n] == parent]
                check_children_drawn_from(q_rows[parent + 1], children, mode, row=parent + 1, call=where)
        if mode == "top_k":
            q_rows = as_numpy(q).astype(np.float64)
            for parent in sorted(set(parents)):
                children = [nodes[n] for n in range(len(nodes)) if parents[n] == parent]
                top = np.argsort(-q_rows[parent + 1], kind="stable")[: len(children)]
                assert_equal(
                    np.sort(children),
                    np.sort(top),
                    label=f"top-k children of tree row {parent + 1} vs the k largest of the q row they were drawn from",
                    call=where,
                )
        outcome = record["outcome"]
        if outcome is None:  # the call raised: judged on what it was handed
            break
        stood = int(outcome.num_accepted[0].item())
        rounds.append((stood, [int(n) for n in outcome.path[0, :stood].tolist()], parents))
        context += [int(t) for t in outcome.tokens[0, : stood + 1].tolist()]
    assert_keys_never_reused(calls, temperature, call=call)
    if tokens is None:
        return rounds
    replayed = context[len(prompt) :][:max_tokens]
    assert_equal(np.asarray(tokens), np.asarray(replayed), label="emitted tokens vs verify_tree's outcomes", call=call)
    if len(tokens) != max_tokens:
        raise AssertionError(f"emitted {len(tokens)} tokens, asked for {max_tokens}\n  call: {call}")
    return rounds


class ForcedTreeOutcome(NamedTuple):
    """What a scripted `verify_tree` decides: ``tokens [1, N+1]``, ``num_accepted [1]``, ``path [1, N]``."""

    tokens: mx.array
    num_accepted: mx.array
    path: mx.array


class ScriptedTreeKernels:
    """A `verify_tree` deciding each round as `outcomes` says (``(path, token)``); the round after them is recorded
    into `handed` and ends the loop (`ExpandedRound`)."""

    def __init__(self, outcomes: list[tuple[tuple[int, ...], int]], handed: list):
        self.outcomes, self.handed = outcomes, handed

    def verify_tree(self, target_probs, draft_probs, tree_tokens, parents, **kwargs):
        self.handed.append((target_probs, draft_probs, tree_tokens, parents, kwargs.get("mode")))
        if len(self.handed) > len(self.outcomes):
            raise ExpandedRound
        path, token = self.outcomes[len(self.handed) - 1]
        nodes = as_numpy(tree_tokens).reshape(-1).astype(int).tolist()
        padding = len(nodes) - len(path)
        tokens = [nodes[n] for n in path] + [token] + [-1] * padding
        return ForcedTreeOutcome(
            mx.array([tokens], dtype=mx.int32),
            mx.array([len(path)], dtype=mx.int32),
            mx.array([list(path) + [-1] * padding], dtype=mx.int32),
        )


def enumerated_tree_loop_law(run_loop, length: int, mode: str, *, call: str) -> dict[tuple, float]:
    """The law of the first `length` tokens of a tree loop whose children are deterministic (top k), every branch of
    every round's verification walked through it.

    ``run_loop(kernels)`` runs the implementation's loop once with `kernels` for its `verify_tree`. Each round's
    outcomes and their probabilities come from the rows and tree the loop handed `verify_tree`
    (`exact_tree.handed_round_outcomes`); each that leaves tokens to emit is forced in the runs below it.
    """
    law: dict[tuple, float] = {}

    def expand(outcomes: list, emitted: tuple, mass: float) -> None:
        handed: list = []
        try:
            run_loop(ScriptedTreeKernels(outcomes, handed))
        except ExpandedRound:
            pass
        if len(handed) != len(outcomes) + 1:
            raise AssertionError(
                f"the loop verified {len(handed)} trees after {len(emitted)} of {length} tokens; expected round "
                f"{len(outcomes) + 1}\n  call: {call}  # scripted outcomes {outcomes}"
            )
        p, q, tree_tokens, parents, handed_mode = handed[-1]
        if handed_mode != mode:
            raise AssertionError(f"verify_tree was told mode {handed_mode!r}, the loop drafts {mode!r}\n  call: {call}")
        vocab = p.shape[-1]
        nodes = as_numpy(tree_tokens).reshape(-1).astype(int)
        target, draft = (as_numpy(a).astype(np.float64).reshape(-1, vocab) for a in (p, q))
        parent_ids = as_numpy(parents).reshape(-1).astype(int)
        for path, token, probability in exact_tree.handed_round_outcomes(target, draft, nodes, parent_ids, mode):
            out = emitted + tuple(int(nodes[n]) for n in path) + (token,)
            if len(out) >= length:
                law[out[:length]] = law.get(out[:length], 0.0) + mass * probability
            elif probability > 0:
                expand(outcomes + [(path, token)], out, mass * probability)

    expand([], (), 1.0)
    return law
