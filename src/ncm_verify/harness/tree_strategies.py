"""Hypothesis strategies for tree verification (issue 19): tree shapes, modes, and exact-step cases.

The suite's other strategies live in `strategies`; these reuse its row kinds, relations, dtypes
and uniform placement so that a tree step meets the corners a chain step meets.
"""

from __future__ import annotations

import dataclasses
import itertools

import mlx.core as mx
import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from ncm_verify.harness.strategies import (
    DRAFT_RELATIONS,
    LARGE_VOCAB,
    STEP_DTYPES,
    STEP_ROW_KINDS,
    UNIFORM_KINDS,
    make_drafting_rows,
    make_step_draft_rows,
    make_step_rows,
    place_uniform,
    seeds,
    step_vocabs,
    ulp_offsets,
)
from ncm_verify.oracles import exact_tree
from ncm_verify.oracles.exact_tree import MODES, boundaries, tree_nodes

modes = st.sampled_from(MODES)
"""How a node's children were drawn: i.i.d. from q, without replacement, or q's top k."""
MAX_TREE_NODES = 8
"""Nodes of a drawn tree shape: the with-replacement enumeration grows as V^k per node."""


def node_count(shape) -> int:
    return len(tree_nodes(shape))


def shapes_up_to(nodes: int) -> list[tuple[int, ...]]:
    """Every shape of depth 1-3 and 1-3 children per depth with at most `nodes` nodes, smallest first."""
    shapes = [s for depth in (1, 2, 3) for s in itertools.product((1, 2, 3), repeat=depth) if node_count(s) <= nodes]
    return sorted(shapes, key=lambda s: (node_count(s), s))


tree_shapes = st.sampled_from(shapes_up_to(MAX_TREE_NODES))
"""Children per depth, e.g. (2, 2): every node at depth d has shape[d] children; chains are (1, 1, ...)."""
tree_relations = st.sampled_from(DRAFT_RELATIONS)
"""Each relation alike: the chain's step cases favour nearly equal rows, whose siblings are seldom tried at all."""
TREE_DRAFTINGS = ("q", "first where q > p", "first where q > p, later where p > q")
"""Where a step case's children come from (within q's support): q itself, or a first child likely rejected and
later ones where the residual lives, so that a later sibling's decision depends on the residual and q_i alike."""
LARGE_VOCAB_NODES = 4
"""Nodes of a step case past 1000 ids: each node holds two dense rows."""
small_tree_shapes = st.sampled_from(shapes_up_to(LARGE_VOCAB_NODES))


@dataclasses.dataclass
class TreeStepCase:
    """One `apply_tree` step: kernel arguments in their dtype, the same values in float64, uniforms, mode."""

    args: tuple
    exact_args: tuple
    uniforms: np.ndarray
    mode: str
    dtype: str

    @property
    def batch(self) -> int:
        return self.args[0].shape[0]

    def apply(self, impl, uniforms):
        """``impl.apply_tree`` on these inputs, given its uniforms."""
        return impl.apply_tree(*self.args, mx.array(uniforms), mode=self.mode)

    def verify(self, impl, key, **options):
        """``impl.verify_tree`` on these inputs with `key`."""
        target, draft, tokens, parents, num_nodes = self.args
        return impl.verify_tree(target, draft, tokens, parents, key=key, num_nodes=num_nodes, mode=self.mode, **options)

    def rows(self, start: int, stop: int) -> TreeStepCase:
        """Sequences start..stop of the batch."""
        return dataclasses.replace(
            self,
            args=tuple(a[start:stop] for a in self.args),
            exact_args=tuple(a[start:stop] for a in self.exact_args),
            uniforms=self.uniforms[start:stop],
        )

    def describe(self) -> str:
        """A short account of the inputs for failure messages."""
        _, _, tokens, parents, num_nodes = self.exact_args
        return (
            f"apply_tree({self.dtype} rows {tuple(self.args[0].shape)}, tree_tokens={tokens.tolist()}, "
            f"parents={parents.tolist()}, num_nodes={num_nodes.tolist()}, mode={self.mode!r}, "
            f"uniforms={self.uniforms.tolist()})"
        )


def make_tree_step_case(inputs, mode: str, dtype: str) -> TreeStepCase:
    """A `TreeStepCase` from a drivers' `TreeInputs`, its rows rounded to `dtype` (uniforms drawn apart)."""
    from ncm_verify.harness.drivers import round_rows

    rounded = (
        round_rows(inputs.target, dtype),
        round_rows(inputs.draft, dtype),
        mx.array(inputs.tokens, dtype=mx.int32),
        mx.array(inputs.parents, dtype=mx.int32),
        mx.array(inputs.num_nodes, dtype=mx.int32),
    )
    exact_args = (
        np.array(rounded[0].astype(mx.float32)).astype(np.float64),
        np.array(rounded[1].astype(mx.float32)).astype(np.float64),
        inputs.tokens.copy(),
        inputs.parents.copy(),
        inputs.num_nodes.copy(),
    )
    return TreeStepCase(rounded, exact_args, np.zeros(0, np.float32), mode, dtype)


uniform_placements = st.tuples(st.sampled_from(UNIFORM_KINDS), ulp_offsets, st.floats(0, 1, exclude_max=True))
"""Where one uniform goes (`strategies.place_uniform`): its kind, ulps from its boundary, a fraction."""


@st.composite
def tree_uniforms(draw, case: TreeStepCase):
    """Float32 uniforms ``[B, 2, N+1]``, many near their decision's boundary in the float64 walk.

    Sequence by sequence, row 0 node by node, then the last token's draw: each boundary depends on
    the decisions before it.
    """
    target, draft, tokens, parents, num_nodes = case.exact_args
    shape = (tokens.shape[0], 2, tokens.shape[1] + 1)
    size = int(np.prod(shape))
    placements = draw(st.lists(uniform_placements, min_size=size, max_size=size), label="uniform placements")
    uniforms = np.full(shape, 0.5, dtype=np.float32)
    for (b, row, column), (kind, offset, fraction) in zip(np.ndindex(*shape), placements):
        found = np.zeros(0)
        if kind == "boundary":
            found = boundaries(target, draft, tokens, parents, num_nodes, uniforms, b, row, column, mode=case.mode)
        uniforms[b, row, column] = place_uniform(kind, offset, fraction, found)
    return uniforms


@st.composite
def tree_step_cases(draw, modes=modes):
    """One `apply_tree` step: half-precision, nearly equal and one-hot rows, ids past 65 535, padded trees,
    children drawn by the mode (a first child from q's excess over p where told), uniforms near their boundaries."""
    from ncm_verify.harness.tree_driver import grow_trees

    vocab = draw(step_vocabs, label="vocab")
    small = vocab <= LARGE_VOCAB
    batch = draw(st.integers(1, 6 if small else 2), label="batch")
    shape = draw(
        tree_shapes if small else small_tree_shapes,
        label="tree shape",
    )
    mode = draw(modes, label="mode")
    kind = draw(st.sampled_from(STEP_ROW_KINDS), label="target row kind")
    relation = draw(tree_relations, label="draft relation")
    dtype = draw(st.sampled_from(STEP_DTYPES), label="dtype")
    drafting = draw(st.sampled_from(TREE_DRAFTINGS), label="children drawn from")
    count = node_count(shape)
    # Whole trees half the time: a cut tree often loses the siblings whose decisions depend on the earlier ones.
    kept = st.one_of(st.just(count), st.integers(0, count))
    caps = np.array(draw(st.lists(kept, min_size=batch, max_size=batch), label="nodes kept"))
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    target = make_step_rows(rng, batch * (count + 1), vocab, kind).reshape(batch, count + 1, vocab)
    draft = make_step_draft_rows(rng, target.reshape(-1, vocab), relation).reshape(target.shape)

    def rows_of(node: int, context: np.ndarray):
        p, q = target[:, node + 1], draft[:, node + 1]
        first = make_drafting_rows(p, q, drafting != "q")
        deficit = np.where(p > q, q, 0.0)
        later = np.where(deficit.sum(axis=1, keepdims=True) > 0, deficit, q) if drafting.endswith("p > q") else q
        return p, q, first, later

    case = make_tree_step_case(grow_trees(rng, shape, mode, caps, rows_of), mode, dtype)
    case.uniforms = draw(tree_uniforms(case), label="uniforms")
    return case


SIBLING_MARGIN = 1e-3
"""How far (relative) a judged sibling's uniform sits from its boundary r(x)/q_i(x): far beyond float32 rounding."""
RESIDUAL_VOCABS = st.one_of(st.integers(3, 8), st.sampled_from([65541, 100_003]))


def sibling_ratios(mode: str, state, allowed: np.ndarray) -> np.ndarray:
    """r(x) / q_i(x) for every id (inf where q_i(x) = 0 or the id may not be drawn), in one pass over the row."""
    q_i = np.ones_like(state.draft) if mode == "top_k" else exact_tree.proposal(mode, state.draft, state.tried, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(q_i > 0, state.residual / q_i, np.inf)
    return np.where(allowed, ratios, np.inf)


@st.composite
def sibling_cases(draw, mode: str):
    """One root with 2-3 leaf children: the earlier ones rejected (uniform near 1), the last judged at a uniform
    `SIBLING_MARGIN` above or below its float64 boundary r(x)/q_i(x), where 0 < r(x) < q_i(x).

    Its decision depends on the residual the earlier rejections left and on q_i alike: a sibling judged against
    p, or against q where q_i is not q, goes the other way for a share of the drawn rows.
    """
    from ncm_verify.harness.tree_driver import TreeInputs

    vocab = draw(RESIDUAL_VOCABS, label="vocab")
    count = draw(st.integers(2, 3), label="children")
    side = draw(st.sampled_from([-1.0, 1.0]), label="uniform below (-1) or above (+1) the boundary")
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    rows = rng.dirichlet(np.full(vocab, 0.5), size=(2, count + 1)).astype(np.float32).astype(np.float64)
    rows /= rows.sum(axis=-1, keepdims=True)
    target, draft = rows[0], rows[1]
    rule = exact_tree.reference_rule(mode)
    state = rule.start(target[0], draft[0])
    top = [int(x) for x in np.argsort(-draft[0], kind="stable")[:count]]
    children: list[int] = []
    for i in range(count):
        allowed = np.ones(vocab, dtype=bool)
        if mode != "with_replacement":
            allowed[children] = False
        ratios = sibling_ratios(mode, state, allowed)
        if i < count - 1:  # rejected by a uniform near 1: the likeliest rejected id, or top_k's next
            x = top[i] if mode == "top_k" else int(np.argmin(ratios))
            if not ratios[x] < 0.99:
                reject()
        else:  # judged near its boundary: an id with 0 < r(x) < q_i(x)
            informative = np.flatnonzero((ratios > 0) & (ratios < 0.99))
            x = top[i] if mode == "top_k" else int(rng.choice(informative)) if len(informative) else -1
            if x not in informative:
                reject()
        children.append(x)
        if i < count - 1:
            state = rule.reject(state, i, x)
    r_x, q_x = rule.pair(state, count - 1, children[-1])
    uniforms = np.full((1, 2, count + 1), np.float32(1.0 - 2.0**-24), dtype=np.float32)
    uniforms[0, 0, count - 1] = np.float32(r_x / q_x * (1.0 + side * SIBLING_MARGIN))
    uniforms[0, 1, 0] = np.float32(rng.random())
    inputs = TreeInputs(target[None], draft[None], np.array([children]), np.full((1, count), -1), np.array([count]))
    case = make_tree_step_case(inputs, mode, "float32")
    case.uniforms = uniforms
    return case
