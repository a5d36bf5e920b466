"""The reference Next-Concept Model in MLX, its masks, generation paths and prefix cache."""

from ncm_verify.reference.ncm.cache import (
    CacheFileError,
    CacheKey,
    CacheRefusedError,
    PrefixCache,
    require_reusable,
)
from ncm_verify.reference.ncm.config import NCMConfig, load_config
from ncm_verify.reference.ncm.decode import rewind_caches, speculative_generate
from ncm_verify.reference.ncm.generate import Generation, generate_cached, generate_uncached
from ncm_verify.reference.ncm.kv_cache import (
    KVCache,
    RotatingKVCache,
    apply_model,
    apply_prefill,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from ncm_verify.reference.ncm.masks import (
    ISOLATED_MASK_NAMES,
    MASKS,
    is_partial_prefix_isolated,
    is_prefix_isolated,
    make_mask,
)
from ncm_verify.reference.ncm.model import NCM, fingerprint, layer_states, load_model, make_model, save_model

__all__ = [
    "CacheFileError",
    "CacheKey",
    "CacheRefusedError",
    "PrefixCache",
    "require_reusable",
    "NCMConfig",
    "load_config",
    "rewind_caches",
    "speculative_generate",
    "Generation",
    "generate_cached",
    "generate_uncached",
    "KVCache",
    "RotatingKVCache",
    "apply_model",
    "apply_prefill",
    "can_trim_prompt_cache",
    "make_prompt_cache",
    "trim_prompt_cache",
    "ISOLATED_MASK_NAMES",
    "MASKS",
    "is_partial_prefix_isolated",
    "is_prefix_isolated",
    "make_mask",
    "NCM",
    "fingerprint",
    "layer_states",
    "load_model",
    "make_model",
    "save_model",
]
