"""Planted bug (vllm-project/vllm-ascend#7807, fixed by #7808): the block's thresholds, but the correction drawn
from the token-wise residual max(p - q, 0) whatever the accepted prefix's weight."""

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import sample_residual


def correction(p_row, q_row, weight, uniforms):
    return sample_residual(p_row, q_row, uniforms)


globals().update(with_block_rule(correction=correction))
