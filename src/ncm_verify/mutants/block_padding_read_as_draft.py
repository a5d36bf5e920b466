"""Planted bug (the case vllm-project/vllm-ascend#15673 had to special-case): a trailing -1 placeholder is read as
a drafted token (id 0), so every sequence's thresholds are built over all G columns (h_g from rho, not w_g) and
its accepted count is only then cut to its own draft length."""

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import all_drafts

globals().update(with_block_rule(judged=lambda num_draft, max_draft: all_drafts(num_draft.shape[0], max_draft)))
