"""Planted bug (vllm-project/vllm-ascend#7807, fixed by #7808): inside the block path each draft is judged by the
token-wise test u q(x) < p(x) and the prefix ends at the first rejection; the correction stays the block's."""

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.arrays import count_accepted

globals().update(with_block_rule(passes=lambda u, h, p_x, q_x: u * q_x < p_x, length=count_accepted))
