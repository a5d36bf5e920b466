"""Planted bug: in the sampled modes the tree loop draws every node's children from the draft row of its level's
first node, while `verify_tree` is handed each node's own row (the q verified is not the one drawn from)."""

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_loop_step(child_row=lambda level, i, mode: level[i if mode == "top_k" else 0]))
