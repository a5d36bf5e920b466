"""Planted bug: the target's token rows are read for the drafted latent only, so a corrected
latent's tokens are drawn from the rows of the latent it replaced."""

import mlx.core as mx

from ncm_verify.mutants import with_level_step
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.speculative import select_code


def drafted_latent_rows(token_probs, draft_latent):
    return mx.broadcast_to(select_code(token_probs, draft_latent)[:, None], token_probs.shape)


globals().update(with_level_step(target_token_rows=drafted_latent_rows))
