"""Planted bug: after a changed latent, the old drafts are verified as if drafted under the new one."""

from ncm_verify.mutants import make_implementation
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels import chain
from ncm_verify.reference.speculative import select_code


def apply_latent_chain_mismatched(
    target_latent_probs,
    draft_latent_probs,
    draft_latent,
    target_token_probs,
    draft_token_probs,
    draft_tokens,
    uniforms,
    *,
    rules,
):
    latent_step = chain.apply_factorized(
        target_latent_probs[:, None],
        draft_latent_probs[:, None],
        draft_latent[:, None],
        uniforms[:, :, :1],
        rules=rules,
    )
    latent = latent_step.tokens[:, 0]
    # The bug: q rows of the emitted latent, though the tokens were drawn under draft_latent.
    token_step = chain.apply_factorized(
        select_code(target_token_probs, latent),
        select_code(draft_token_probs, latent),
        draft_tokens,
        uniforms[:, :, 1:],
        rules=rules,
    )
    return chain.LatentChainOutcome(latent, latent_step.accepted[:, 0], token_step.tokens, token_step.accepted)


globals().update(make_implementation(apply_latent_chain=apply_latent_chain_mismatched))
