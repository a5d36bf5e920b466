"""The reference NCM's face to the model protocol (`ncm_verify.protocol.ConceptModels`): what the
model-level properties call, for drawn instances and for a fixed checkpoint alike.

Public API: `concept_configs()` (a Hypothesis strategy of tiny configs, every reading drawn), `make_concept_cache`,
`concept_layout`, `concept_mask_of`, `concept_schedule`, `concept_kv_bytes`,
`concept_position_counts`, `reset_concept_counts`.
"""

from __future__ import annotations

import numpy as np

from ncm_verify.reference.ncm.cache import PrefixCache
from ncm_verify.reference.ncm.concept_config import (
    INPUT_READINGS,
    MASK_READINGS,
    ConceptConfig,
    ConceptLayout,
    cache_schedule,
    concept_mask,
    kv_bytes_per_position,
)
from ncm_verify.reference.ncm.concept_model import ConceptModel

__all__ = [
    "concept_configs",
    "make_concept_cache",
    "concept_layout",
    "concept_mask_of",
    "concept_schedule",
    "concept_kv_bytes",
    "concept_position_counts",
    "reset_concept_counts",
]

_LEVELS = {4: ((1, 2, 4), (1, 4), (2, 4)), 8: ((1, 2, 4, 8), (1, 2, 8), (2, 4, 8), (1, 8))}


def concept_configs(dtypes=("float32",)):
    """A Hypothesis strategy of tiny configs over both mask readings and both input readings, dropout and tied codes.

    The protocol's config strategy; Hypothesis is imported here, as the model itself needs none of it.
    """
    from hypothesis import strategies as st

    @st.composite
    def configs(draw) -> ConceptConfig:
        length = draw(st.sampled_from(sorted(_LEVELS)))
        levels = draw(st.sampled_from(_LEVELS[length]))
        heads = draw(st.sampled_from((1, 2)))
        return ConceptConfig(
            vocab_size=draw(st.integers(3, 24)),
            sequence_length=length,
            level_lengths=levels,
            codebook_sizes=tuple(draw(st.integers(2, 12)) for _ in levels),
            prefix_length=draw(st.integers(1, 6)),
            codec_dim=draw(st.sampled_from((8, 16))),
            d_model=draw(st.sampled_from((16, 32))),
            num_heads=heads,
            num_layers=draw(st.integers(1, 2)),
            mask=draw(st.sampled_from(MASK_READINGS)),
            level_input=draw(st.sampled_from(INPUT_READINGS)),
            dropout=draw(st.sampled_from((0.0, 0.1))),
            tied_codes=draw(st.booleans()),
            seed=draw(st.integers(0, 2**16)),
            codec_seed=draw(st.integers(0, 2**16)),
            dtype=draw(st.sampled_from(dtypes)),
        )

    return configs()


def make_concept_cache(max_bytes: int = 64 * 2**20) -> PrefixCache:
    """An empty cross-request prefix cache (exact full keys, byte-bounded LRU, checksummed files)."""
    return PrefixCache(max_bytes)


def concept_layout(model: ConceptModel) -> ConceptLayout:
    return model.layout


def concept_mask_of(model: ConceptModel, prefix_length: int) -> np.ndarray:
    """The generator's mask over ``prefix_length + sum(level_lengths)`` rows, as the model applies it."""
    config = model.config
    return concept_mask(config.mask, prefix_length, config.level_lengths, leak_next=model._seams.mask_leaks_next)


def concept_schedule(model: ConceptModel, prefix_length: int, mode: str) -> tuple[int, ...]:
    """Positions per layer and batch row, forward by forward, the model declares for `mode`."""
    return cache_schedule(model.config, prefix_length, mode)


def concept_kv_bytes(model: ConceptModel) -> int:
    """Bytes of K/V (all layers) one cached prefix position holds."""
    return kv_bytes_per_position(model.config)


def concept_position_counts(model: ConceptModel) -> list[int]:
    return model.position_counts()


def reset_concept_counts(model: ConceptModel) -> None:
    model.reset_counts()
