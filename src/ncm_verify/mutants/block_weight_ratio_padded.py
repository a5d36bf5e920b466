"""Planted bug: block verification's prefix weight divides by q(x) + 1e-10, w = min(w p(x) / (q(x) + 1e-10), 1): an
epsilon against division by zero, 1e-5 of a weight where q(x) is 1e-5, as in a large vocabulary's tail."""

import mlx.core as mx

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403


def padded_weight(previous, p_x, q_x):
    return mx.minimum(previous * p_x / (q_x + 1e-10), 1.0)


globals().update(with_block_rule(weight=padded_weight))
