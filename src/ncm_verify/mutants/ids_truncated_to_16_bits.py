"""Planted bug: the chain kernel keeps draft ids as uint16, so id 65 541 is judged (and emitted) as id 5.

Invisible below 65 536 ids, where the cast changes nothing.
"""

import mlx.core as mx

from ncm_verify.mutants import make_implementation
from ncm_verify.reference import *  # noqa: F401,F403


def ids_as_uint16(target_probs, draft_probs, draft_tokens, num_draft, uniforms):
    drafted = mx.arange(draft_tokens.shape[1])[None] < num_draft[:, None]
    truncated = mx.where(drafted, draft_tokens.astype(mx.uint16).astype(mx.int32), draft_tokens)
    return target_probs, draft_probs, truncated, num_draft, uniforms


globals().update(make_implementation(chain_inputs=ids_as_uint16))
