"""Planted bug: deterministic top-k children are verified as if sampled from q (q_i = q, not a point mass)."""

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import tree_proposal


def proposal(q, tried, x, mode):
    return tree_proposal(q, tried, x, "with_replacement" if mode == "top_k" else mode)


globals().update(with_tree_rule(proposal=proposal))
