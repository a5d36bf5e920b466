"""Hypothesis strategies for tree verification (issue 19): tree shapes, modes, and exact-step cases.

The suite's other strategies live in `strategies`; these reuse its row kinds, relations, dtypes
and uniform placement so that a tree step meets the corners a chain step meets.
"""

from __future__ import annotations

import dataclasses
import itertools

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

from ncm_verify.harness.strategies import (
    LARGE_VOCAB,
    STEP_DTYPES,
    STEP_ROW_KINDS,
    UNIFORM_KINDS,
    make_drafting_rows,
    make_step_draft_rows,
    make_step_rows,
    place_uniform,
    seeds,
    step_relations,
    step_vocabs,
    ulp_offsets,
)
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


@st.composite
def tree_uniforms(draw, case: TreeStepCase):
    """Float32 uniforms ``[B, 2, N+1]``, many near their decision's boundary in the float64 walk.

    Row 0 node by node, then the last token's draw: each boundary depends on the decisions before it.
    """
    batch, count = case.exact_args[2].shape
    shape = (batch, 2, count + 1)
    size = int(np.prod(shape))
    kinds = draw(st.lists(st.sampled_from(UNIFORM_KINDS), min_size=size, max_size=size), label="uniform kinds")
    offsets = draw(st.lists(ulp_offsets, min_size=size, max_size=size), label="uniform ulp offsets")
    fractions = draw(
        st.lists(st.floats(0, 1, exclude_max=True), min_size=size, max_size=size), label="uniform fractions"
    )
    uniforms = np.full(shape, 0.5, dtype=np.float32)
    order = [(b, 0, n) for b in range(batch) for n in range(count + 1)] + [
        (b, 1, n) for b in range(batch) for n in range(count + 1)
    ]
    for b, row, column in order:
        index = np.ravel_multi_index((b, row, column), shape)
        found = np.zeros(0)
        if kinds[index] == "boundary":
            target, draft, tokens, parents, num_nodes = case.exact_args
            found = boundaries(target, draft, tokens, parents, num_nodes, uniforms, b, row, column, mode=case.mode)
        uniforms[b, row, column] = place_uniform(kinds[index], offsets[index], fractions[index], found)
    return uniforms


@st.composite
def tree_step_cases(draw, modes=modes):
    """One `apply_tree` step: half-precision, nearly equal and one-hot rows, ids past 65 535, padded trees,
    children drawn by the mode (from q's excess over p where told), uniforms near their boundaries."""
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
    relation = draw(step_relations, label="draft relation")
    dtype = draw(st.sampled_from(STEP_DTYPES), label="dtype")
    over_drafted = draw(st.booleans(), label="drafts only where q > p")
    count = node_count(shape)
    caps = np.array(draw(st.lists(st.integers(0, count), min_size=batch, max_size=batch), label="nodes kept"))
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    target = make_step_rows(rng, batch * (count + 1), vocab, kind).reshape(batch, count + 1, vocab)
    draft = make_step_draft_rows(rng, target.reshape(-1, vocab), relation).reshape(target.shape)

    def rows_of(node: int, context: np.ndarray):
        p, q = target[:, node + 1], draft[:, node + 1]
        return p, q, make_drafting_rows(p, q, over_drafted)

    case = make_tree_step_case(grow_trees(rng, shape, mode, caps, rows_of), mode, dtype)
    case.uniforms = draw(tree_uniforms(case), label="uniforms")
    return case
