"""Planted bug: the bonus token comes from the last draft's target row, not the next one."""

import mlx.core as mx

from ncm_verify.mutants import make_implementation
from ncm_verify.reference import *  # noqa: F401,F403


def bonus_from_previous_row(target_probs, draft_probs, draft_tokens, num_draft, uniforms):
    # Row num_draft is read only for the bonus; overwrite it with row num_draft - 1.
    previous = mx.take_along_axis(target_probs, mx.maximum(num_draft - 1, 0)[:, None, None], axis=1)
    is_bonus_row = mx.arange(target_probs.shape[1])[None, :, None] == num_draft[:, None, None]
    target_probs = mx.where(is_bonus_row, previous, target_probs)
    return target_probs, draft_probs, draft_tokens, num_draft, uniforms


globals().update(make_implementation(chain_inputs=bonus_from_previous_row))
