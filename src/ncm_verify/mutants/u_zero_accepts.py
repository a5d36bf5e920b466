"""Planted bug: uniforms in [0, 1) and acceptance u <= p/q, so u = 0 accepts p(x) = 0."""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403


def raw_uniforms(keys, shape):
    return mx.vmap(lambda key: mx.random.uniform(shape=shape, key=key))(keys)


def accept_at_or_below_ratio(p_x, q_x, u):
    return u <= p_x.astype(mx.float32) / q_x.astype(mx.float32)


globals().update(with_rule(accept=accept_at_or_below_ratio, uniforms=raw_uniforms))
