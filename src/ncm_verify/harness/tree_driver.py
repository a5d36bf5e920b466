"""Drive an implementation's tree verifier over draft trees, vectorised over a batch.

Trees are grown here, node by node in breadth-first order, the children of each node drawn from
its draft row by the mode (i.i.d., without replacement, or its top k) with a seeded NumPy
generator. A node whose row has no token left to draw (without replacement, or a top k wider
than the vocabulary) is left out with its subtree, and each sequence may keep only a prefix of
the nodes (`caps`): every tree is compacted into the kernel's padded layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import mlx.core as mx
import numpy as np
from hypothesis import note

from ncm_verify.harness import checks
from ncm_verify.harness.drivers import round_seeds, sample_categorical, sampler_seed
from ncm_verify.oracles import exact
from ncm_verify.oracles.exact import AutoregressiveFixture, context_offsets, context_rows
from ncm_verify.oracles.exact_tree import MODES, PAD_TOKEN, tree_nodes

RowsOf = Callable[[int, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
"""``rows_of(node, context [B, depth]) -> (target, draft, first, later)``, each ``[B, V]``: the rows of `node` (-1 the
root) reached by `context`, and the rows its first and later children are sampled from (q itself, or parts of it)."""


@dataclasses.dataclass
class TreeInputs:
    """One batch of draft trees in the kernel's layout (float64 rows, int64 ids)."""

    target: np.ndarray
    draft: np.ndarray
    tokens: np.ndarray
    parents: np.ndarray
    num_nodes: np.ndarray

    def kernel_args(self, dtype=mx.float32) -> tuple:
        """``(target_probs, draft_probs, tree_tokens, parents, num_nodes)`` as MLX arrays."""
        return (
            mx.array(self.target, dtype=dtype),
            mx.array(self.draft, dtype=dtype),
            mx.array(self.tokens, dtype=mx.int32),
            mx.array(self.parents, dtype=mx.int32),
            mx.array(self.num_nodes, dtype=mx.int32),
        )


def draw_children(
    rng: np.random.Generator,
    q: np.ndarray,
    sampling: np.ndarray,
    count: int,
    mode: str,
    later: np.ndarray | None = None,
) -> np.ndarray:
    """``[B, count]`` children of one node per sequence; -1 where none is left to draw.

    The first child is sampled from `sampling`, later ones from `later` (default q), without the ids
    drawn before when drawn without replacement (a case may draft parts of q: where a decision is
    informative); top_k takes q's `count` most likely ids, ties to the smaller id.
    """
    batch, vocab = q.shape
    if mode == "top_k":
        order = np.argsort(-q, axis=1, kind="stable")[:, :count]
        return np.concatenate([order, np.full((batch, count - order.shape[1]), PAD_TOKEN)], axis=1)
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    children = np.full((batch, count), PAD_TOKEN, dtype=np.int64)
    drawn_before = np.zeros((batch, vocab), dtype=bool) if mode == "without_replacement" else None
    for i in range(count):
        rows = np.asarray(sampling if i == 0 else q if later is None else later, dtype=np.float64)
        if drawn_before is not None:
            rows = np.where(drawn_before, 0.0, rows)
        live = rows.sum(axis=1) > 0
        if live.all():  # nothing exhausted: every row is drawn from as it stands (no masked copy)
            drawn = sample_categorical(rng, rows)
            children[:, i] = drawn
            if drawn_before is not None:
                drawn_before[np.arange(batch), drawn] = True
            continue
        drawn = sample_categorical(rng, np.where(live[:, None], rows, 1.0))
        children[live, i] = drawn[live]
        if drawn_before is not None:
            drawn_before[np.arange(batch)[live], drawn[live]] = True
    return children


def grow_trees(rng: np.random.Generator, shape, mode: str, caps: np.ndarray, rows_of: RowsOf) -> TreeInputs:
    """Draft trees of `shape` (children per depth), nodes beyond ``caps[b]`` (breadth-first) left out."""
    parents = tree_nodes(shape)
    count, batch = len(parents), len(caps)
    depth_of = [0] * count
    for n, parent in enumerate(parents):
        depth_of[n] = 0 if parent < 0 else depth_of[parent] + 1
    contexts = np.zeros((batch, count + 1, len(shape)), dtype=np.int64)
    target_root, draft_root, *sampling = rows_of(-1, contexts[:, 0, :0])
    # Float32, as the kernel takes them: half the memory traffic of 1e5 trees. One [B, V] row per tree row,
    # laid out once by `compact` (no full-tree array written here, then copied again there).
    target: list[np.ndarray] = [np.asarray(target_root, dtype=np.float32)] * (count + 1)
    draft: list[np.ndarray] = [np.asarray(draft_root, dtype=np.float32)] * (count + 1)
    tokens = np.full((batch, count), PAD_TOKEN, dtype=np.int64)
    samplings = {-1: tuple(sampling)}
    for parent in [-1, *range(count)]:
        children = [n for n in range(count) if parents[n] == parent]
        if not children:
            continue
        first, later = samplings.pop(parent)
        drawn = draw_children(rng, draft[parent + 1], first, len(children), mode, later)
        for i, n in enumerate(children):
            tokens[:, n] = drawn[:, i]
            contexts[:, n + 1] = contexts[:, parent + 1]
            contexts[:, n + 1, depth_of[n]] = np.maximum(drawn[:, i], 0)
            p, q, *rows = rows_of(n, contexts[:, n + 1, : depth_of[n] + 1])
            target[n + 1], draft[n + 1] = np.asarray(p, dtype=np.float32), np.asarray(q, dtype=np.float32)
            samplings[n] = tuple(rows)
    return compact(target, draft, tokens, np.array(parents), caps)


def compact(target: list, draft: list, tokens, parents, caps) -> TreeInputs:
    """Keep the nodes drawn, whose parent is kept and within their sequence's cap; renumber them in order.

    `target` and `draft` hold one ``[B, V]`` row per tree row (the root's first); the kept rows are laid
    out in the kernel's ``[B, N + 1, V]`` layout, padded rows uniform.
    """
    batch, count = tokens.shape
    keep = np.zeros((batch, count), dtype=bool)
    for n in range(count):
        parent_kept = keep[:, parents[n]] if parents[n] >= 0 else True
        keep[:, n] = (tokens[:, n] >= 0) & parent_kept & (n < caps)
    if keep.all():  # every tree whole: the layout stands
        return TreeInputs(
            np.stack(target, axis=1),
            np.stack(draft, axis=1),
            tokens,
            np.broadcast_to(parents, (batch, count)).copy(),
            keep.sum(axis=1),
        )
    order = np.argsort(~keep, axis=1, kind="stable")
    num_nodes = keep.sum(axis=1)
    new_index = np.cumsum(keep, axis=1) - 1
    real = np.arange(count)[None] < num_nodes[:, None]
    old_parents = np.broadcast_to(parents, (batch, count))[np.arange(batch)[:, None], order]
    remapped = np.take_along_axis(new_index, np.maximum(old_parents, 0), axis=1)
    new_parents = np.where(real & (old_parents >= 0), remapped, PAD_TOKEN)
    new_tokens = np.where(real, np.take_along_axis(tokens, order, axis=1), PAD_TOKEN)
    return TreeInputs(
        _laid_out(target, keep, new_index), _laid_out(draft, keep, new_index), new_tokens, new_parents, num_nodes
    )


def _laid_out(rows: list, keep: np.ndarray, new_index: np.ndarray) -> np.ndarray:
    """``[B, N + 1, V]``: the root's row, each kept node's row at its new index + 1, uniform padding after."""
    batch, count = keep.shape
    vocab = rows[0].shape[-1]
    laid = np.full((batch, count + 1, vocab), 1.0 / vocab, dtype=np.float32)
    laid[:, 0] = rows[0]
    for n in range(count):
        kept = np.flatnonzero(keep[:, n])
        laid[kept, new_index[kept, n] + 1] = np.take(rows[n + 1], kept, axis=0)
    return laid


def fixture_rows(fixture: AutoregressiveFixture) -> RowsOf:
    """Rows of a node from the fixture's tables at its context; children are sampled from q itself.

    The kernel's rows come from float32 copies of the tables (the values the float64 rows round to),
    the rows children are sampled from in float64, gathered once for the first and later children.
    """
    target32, draft32 = fixture.target.astype(np.float32), fixture.draft.astype(np.float32)

    def rows_of(node: int, context: np.ndarray):
        lengths = np.full(len(context), context.shape[1])
        rows = context_rows(context, lengths, fixture.vocab)
        # np.take: a row gather 5-15x faster than fancy indexing, the same rows
        q = np.take(fixture.draft, rows, axis=0)
        return np.take(target32, rows, axis=0), np.take(draft32, rows, axis=0), q, q

    return rows_of


def assert_tree_outcome_well_formed(outcome, inputs: TreeInputs, vocab: int) -> None:
    """Shapes, counts within the tree, a path of parent-child steps from the root, kept tokens, padding."""
    tokens, accepted, path = (np.array(a).astype(np.int64) for a in outcome)
    batch, count = inputs.tokens.shape
    for name, array, shape in (("tokens", tokens, (batch, count + 1)), ("path", path, (batch, count))):
        assert array.shape == shape, f"verify_tree: {name} has shape {array.shape}, expected {shape}"
    assert accepted.shape == (batch,), f"verify_tree: num_accepted has shape {accepted.shape}, expected {(batch,)}"
    bad = np.flatnonzero((accepted < 0) | (accepted > inputs.num_nodes))
    assert not len(bad), f"verify_tree: sequence {bad[0]} accepted {accepted[bad[0]]} of {inputs.num_nodes[bad[0]]}"
    position = np.arange(count)[None]
    on_path = position < accepted[:, None]
    # Clipped only to read the tree: a node out of range fails the walk check below, never an IndexError.
    node = np.clip(path, 0, max(count - 1, 0))
    previous = np.concatenate([np.full((batch, 1), -1), path[:, :-1]], axis=1)
    steps = (np.take_along_axis(inputs.parents, node, axis=1) if count else previous) == previous
    ok = np.where(on_path, (path >= 0) & (path < inputs.num_nodes[:, None]) & steps, path == PAD_TOKEN)
    kept = np.take_along_axis(inputs.tokens, node, axis=1) if count else np.zeros((batch, 0), np.int64)
    ok &= np.where(on_path, tokens[:, :count] == kept, True)
    last = np.take_along_axis(tokens, accepted[:, None], axis=1)[:, 0]
    ok &= ((last >= 0) & (last < vocab))[:, None]
    ok &= np.where(np.arange(count + 1)[None, 1:] > accepted[:, None], tokens[:, 1:] == PAD_TOKEN, True)
    bad = np.flatnonzero(~ok.all(axis=1))
    assert not len(bad), (
        f"verify_tree: sequence {bad[0]} is not a walk of its tree: path {path[bad[0]].tolist()}, tokens "
        f"{tokens[bad[0]].tolist()} (tree tokens {inputs.tokens[bad[0]].tolist()}, "
        f"parents {inputs.parents[bad[0]].tolist()})"
    )


@dataclasses.dataclass
class TreeRun:
    """Sequences of `fixture.length` tokens: one tree round, continued by target samples; its accepted counts."""

    sequences: np.ndarray
    num_accepted: np.ndarray
    num_nodes: np.ndarray


def run_tree(
    impl,
    fixture: AutoregressiveFixture,
    *,
    shape,
    mode: str,
    batch: int,
    mixed: bool,
    seed: int,
    dtype=mx.float32,
) -> TreeRun:
    """One tree round at the empty context per sequence, its emitted tokens continued by target samples.

    With `mixed`, sequence b keeps a uniformly drawn prefix of the breadth-first nodes (0 to all).
    """
    tree_seed, key_seed, continue_seed = round_seeds(sampler_seed(seed, fixture), 3)
    rng = np.random.default_rng(tree_seed)
    count = len(tree_nodes(shape))
    caps = rng.integers(0, count + 1, size=batch) if mixed else np.full(batch, count)
    inputs = grow_trees(rng, shape, mode, caps, fixture_rows(fixture))
    outcome = impl.verify_tree(
        *inputs.kernel_args(dtype)[:4],
        key=mx.random.key(key_seed),
        num_nodes=mx.array(inputs.num_nodes, dtype=mx.int32),
        mode=mode,
    )
    assert_tree_outcome_well_formed(outcome, inputs, fixture.vocab)
    tokens = np.array(outcome.tokens).astype(np.int64)
    accepted = np.array(outcome.num_accepted).astype(np.int64)
    return TreeRun(continue_with_target(fixture, tokens, accepted + 1, continue_seed), accepted, inputs.num_nodes)


def continue_with_target(fixture: AutoregressiveFixture, tokens: np.ndarray, emitted: np.ndarray, seed: int):
    """``[B, length]``: each sequence's first `emitted` tokens, then tokens sampled from the target."""
    length, batch = fixture.length, len(tokens)
    sequences = np.zeros((batch, length), dtype=np.int64)
    width = min(tokens.shape[1], length)
    sequences[:, :width] = np.where(np.arange(width)[None] < emitted[:, None], tokens[:, :width], 0)
    rng = np.random.default_rng(seed)
    offsets = context_offsets(fixture.vocab, length)
    index = np.zeros(batch, dtype=np.int64)  # each context's mixed-radix index, as `context_rows` reads it
    for t in range(length):
        sampling = emitted <= t
        if sampling.any():
            rows = offsets[t] + index[sampling]
            sequences[sampling, t] = sample_categorical(rng, np.take(fixture.target, rows, axis=0))
        index = index * fixture.vocab + sequences[:, t]
    return sequences


# --- a chain is a tree: the relation between the two kernels ---


def chain_case(case) -> tuple:
    """The chain a tree case would be with one child per node: the tree's nodes 0..N-1 made a path."""
    (target, draft, tokens, _), num_nodes = case.args, case.num_draft
    count = tokens.shape[1]
    chain_parents = mx.where(mx.arange(count)[None] < num_nodes[:, None], mx.arange(-1, count - 1)[None], -1).astype(
        mx.int32
    )
    return target, draft, tokens, chain_parents, num_nodes


def chain_comparer(step, uniforms: np.ndarray) -> Callable:
    """``compare_row(fields, b)``: row b of a chain-shaped tree's outcome against the float64 chain step."""
    target, draft, tokens, _, num_nodes = step.exact_args

    def compare_row(fields: dict, b: int):
        rows = slice(b, b + 1)
        return exact.compare_chain_step(
            target[rows],
            draft[rows, :-1],
            tokens[rows],
            num_nodes[rows],
            uniforms[rows].astype(np.float64),
            fields["tokens"][rows],
            fields["num_accepted"][rows],
        )

    return compare_row


def assert_chain_tree_agree(impl, step, key, *, provenance: Callable[[str], str] = str) -> None:
    """A chain-shaped tree (a step case of the tree kernel, made a path) through apply_tree and apply_chain on
    the step's uniforms, and through verify_tree and verify_chain with `key`: the same outcome, or apart only
    within float32 rounding of the float64 chain step's boundaries (`checks.assert_kernels_agree`)."""
    target, draft, tokens, parents, num_nodes = chain_case(step.case)
    call = f"chain of {tokens.shape[1]} nodes, num_nodes={np.array(num_nodes).tolist()}: {step.describe()}"
    note(call)
    for entry in ("apply", "verify"):
        if entry == "apply":
            uniforms = step.uniforms
            as_tree = impl.apply_tree(target, draft, tokens, parents, num_nodes, mx.array(uniforms))
            as_chain = impl.apply_chain(target, draft[:, :-1], tokens, num_nodes, mx.array(uniforms))
        else:
            uniforms = np.array(impl.draw_uniforms(key, step.case.batch, step.uniforms.shape[1:]))
            as_tree = impl.verify_tree(target, draft, tokens, parents, key=key, num_nodes=num_nodes, validate=False)
            as_chain = impl.verify_chain(target, draft[:, :-1], tokens, key=key, num_draft=num_nodes, validate=False)
        names = (f"{entry}_tree", f"{entry}_chain")
        checks.assert_kernels_agree(
            dict(zip(names, (as_tree, as_chain))),
            chain_comparer(step, uniforms),
            fields=("tokens", "num_accepted"),
            provenance={name: provenance(name) for name in names},
            label=f"{entry}: tree vs chain",
            call=call,
        )
