"""The reference Next-Concept Model in MLX, its masks, generation paths and prefix cache."""

from ncm_verify.reference.ncm.cache import (  # noqa: F401
    CacheFileError,
    CacheKey,
    CacheRefusedError,
    PrefixCache,
    require_reusable,
)
from ncm_verify.reference.ncm.config import NCMConfig, load_config  # noqa: F401
from ncm_verify.reference.ncm.decode import rewind_caches, speculative_generate  # noqa: F401
from ncm_verify.reference.ncm.generate import Generation, generate_cached, generate_uncached  # noqa: F401
from ncm_verify.reference.ncm.kv_cache import (  # noqa: F401
    KVCache,
    RotatingKVCache,
    apply_model,
    apply_prefill,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from ncm_verify.reference.ncm.masks import (  # noqa: F401
    ISOLATED_MASK_NAMES,
    MASKS,
    is_partial_prefix_isolated,
    is_prefix_isolated,
    make_mask,
)
from ncm_verify.reference.ncm.model import NCM, fingerprint, layer_states, load_model, make_model, save_model  # noqa: F401
