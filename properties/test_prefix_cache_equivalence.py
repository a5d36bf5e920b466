"""C2: cached generation equals uncached generation for the same key, cold and warm."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify import strategies
from ncm_verify.checks import assert_equal, assert_generations_equal
from ncm_verify.impl import ncm_api
from ncm_verify.ncm.config import DTYPES


@pytest.mark.claim("C2")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_cached_generation_equals_uncached_generation(impl, dtype, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    batch = data.draw(st.lists(strategies.prefixes(config), min_size=1, max_size=3, unique_by=tuple), label="prefixes")
    seed = data.draw(strategies.seeds, label="sampler_seed")
    model, prefix, key = api.make_model(config), mx.array(batch, dtype=mx.int32), mx.random.key(seed)
    call = f"generate_*(make_model({config}), prefix={batch}, key=mx.random.key({seed}))"
    note(call)
    uncached = api.generate_uncached(model, prefix, key)
    cache = api.PrefixCache()
    cold = api.generate_cached(model, prefix, key, cache)
    assert_generations_equal(cold, uncached, dtype=DTYPES[dtype], label="cold cache vs uncached", call=call)
    assert_equal(cache.misses, len(batch), label="cold cache misses", call=call)
    warm = api.generate_cached(model, prefix, key, cache)
    assert_equal(cache.hits, len(batch), label="warm cache hits", call=call)
    assert_equal(warm.cache_hits, len(batch), label="rows served from the cache", call=call)
    assert_generations_equal(warm, uncached, dtype=DTYPES[dtype], label="warm cache vs uncached", call=call)
