"""Planted bug: accept with min(1, q/p)."""

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_rule(accept=lambda p_x, q_x, u: u * p_x.astype(q_x.dtype) < q_x))
