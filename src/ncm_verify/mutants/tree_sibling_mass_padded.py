"""Planted bug: after a rejected child the tree walk keeps its residual's mass with 1e-6 added (an epsilon against
division by zero), so each later sibling is judged against r(x) about 1e-6 / mass of itself too small."""

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import renormalised_residual


def padded_update(weights, mass, q_i):
    rest, left = renormalised_residual(weights, mass, q_i)
    return rest, left + 1e-6


globals().update(with_tree_rule(update=padded_update))
