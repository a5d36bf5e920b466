"""Planted bug: the tree loop draws every node's children from its draft row squared and renormalised (a sharper
law), while verify_tree is handed the row itself: each call is judged against a q the children did not follow."""

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403


def sharpened(level, i, mode):
    row = level[i] * level[i]
    return row / row.sum()


globals().update(with_tree_loop_step(child_row=sharpened))
