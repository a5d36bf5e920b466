"""Planted bug: correct from q instead of the residual (p where q is all zero)."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual


def correct_from_draft(p, q, u):
    rows = mx.where(q.sum(axis=-1, keepdims=True) > 0, q, p)
    return sample_residual(rows, 0.0 * rows, u)


globals().update(with_rule(correct=correct_from_draft))
