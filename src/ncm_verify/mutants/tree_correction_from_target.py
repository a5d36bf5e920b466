"""Planted bug: once every child is rejected, the correction is drawn from p instead of the last residual."""

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_rule(correction=lambda weights, p, q: p))
