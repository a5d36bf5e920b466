"""Batch invariance: a cache entry built at one batch size serves another with identical results."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify import strategies
from ncm_verify.checks import assert_equal
from ncm_verify.impl import ncm_api


def batch_with(data, config, prefix, label: str) -> tuple[list, int]:
    """Other drawn prefixes with `prefix` inserted at a drawn row; returns rows and its index."""
    others = data.draw(st.lists(strategies.prefixes(config), max_size=3), label=f"{label}_other_prefixes")
    row = data.draw(st.integers(0, len(others)), label=f"{label}_row")
    return others[:row] + [prefix] + others[row:], row


def row_keys(seeds: list[int]) -> mx.array:
    return mx.stack([mx.random.key(seed) for seed in seeds])


@pytest.mark.claim("C2")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_a_cache_entry_built_at_one_batch_size_serves_another_with_identical_results(impl, dtype, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    seed = data.draw(strategies.seeds, label="prefix_row_seed")
    first, first_row = batch_with(data, config, prefix, "building")
    second, second_row = batch_with(data, config, prefix, "serving")
    call = (f"make_model({config}); generate_cached({first}) then generate_cached({second}); "
            f"prefix row keyed mx.random.key({seed}), other rows key(row index)")
    note(call)
    model, cache = api.make_model(config), api.PrefixCache()
    first_keys = row_keys([seed if i == first_row else i for i in range(len(first))])
    second_keys = row_keys([seed if i == second_row else i for i in range(len(second))])
    built = api.generate_cached(model, mx.array(first, dtype=mx.int32), first_keys, cache)
    hits_before = cache.hits
    served = api.generate_cached(model, mx.array(second, dtype=mx.int32), second_keys, cache)
    assert cache.hits > hits_before and served.cache_hits >= 1, f"the prefix row was not served\n  call: {call}"
    pairs = [("latents", built.latents[first_row], served.latents[second_row])]
    for level in range(len(config.level_sizes)):
        pairs += [("tokens", built.tokens[level][first_row], served.tokens[level][second_row]),
                  ("latent logits", built.latent_logits[level][first_row], served.latent_logits[level][second_row]),
                  ("token logits", built.token_logits[level][first_row], served.token_logits[level][second_row])]
    for label, a, b in pairs:
        assert_equal(b, a, label=f"served at another batch size: {label}",
                     call=f"{call}; batch {len(second)} vs {len(first)}")
