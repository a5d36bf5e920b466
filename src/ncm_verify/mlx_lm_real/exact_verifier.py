"""The exact verifier as a decoder module (`decoders.DECODERS`): the reference's speculative loop over mlx-lm
models (`ncm_verify.reference.drafting.speculative_step`), named as the mlx-lm properties judge it.

Its functions live in the reference, so that the module under test can provide the loop (claim C18); planted
bugs that swap a name swap it there.
"""

from __future__ import annotations

from ncm_verify.reference.drafting.rollback import roll_back, snapshot_caches
from ncm_verify.reference.drafting.speculative_step import (
    ACCEPTANCE_RULE,
    NAME,
    DistributionSampler,
    generate_step,
    make_prompt_cache,
    make_sampler,
    speculative_generate_step,
    trim_prompt_cache,
)

__all__ = [
    "ACCEPTANCE_RULE",
    "NAME",
    "DistributionSampler",
    "generate_step",
    "make_prompt_cache",
    "make_sampler",
    "roll_back",
    "snapshot_caches",
    "speculative_generate_step",
    "trim_prompt_cache",
]
