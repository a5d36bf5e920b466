"""Planted bug in `apply_chain` alone: the correction is drawn with the uniform that rejected.

`verify_chain` keeps the reference kernel, so every sampled property passes.
"""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import speculative


def apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms):
    decided = speculative.apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms)
    rejecting = mx.take_along_axis(uniforms[:, 0], decided.num_accepted[:, None], axis=1)
    reused = mx.concatenate([uniforms[:, :1], mx.concatenate([rejecting, uniforms[:, 1, 1:]], axis=1)[:, None]], axis=1)
    return speculative.apply_chain(target_probs, draft_probs, draft_tokens, num_draft, reused)
