"""Planted bug (vllm-project/vllm-ascend#7603): drafters without draft probabilities (n-gram, suffix) fell back
to q(x) = 1 inside the cumulative product; here every draft's weight factor is p(x) / 1."""

import mlx.core as mx

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_block_rule(weight=lambda previous, p_x, q_x: mx.minimum(previous * p_x, 1.0)))
