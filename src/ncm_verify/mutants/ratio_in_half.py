"""Planted bug: the acceptance ratio p/q rounded to float16 (P(accept) off by up to ~2.4e-4 relative)."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403


def accept_by_half_ratio(p_x, q_x, u):
    ratio = (p_x.astype(mx.float32) / q_x.astype(mx.float32)).astype(mx.float16)
    return u < ratio


globals().update(with_rule(accept=accept_by_half_ratio))
