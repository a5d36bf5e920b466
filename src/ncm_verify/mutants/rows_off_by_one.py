"""Planted bug: draft i is judged against target row i + 1."""

import mlx.core as mx

from ncm_verify.mutants import make_implementation
from ncm_verify.reference import *  # noqa: F401,F403


def shift_target_rows(target_probs, draft_probs, draft_tokens, num_draft, uniforms):
    shifted = mx.concatenate([target_probs[:, 1:], target_probs[:, -1:]], axis=1)
    return shifted, draft_probs, draft_tokens, num_draft, uniforms


globals().update(make_implementation(chain_inputs=shift_target_rows))
