"""Planted bug: verify_chain is handed the drafter's latent marginal sum_z q(z) q(. | z), not q(. | z)."""

import mlx.core as mx

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403


def _marginal_rows(drafter, block, context, temperature, features):
    if not hasattr(drafter, "marginal_probs"):  # a drafter without codes has no other marginal
        return block.probs
    k = block.tokens.shape[1]
    return drafter.marginal_probs(mx.array([context], dtype=mx.int32), k, temperature=temperature, features=features)


globals().update(with_drafting_step(draft_rows=_marginal_rows))
