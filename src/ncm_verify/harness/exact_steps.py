"""Block and tree steps whose float32 arithmetic is exact, so their decisions are judged to two ulps at any V.

Every entry of these rows is an integer number of units 2^-24 with at most 8 significant bits: exact in float32,
float16 (below 2^-14 its subnormals are the multiples of 2^-24) and bfloat16. A row is built as a pair (p, q) for a
prefix weight w = 2^-j (block verification's; the tree's is 1): q is w p less t on a few ids T, where the taken
t are powers of two summing to 2^-m, and more elsewhere. So every ``w p - q`` is exact, the residual
``max(w p - q, 0) = t`` has the power-of-two mass 2^-m (its sums and normalisation exact in any order), and a draft
at an id where q = 2^s w p leaves the weight 2^-s. The oracles (`exact_block.block_quantities`,
`exact_tree.residual_drift`) then count no rounding but the last comparison's: a threshold, a sibling's acceptance
or a draw that moves by 1e-6 of itself decides otherwise past 3-16 ulps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from ncm_verify.oracles.exact_tree import tree_nodes

UNIT_BITS = 24
"""Entries are integers times 2^-24."""
FEW_BITS = 8
"""Significant bits of every entry: exact in bfloat16 (8), float16 (11, subnormals on the 2^-24 grid) and float32."""
TAIL_UNITS = 256
"""Tail entries are integers below this: 8 bits at most."""
TAKEN_RATIOS = (0.0, 0.5, 1.25, 1.5, 1.75, 2.0, 3.0)
"""q = g 2^m t at a taken id (w p = t + q): after one rejection a sibling there is accepted with probability
min(1, r(x) / q(x)) = min(1, 1 / g): g of at most 3 bits sets where, below 1, its boundary falls (g = 0: q(x) = 0)."""
SINK_PIECES = 32
"""q's mass where p is 0 is split into up to this many powers of two per bit: no single id outweighs the head."""


def has_few_bits(units: np.ndarray) -> np.ndarray:
    """Per entry: a non-negative integer with at most `FEW_BITS` significant bits."""
    units = np.asarray(units, dtype=np.int64)
    odd = np.where(units > 0, units // np.maximum(units & -units, 1), 0)
    return (units >= 0) & (odd < 2**FEW_BITS)


class ExactPair(NamedTuple):
    """Target and draft rows (integer units), with the ids a draft may take: ``taken`` (0 < q < w p there: the
    residual's support; the next weight 1), ``contested`` (those of them where a sibling's acceptance boundary lies
    below 1), ``halving`` (q = 2^s w p: the next weight 2^-s, `shifts`), ``tail`` (q = w p: the next weight 1) and
    ``sinks`` (p = 0 < q: always rejected)."""

    target: np.ndarray
    draft: np.ndarray
    taken: np.ndarray
    contested: np.ndarray
    halving: np.ndarray
    shifts: np.ndarray
    tail: np.ndarray
    sinks: np.ndarray


def fill_units(rng: np.random.Generator, count: int, total: int) -> np.ndarray:
    """`count` integers in [0, `TAIL_UNITS`) summing to `total` (at most ``(TAIL_UNITS - 1) count``), log-normal."""
    weights = np.exp(1.5 * rng.standard_normal(count))
    units = np.minimum(np.floor(weights / weights.sum() * total), TAIL_UNITS - 1).astype(np.int64)
    while (gap := total - int(units.sum())) != 0:
        # One unit more (or less) at random ids with room: random keys, the |gap| smallest among those with room.
        room = units < TAIL_UNITS - 1 if gap > 0 else units > 0
        keys = np.where(room, rng.random(count), 2.0)
        chosen = np.argpartition(keys, min(abs(gap), int(room.sum())) - 1)[: min(abs(gap), int(room.sum()))]
        units[chosen] += np.sign(gap)
    return units


def powers_of_two(total: int, pieces: int) -> list[int]:
    """`total` as powers of two: each set bit, split into up to `pieces` equal powers of two (at least 1 unit)."""
    parts = []
    for bit in range(total.bit_length()):
        if total >> bit & 1:
            split = min(pieces, 1 << bit)
            parts += [(1 << bit) // split] * split
    return parts


def make_exact_pair(rng: np.random.Generator, vocab: int, weight_shift: int, moved: int) -> ExactPair:
    """p and q over `vocab` ids (integer units, each summing to 2^24) with ``max(w p - q, 0)`` of mass 2^-`moved`
    for w = 2^-`weight_shift`; see the module docstring."""
    exponent = UNIT_BITS - moved
    order = rng.permutation(vocab)
    count = int(rng.integers(2, min(8, exponent - 2, vocab // 4) + 1))
    taken_units = [1 << (exponent - 1 - i) for i in range(count - 1)] + [1 << (exponent - count + 1)]
    ratios = rng.choice(TAKEN_RATIOS[1:], size=count)
    if rng.random() < 0.5:  # q misses the likeliest taken id: its t, half the residual, spent on the others' ratios
        ratios[0] = 0.0
    budget = (3 << (UNIT_BITS - weight_shift)) // 4

    def taken_draft() -> list[int]:
        return [int(t * g) << moved for t, g in zip(taken_units, ratios)]

    def too_many_bits() -> np.ndarray:  # w p = t (1 + g 2^m): 8 bits at most
        return ~has_few_bits(np.array(taken_draft()) + taken_units)

    while sum(taken_draft()) + (1 << exponent) > budget or too_many_bits().any():
        # one ratio lower: the first with too many bits, else the largest share of q on T
        lower = int(np.argmax(too_many_bits())) if too_many_bits().any() else int(np.argmax(taken_draft()))
        ratios[lower] = TAKEN_RATIOS[TAKEN_RATIOS.index(float(ratios[lower])) - 1]
    taken = order[:count]
    scaled = np.zeros(vocab, np.int64)  # w p in units
    draft = np.zeros(vocab, np.int64)
    draft[taken] = taken_draft()
    scaled[taken] = draft[taken] + taken_units
    rest = order[count:]
    sinks, rest = rest[:64], rest[64:]
    left = (1 << (UNIT_BITS - weight_shift)) - int(scaled.sum())
    tail_share = min(left, int(rng.integers(32, TAIL_UNITS // 2)) * len(rest))
    head = powers_of_two(left - tail_share, 4)
    extras, rest = rest[: len(head)], rest[len(head) :]
    scaled[extras] = head
    scaled[rest] = fill_units(rng, len(rest), tail_share)
    draft[extras], draft[rest] = scaled[extras], scaled[rest]
    drafted = rest[scaled[rest] > 0]
    halving = drafted[rng.integers(0, len(drafted), size=min(int(rng.integers(1, 4)), len(drafted)))]
    halving = np.unique(halving)
    shifts = rng.integers(1, 3, size=len(halving))
    draft[halving] = scaled[halving] << shifts
    spread = np.concatenate([sinks, rest[scaled[rest] == 0]])
    split = SINK_PIECES
    while len(pieces := powers_of_two((1 << UNIT_BITS) - int(draft.sum()), split)) > len(spread):
        split //= 2  # fewer empty ids than pieces: coarser pieces (one per bit fits the 64 sinks)
    draft[spread[: len(pieces)]] = pieces
    target = scaled << weight_shift
    tail = rest[scaled[rest] > 0]
    halved = np.zeros(vocab, bool)
    halved[halving] = True
    contested = taken[ratios > 1]
    sunk = spread[: len(pieces)]
    return ExactPair(target, draft, taken[draft[taken] > 0], contested, halving, shifts, tail[~halved[tail]], sunk)


def as_probabilities(units: np.ndarray) -> np.ndarray:
    return units.astype(np.float64) * 2.0**-UNIT_BITS


EXACT_DTYPES = ("float32", "float16", "bfloat16")
moved_exponents = st.integers(1, 6)
"""The residual's mass 2^-m: thresholds rho / (rho + 1 - w) and sibling boundaries spread over (0, 1)."""


DRAFTED_FROM = ("halving",) * 5 + ("taken",)
"""Where a block's drafts sit: mostly where q = 2^s w p, so that weights, and so thresholds, lie below 1 (a weight of
1 makes its threshold 1: that position always passes, and the decisions before it go unseen)."""


def block_arrays(draw, rng: np.random.Generator, vocab: int, batch: int, max_draft: int) -> tuple:
    """Block inputs: each position's pair built for the weight the drafts before it left (1, 1/2 or 1/4)."""
    target = np.zeros((batch, max_draft + 1, vocab))
    draft = np.zeros((batch, max_draft, vocab))
    drafts = np.zeros((batch, max_draft), np.int64)
    for b in range(batch):
        shift = 0
        for i in range(max_draft + 1):
            pair = make_exact_pair(rng, vocab, shift, shift + draw(moved_exponents, label="moved mass exponent"))
            target[b, i] = as_probabilities(pair.target)
            if i == max_draft:
                break
            draft[b, i] = as_probabilities(pair.draft)
            kind = draw(st.sampled_from(DRAFTED_FROM), label="draft taken from")
            ids = getattr(pair, kind)
            if not len(ids):
                ids, kind = pair.tail, "tail"
            pick = int(rng.integers(len(ids)))
            drafts[b, i] = ids[pick]
            shift = int(pair.shifts[pick]) if kind == "halving" else 0
    num_draft = np.full(batch, max_draft, dtype=np.int64)
    return target, draft, drafts, num_draft


TREE_SHAPES = ((3,), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (1, 1, 1))
"""Up to three siblings (the first two judged exactly, the third to one division's rounding), up to three levels
deep; single children, whose rejection leaves a residual of power-of-two mass to draw from, and a chain."""


def choose_children(rng: np.random.Generator, pair: ExactPair, count: int, mode: str) -> np.ndarray:
    """Children of a node: its q's top ids (top_k); else a first child where p = 0, q = 2^s p or q < p (always
    rejected, accepted with probability 2^-s, always accepted: siblings reached, or a path down to a leaf's bonus
    draw from its whole target row) and later ones where a sibling's boundary
    ``r(x) / q_i(x)`` lies below 1 (`ExactPair.contested`), else on the residual's support."""
    q = as_probabilities(pair.draft)
    if mode == "top_k":  # the `count` largest, ties to the smaller id (a stable argsort of -q, without sorting V)
        kth = np.partition(q, len(q) - count)[len(q) - count]
        candidates = np.flatnonzero(q >= kth)
        return candidates[np.lexsort((candidates, -q[candidates]))][:count]
    first = (pair.sinks, pair.halving, pair.taken)[int(rng.integers(3))]
    children = [int(rng.choice(first if len(first) else pair.tail))]
    later = next((ids for ids in (pair.contested, pair.taken) if len(ids) >= count - 1), None)
    if later is None:
        later = np.concatenate([pair.taken, pair.tail[:count]])
    children += [int(x) for x in rng.choice(later, size=count - 1, replace=mode == "with_replacement")]
    return np.array(children)


def tree_arrays(draw, rng: np.random.Generator, vocab: int, batch: int, mode: str) -> tuple:
    """Whole trees of a drawn shape, every row a pair for the weight 1."""
    shape = draw(st.sampled_from(TREE_SHAPES), label="tree shape")
    parents = np.array(tree_nodes(shape), dtype=np.int64)
    count = len(parents)
    target = np.zeros((batch, count + 1, vocab))
    draft = np.zeros((batch, count + 1, vocab))
    tokens = np.zeros((batch, count), np.int64)
    # A pool of three pairs, each row one of them: building a pair at V = 128 256 takes ~40 ms.
    pool = [make_exact_pair(rng, vocab, 0, draw(moved_exponents, label="moved mass exponent")) for _ in range(3)]
    for b in range(batch):
        pairs = [pool[int(k)] for k in rng.integers(0, len(pool), size=count + 1)]
        for row, pair in enumerate(pairs):
            target[b, row], draft[b, row] = as_probabilities(pair.target), as_probabilities(pair.draft)
        for node in [-1, *range(count)]:
            children = np.flatnonzero(parents == node)
            if len(children):
                tokens[b, children] = choose_children(rng, pairs[node + 1], len(children), mode)
    return target, draft, tokens, np.broadcast_to(parents, (batch, count)).copy(), np.full(batch, count, np.int64)


@st.composite
def exact_step_cases(draw, kernel, options: dict | None = None, *, vocab: int, offsets, dtypes=EXACT_DTYPES):
    """One block or tree step (`kernel`, a spec; the tree's mode in `options`) on exact rows of `vocab` ids, in a
    drawn dtype, every uniform placed `offsets` float32 ulps from a boundary but for one in six anywhere."""
    from ncm_verify.harness.drivers import make_step_case
    from ncm_verify.harness.strategies import seeds, step_uniforms

    rng = np.random.default_rng(draw(seeds, label="table seed"))
    batch = draw(st.integers(2, 3) if kernel.name == "tree" else st.integers(1, 2), label="batch")
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    if kernel.name == "tree":
        arrays = tree_arrays(draw, rng, vocab, batch, (options or {})["mode"])
        columns = arrays[2].shape[1] + 1
    else:
        max_draft = draw(st.integers(2, 4), label="max drafts")
        arrays, columns = block_arrays(draw, rng, vocab, batch, max_draft), max_draft + 1
    step = make_step_case(kernel, arrays, dtype, options=options)
    kinds = ("boundary",) * 5 + ("random",)
    uniforms = step_uniforms(kernel, step.exact_args, (batch, 2, columns), options, kinds=kinds, offsets=offsets)
    step.uniforms = draw(uniforms, label="uniforms")
    return step
