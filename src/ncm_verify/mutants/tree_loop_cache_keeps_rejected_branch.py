"""Planted bug: after verification the caches keep the first rows of the tree, as many as were accepted (a chain
loop's trim), not the accepted path: a rejected sibling's K/V stand in for the accepted node's."""

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_loop_step(kept=lambda path: list(range(1, len(path) + 1))))
