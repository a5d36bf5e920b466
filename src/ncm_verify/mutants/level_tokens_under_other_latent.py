"""Planted bug: the draft samples a level's tokens under the next code, yet reports its own latent."""

from ncm_verify.mutants import with_level_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_level_step(token_latent=lambda latent, codes: (latent + 1) % codes))
