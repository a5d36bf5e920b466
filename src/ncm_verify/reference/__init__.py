"""The reference implementation under test: the suite's own kernels and model."""

from ncm_verify.reference.ncm import (  # noqa: F401
    KVCache,
    NCMConfig,
    PrefixCache,
    RotatingKVCache,
    apply_model,
    apply_prefill,
    can_trim_prompt_cache,
    fingerprint,
    generate_cached,
    generate_uncached,
    layer_states,
    load_model,
    make_model,
    make_prompt_cache,
    rewind_caches,
    save_model,
    speculative_generate,
    trim_prompt_cache,
)
from ncm_verify.reference.ncm.level_draft import generate_level_speculative, verify_drafted_levels  # noqa: F401
from ncm_verify.reference.speculative import (  # noqa: F401
    apply_chain,
    apply_factorized,
    apply_latent_chain,
    draw_uniforms,
    residual_distribution,
    verify_chain,
    verify_factorized,
    verify_greedy,
    verify_latent_chain,
)
