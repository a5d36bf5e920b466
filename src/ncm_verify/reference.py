"""The reference implementation under test: the suite's own kernels and model."""

from ncm_verify.speculative import (  # noqa: F401
    residual_distribution,
    verify_chain,
    verify_factorized,
    verify_greedy,
    verify_latent_chain,
)
