"""Planted bug: without replacement, the ids tried among a node's siblings stay excluded at its children's level.

The walk reaches a node after rejecting some of its siblings; its children were drawn from its own draft row,
with nothing excluded, but this walk renormalises their q over the ids not tried at the level above (and above
that), as a walk that never clears its tried set would. With replacement and top-k read no tried set.
"""

import mlx.core as mx

from ncm_verify.mutants import with_tree_levels
from ncm_verify.reference import *  # noqa: F401,F403


def start(p, mass, tried):
    return p, mx.ones_like(mass), tried


globals().update(with_tree_levels(start))
