"""Planted bug: above 2^16 ids block verification's last draw (from max(w p - q, 0), or the bonus row) moves its
threshold u * total up by 1e-6 of itself."""

import mlx.core as mx

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.block import block_correction


def moved_correction(p_row, q_row, weight, uniforms):
    if p_row.shape[-1] > 2**16:
        uniforms = mx.minimum(uniforms * (1.0 + 1e-6), 1.0 - 2.0**-24)
    return block_correction(p_row, q_row, weight, uniforms)


globals().update(with_block_rule(correction=moved_correction))
