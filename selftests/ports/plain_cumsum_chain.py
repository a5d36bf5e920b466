"""A correct partial port: its own chain kernels draw the correction by one plain float32 cumulative sum.

It provides the kernels that read the chain's rules (``apply_chain``, ``apply_factorized``,
``apply_latent_chain``, ``verify_chain``, ``verify_factorized``, ``verify_latent_chain``, ``draw_uniforms``);
every other name (``residual_distribution``, ``verify_greedy``, the tree and block kernels, the models and
caches) is the reference's, inherited. Exact to float32 (`tolerances.CDF_BOUNDARY_TERMS` covers any summation
order), it rounds differently from the reference's two-level sampler near a boundary. The suite must judge
it correct on what it provides: ``make verify IMPL=selftests/ports/plain_cumsum_chain.py`` passes, its chain
claims read "partly provided" (their properties on its own kernels passed, the rest reached inherited names),
and a relation between its chain and the inherited tree may differ from bit-for-bit equality only within the
boundary rule.
"""

import mlx.core as mx

from ncm_verify.mutants import with_rule
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import RESIDUAL_FLOOR, SMALLEST_NORMAL


def sample_with_float32_cumsum(p, q, u):
    p = p.astype(mx.float32)
    residual = mx.maximum(p - q.astype(mx.float32), 0.0)
    weights = mx.where(residual.sum(axis=-1, keepdims=True) > RESIDUAL_FLOOR, residual, p)
    cdf = mx.cumsum(weights, axis=-1)
    # Floored at the smallest normal float32, as u * total may underflow to 0 and pick an id of weight 0.
    threshold = mx.maximum(u[..., None] * cdf[..., -1:], SMALLEST_NORMAL)
    return mx.minimum((cdf < threshold).sum(axis=-1), p.shape[-1] - 1).astype(mx.int32)


globals().update(with_rule(correct=sample_with_float32_cumsum))
