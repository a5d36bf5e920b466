"""Hypothesis strategies for tree shapes and modes (issue 19).

A tree's kernel cases and exact-step cases come from its spec in the kernel registry
(`ncm_verify.harness.kernels.TREE`) through the suite's `strategies`, as every kernel's do.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

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
LARGE_VOCAB_NODES = 4
"""Nodes of a step case past 1000 ids: each node holds two dense rows."""
small_tree_shapes = st.sampled_from(shapes_up_to(LARGE_VOCAB_NODES))
