"""Planted bug (the rule a review asked for in vllm-project/vllm-ascend#11985): the accepted prefix stops at the
first failed threshold, where the paper (and vllm-project/vllm#46781) keeps the last passing one."""

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.arrays import count_accepted

globals().update(with_block_rule(length=count_accepted))
