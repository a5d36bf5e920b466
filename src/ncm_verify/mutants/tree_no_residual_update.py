"""Planted bug: a rejected child leaves the residual as it was: every sibling is judged against the original p."""

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_rule(update=lambda weights, mass, q_i: (weights, mass)))
