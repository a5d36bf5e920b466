"""Hypothesis strategies for trees (issue 19): shapes, modes, how children are drafted, sibling cases.

A tree's kernel cases and exact-step cases come from its spec in the kernel registry
(`ncm_verify.harness.kernels.TREE`) through the suite's `strategies`, as every kernel's do; what
they draw that only a tree has is here.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import reject
from hypothesis import strategies as st

from ncm_verify.harness.strategies import (
    DRAFT_RELATIONS,
    seeds,
)
from ncm_verify.oracles import exact_tree
from ncm_verify.oracles.exact_tree import MODES, tree_nodes

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
def sibling_cases(draw, kernel, mode: str):
    """One root with 2-3 leaf children: the earlier ones rejected (uniform near 1), the last judged at a uniform
    `SIBLING_MARGIN` above or below its float64 boundary r(x)/q_i(x), where 0 < r(x) < q_i(x).

    Its decision depends on the residual the earlier rejections left and on q_i alike: a sibling judged against
    p, or against q where q_i is not q, goes the other way for a share of the drawn rows. `kernel` is the tree's
    spec in the registry: the case is one of its step cases.
    """
    from ncm_verify.harness.drivers import make_step_case

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
    arrays = (target[None], draft[None], np.array([children]), np.full((1, count), -1), np.array([count]))
    return make_step_case(kernel, arrays, "float32", uniforms, options={"mode": mode})
