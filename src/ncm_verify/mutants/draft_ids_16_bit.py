"""Planted bug: the chain kernel reads draft ids as 16 bits, so id 65 541 is read (and kept) as 5."""

import mlx.core as mx

from ncm_verify.mutants import make_implementation
from ncm_verify.reference import *  # noqa: F401,F403


def truncate_draft_ids(target_probs, draft_probs, draft_tokens, num_draft, uniforms):
    ids = draft_tokens.astype(mx.int32)
    truncated = mx.where(ids >= 0, mx.bitwise_and(ids, 0xFFFF), ids)  # -1 padding survives
    return target_probs, draft_probs, truncated, num_draft, uniforms


globals().update(make_implementation(chain_inputs=truncate_draft_ids))
