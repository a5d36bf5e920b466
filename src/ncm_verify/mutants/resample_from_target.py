"""Planted bug: correct from p instead of the residual."""

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual

globals().update(with_rule(correct=lambda p, q, u: sample_residual(p, 0.0 * q, u)))
