"""Hypothesis strategies for trees: shapes, modes, how children are drafted, sibling cases.

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
from ncm_verify.tolerances import normalisation_for

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


SIBLING_ATTEMPTS = 4
"""Tables drawn from one seed before a sibling case is filtered away."""


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
    dtype = draw(st.sampled_from(WALK_DTYPES), label="dtype")
    peaked = draw(st.booleans(), label="q's top ids hold nearly all of it")
    stray = draw(st.sampled_from([0.0, 0.5, -0.5]), label="draft sum strays by this share of its tolerance")
    seed = draw(seeds, label="table seed")
    # a few tables from one seed before the example is filtered: most rows give an informative last sibling
    for attempt in range(SIBLING_ATTEMPTS):
        rng = np.random.default_rng((seed, attempt))
        rows = rng.dirichlet(np.full(vocab, 0.5), size=(2, count + 1))
        if peaked:  # the siblings tried first (q's largest excess over p) hold all but ~1e-4 of q
            tried_first = np.argsort(-(rows[1, 0] / rows[0, 0]))[: count - 1]
            rows[1, 0, tried_first] *= 1e4 / rows[1, 0, tried_first].sum()
            rows[1, 0] /= rows[1, 0].sum()
        placeholder = np.zeros((1, count), np.int64)
        arrays = (rows[0][None], rows[1][None], placeholder, np.full((1, count), -1), np.array([count]))
        step = make_step_case(kernel, arrays, dtype, options={"mode": mode})
        stray_draft_sums(step, stray)
        target, draft = step.exact_args[0][0], step.exact_args[1][0]
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
                    break
            else:  # judged near its boundary: an id with 0 < r(x) < q_i(x)
                informative = np.flatnonzero((ratios > 0) & (ratios < 0.99))
                x = top[i] if mode == "top_k" else int(rng.choice(informative)) if len(informative) else -1
                if x not in informative:
                    break
            children.append(x)
            if i < count - 1:
                state = rule.reject(state, i, x)
        if len(children) == count:
            break
    else:
        reject()
    r_x, q_x = rule.pair(state, count - 1, children[-1])
    uniforms = np.full((1, 2, count + 1), np.float32(1.0 - 2.0**-24), dtype=np.float32)
    uniforms[0, 0, count - 1] = np.float32(r_x / q_x * (1.0 + side * SIBLING_MARGIN))
    uniforms[0, 1, 0] = np.float32(rng.random())
    with_tokens(step, np.array([children]))
    step.uniforms = uniforms
    return step


# --- walks that reach where tree bugs live: later siblings undecided, deeper levels after rejections ---

WALK_DTYPES = ("float32", "float16", "bfloat16")
"""Half inputs as often as float32: a residual kept in the inputs' precision shows only there."""
WALK_DRAFTS = ("spread", "peaked")
"""Draft rows over a small support: spread (Dirichlet), or peaked on the siblings drafted first (1 - eps of q)."""
WALK_SUPPORT = 8
"""Positive ids per row at most: the float32 bounds (m + 2) eps32 stay near 1e-6, far below half's rounding."""
WALK_VOCABS = st.one_of(st.integers(3, 8), st.integers(3, 8), st.just(65541))
"""Mostly small: a walk's float64 oracle reads whole rows at every node; past 2^16 a third of the time."""
walk_offsets = st.integers(8, 15)
"""A judged uniform sits 2^-k (relative) from its boundary: within half's rounding of r, beyond float32's."""


def walk_rows(rng: np.random.Generator, rows: int, vocab: int, decoys: list[int], support: np.ndarray, draft_kind: str):
    """``(target, draft)`` of `rows` rows on `support`; peaked drafts give the `decoys` (siblings tried first) all
    of q but ``eps`` in 1e-6..1e-2, so that a later sibling's q_i is the renormalised remainder."""
    target, draft = np.zeros((rows, vocab)), np.zeros((rows, vocab))
    for n in range(rows):
        target[n, support] = rng.dirichlet(np.full(len(support), 0.7))
        spread = rng.dirichlet(np.full(len(support), 0.7))
        if draft_kind == "peaked" and decoys:
            eps = 10.0 ** rng.uniform(-6, -2)
            others = np.setdiff1d(support, decoys)
            draft[n, decoys] = (1 - eps) * rng.dirichlet(np.ones(len(decoys)))
            draft[n, others] = eps * spread[: len(others)] / spread[: len(others)].sum()
        else:
            draft[n, support] = spread
    return target, draft


def walk_tree(rng: np.random.Generator, support: np.ndarray, widths: list[int]):
    """Token ids and parents of one walk: at each level `widths[d]` siblings under the last sibling of the level
    above; each level's decoys (its earlier siblings) reuse the level above's ids where they can, so that a
    tried set carried into the next level meets them again. Returns (tokens, parents, decoys per level)."""
    tokens: list[int] = []
    parents: list[int] = []
    levels: list[list[int]] = []
    parent, previous = -1, list[int]()
    for width in widths:
        pool = list(previous) + [int(x) for x in rng.permutation(support) if x not in previous]
        ids = pool[:width] if rng.random() < 0.5 else [int(x) for x in rng.choice(support, width, replace=False)]
        levels.append(ids[:-1])
        tokens.extend(ids)
        parents.extend([parent] * width)
        parent, previous = len(tokens) - 1, ids
    return tokens, parents, levels


def stray_draft_sums(step, stray: float) -> None:
    """Scale a step's draft rows by ``1 + stray * tolerance`` after rounding (`make_step_case` renormalises them):
    sums off 1 as far as validation lets a row stray, the float64 values the kernel reads updated with them."""
    if not stray:
        return
    import mlx.core as mx

    dtype, vocab = step.case.args[1].dtype, step.case.args[1].shape[-1]
    tolerance = normalisation_for("draft_probs", dtype, vocab)
    draft = (step.case.args[1].astype(mx.float32) * (1.0 + stray * tolerance)).astype(dtype)
    step.case.args = (step.case.args[0], draft, *step.case.args[2:])
    step.exact_args = (step.exact_args[0], np.array(draft.astype(mx.float32)).astype(np.float64), *step.exact_args[2:])


def with_tokens(step, tokens: np.ndarray) -> None:
    """Set a step's tree tokens, in the kernel's arguments and in their float64 copy alike."""
    import mlx.core as mx

    step.case.args = (*step.case.args[:2], mx.array(tokens.astype(np.int32)), *step.case.args[3:])
    step.exact_args = (*step.exact_args[:2], tokens.astype(np.int64), *step.exact_args[3:])


@st.composite
def walk_cases(draw, kernel, mode: str, dtypes: tuple[str, ...] = WALK_DTYPES, min_batch: int = 1):
    """A batch of 1-3 walks, each 2-3 levels deep: at each level every earlier sibling is drafted from most of q
    and rejected (uniform near 1), the last judged 2^-k from its boundary r(x)/q_i(x): just below it (accepted:
    the walk goes down) above the last level; at the last level either side, or rejected too and the correction
    drawn 2^-k from a boundary of the float64 residual's CDF. Rows are half or float32, q's sum strayed from 1
    within validation's tolerance; the rows of a batch share ids, so that state shared across it shows.
    """
    from ncm_verify.harness.drivers import make_step_case

    vocab = draw(WALK_VOCABS, label="vocab")
    batch = draw(st.integers(min_batch, 3), label="walks")
    depth = draw(st.integers(2, 3), label="levels")
    widths = draw(st.lists(st.integers(2, 3), min_size=depth, max_size=depth), label="siblings per level")
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    draft_kind = draw(st.sampled_from(WALK_DRAFTS), label="draft rows")
    stray = draw(st.sampled_from([0.0, 0.5, -0.5]), label="draft sum strays by this share of its tolerance")
    ending = draw(st.sampled_from(["judged below", "judged above", "corrected"]), label="last level")
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    size = min(vocab, WALK_SUPPORT)
    support = np.sort(rng.choice(vocab, size, replace=False))
    if vocab > 2**16:  # an id past 65 535, where 16-bit ids go wrong
        support[-1] = int(rng.integers(2**16, vocab))
        support = np.unique(support)
    count = sum(widths)
    arrays = [np.zeros((batch, count + 1, vocab)), np.zeros((batch, count + 1, vocab))]
    tokens, parents = np.zeros((batch, count), np.int64), np.zeros((batch, count), np.int64)
    for b in range(batch):
        tokens_b, parents_b, levels = walk_tree(rng, support, widths)
        decoys = [x for level in levels for x in level]
        arrays[0][b], arrays[1][b] = walk_rows(rng, count + 1, vocab, sorted(set(decoys)), support, draft_kind)
        tokens[b], parents[b] = tokens_b, parents_b
    step = make_step_case(kernel, (*arrays, tokens, parents, np.full(batch, count)), dtype, options={"mode": mode})
    stray_draft_sums(step, stray)
    uniforms = np.full((batch, 2, count + 1), np.float32(1.0 - 2.0**-24), dtype=np.float32)
    last_of_level = set(np.cumsum(widths) - 1)
    for b in range(batch):
        for n in range(count):
            final = n == count - 1
            if n not in last_of_level or (final and ending == "corrected"):
                continue
            found = kernel.boundaries(step.exact_args, uniforms, b, 0, n, mode=mode)
            if len(found):
                side = 1.0 if final and ending == "judged above" else -1.0
                offset = 2.0 ** -draw(walk_offsets, label="offset exponent")
                uniforms[b, 0, n] = np.float32(found[0] * (1.0 + side * offset))
            else:  # r(x) >= q_i(x) (always accepted) or not reached: any uniform
                uniforms[b, 0, n] = np.float32(rng.random())
        found = kernel.boundaries(step.exact_args, uniforms, b, 1, 0, mode=mode)
        if len(found):
            side = draw(st.sampled_from([-1.0, 1.0]), label="correction side")
            offset = 2.0 ** -draw(walk_offsets, label="offset exponent")
            u = found[int(rng.integers(len(found)))] * (1.0 + side * offset)
            uniforms[b, 1, 0] = np.float32(min(u, 1.0 - 2.0**-24))
        else:
            uniforms[b, 1, 0] = np.float32(rng.random())
    step.uniforms = uniforms
    return step


LOOP_BRANCHINGS = ((1, 1, 1), (3,), (2, 1), (1, 2), (2, 2), (3, 1), (1, 1, 1, 1, 1, 1))
"""Tree shapes of the tree-decoding loop (children per node at each depth): chains, and trees of 3, 4 and 6 nodes
whose later siblings, deeper nodes and off-first-child paths are where masks, positions and compaction break."""
