"""Planted bug: the prefix weight w_i = w_{i-1} p(x) / q(x) is not clipped at 1."""

import mlx.core as mx

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_block_rule(weight=lambda previous, p_x, q_x: previous * p_x / mx.maximum(q_x, 1e-38)))
