"""Planted bug in `apply_latent_chain` alone: every draw of the level (latent and tokens) uses the latent's uniform.

`verify_latent_chain` keeps the reference kernel, so every sampled property passes.
"""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import speculative


def apply_latent_chain(*inputs):
    *arguments, uniforms = inputs
    shared = mx.broadcast_to(uniforms[:, 1, :1], uniforms[:, 1].shape)
    reused = mx.concatenate([uniforms[:, :1], shared[:, None]], axis=1)
    return speculative.apply_latent_chain(*arguments, reused)
