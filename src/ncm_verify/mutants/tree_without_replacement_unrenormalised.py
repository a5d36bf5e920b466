"""Planted bug: children drawn without replacement are verified against q, not q renormalised over what is left."""

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.tree import tree_proposal


def proposal(q, tried, x, mode):
    return tree_proposal(q, tried, x, "with_replacement" if mode == "without_replacement" else mode)


globals().update(with_tree_rule(proposal=proposal))
