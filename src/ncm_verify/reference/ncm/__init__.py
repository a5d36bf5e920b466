"""The reference Next-Concept Model in MLX.

The source's NCM (codec, block-diagonal generator, PC-1 cache) lives in the ``concept*``,
``codec`` and ``generator`` modules and judges C1-C4. The older toy (one latent per level, tokens at
every level, no codec: ``config``, ``model``, ``generate``, ``masks``, ``level_draft``) stays only
for level drafting (C6's level part, C12) and the mlx-lm-style decoding properties.
"""

from ncm_verify.reference.ncm.cache import (
    CacheFileError,
    CacheKey,
    CacheRefusedError,
    PrefixCache,
    require_reusable,
)
from ncm_verify.reference.ncm.codec import codec_decode, codec_encode, codec_reconstruction
from ncm_verify.reference.ncm.concept import (
    concept_configs,
    concept_kv_bytes,
    concept_layout,
    concept_mask_of,
    concept_position_counts,
    concept_schedule,
    make_concept_cache,
    reset_concept_counts,
)
from ncm_verify.reference.ncm.concept_config import CACHE_MODES, ConceptConfig, ConceptLayout
from ncm_verify.reference.ncm.concept_generate import (
    ConceptGeneration,
    concept_cache_keys,
    generate_cached_concepts,
    generate_cached_levels,
    generate_uncached_concepts,
    row_keys,
    sample_codes,
    sampling_law,
)
from ncm_verify.reference.ncm.concept_model import (
    ConceptModel,
    codec_fingerprint,
    concept_fingerprint,
    generator_fingerprint,
    load_concept_model,
    make_concept_model,
    save_concept_model,
)
from ncm_verify.reference.ncm.config import NCMConfig, load_config
from ncm_verify.reference.ncm.decode import rewind_caches, speculative_generate
from ncm_verify.reference.ncm.generate import Generation, generate_cached, generate_uncached
from ncm_verify.reference.ncm.generator import level_logits, prefix_kv, training_logits
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
    "codec_decode",
    "codec_encode",
    "codec_reconstruction",
    "concept_configs",
    "concept_kv_bytes",
    "concept_layout",
    "concept_mask_of",
    "concept_position_counts",
    "concept_schedule",
    "reset_concept_counts",
    "CACHE_MODES",
    "ConceptConfig",
    "ConceptLayout",
    "ConceptGeneration",
    "concept_cache_keys",
    "generate_cached_concepts",
    "generate_cached_levels",
    "generate_uncached_concepts",
    "row_keys",
    "sample_codes",
    "sampling_law",
    "ConceptModel",
    "codec_fingerprint",
    "concept_fingerprint",
    "generator_fingerprint",
    "load_concept_model",
    "make_concept_model",
    "save_concept_model",
    "level_logits",
    "prefix_kv",
    "training_logits",
    "make_concept_cache",
]
