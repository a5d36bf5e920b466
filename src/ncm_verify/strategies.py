"""Every Hypothesis strategy of the suite. Strategies are plural nouns."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

seeds = st.integers(min_value=0, max_value=2**32 - 1)
"""Sampler seeds: drawn by Hypothesis so that every failure reproduces from its example."""


# --- NCM configs and sequences (prefix caching, claims C1-C4) ---

@st.composite
def ncm_configs(draw, config_type, *, masks=("ncm", "prefix_lm", "causal"), dtypes=("float32",),
                min_prefix_length=1):
    """Tiny NCM configs (d_model <= 32, layers <= 2) built with `config_type(**fields)`."""
    d_model = draw(st.sampled_from([8, 16, 32]), label="d_model")
    levels = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="level_sizes")
    return config_type(
        vocab_size=draw(st.integers(2, 6), label="vocab_size"),
        prefix_length=draw(st.integers(min_prefix_length, 6), label="prefix_length"),
        level_sizes=tuple(levels),
        codebook_size=draw(st.integers(1, 4), label="codebook_size"),
        d_model=d_model,
        num_heads=draw(st.sampled_from([h for h in (1, 2, 4) if d_model % h == 0]), label="num_heads"),
        num_layers=draw(st.integers(1, 2), label="num_layers"),
        mask=draw(st.sampled_from(masks), label="mask"),
        dtype=draw(st.sampled_from(dtypes), label="dtype"),
        seed=draw(st.integers(0, 2**16), label="model_seed"),
    )


def prefixes(config, length=None):
    """Prefix token ids for `config` (lists of `length`, default its prefix length)."""
    size = config.prefix_length if length is None else length
    return st.lists(st.integers(0, config.vocab_size - 1), min_size=size, max_size=size)


def level_fillings(config):
    """Contents of every generated slot: tokens or the placeholder (id `vocab_size`)."""
    size = sum(config.level_sizes)
    return st.lists(st.integers(0, config.vocab_size), min_size=size, max_size=size)
