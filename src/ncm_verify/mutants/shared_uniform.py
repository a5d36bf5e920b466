"""Planted bug: one uniform shared by every position of a block."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import make_uniforms


def shared_uniforms(keys, shape):
    drawn = make_uniforms(keys, shape)
    return mx.broadcast_to(drawn[..., :1], drawn.shape)


globals().update(with_rule(uniforms=shared_uniforms))
