"""C2: cached generation equals uncached generation for the same key, cold and warm."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_equal, assert_generations_equal
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm.config import DTYPES, fixture_fields


def assert_cached_equals_uncached(api, config, batch: list, seed: int, call: str) -> None:
    """Uncached, then cached on a cold and a warm cache: equal results, and the warm one hit."""
    model, prefix, key = api.make_model(config), mx.array(batch, dtype=mx.int32), mx.random.key(seed)
    dtype, distinct = DTYPES[config.dtype], len({tuple(row) for row in batch})
    uncached = api.generate_uncached(model, prefix, key)
    cache = api.PrefixCache()
    cold = api.generate_cached(model, prefix, key, cache)
    assert_generations_equal(cold, uncached, dtype=dtype, label="cold cache vs uncached", call=call)
    assert_equal(len(cache), distinct, label="entries after a cold request", call=call)
    warm = api.generate_cached(model, prefix, key, cache)
    assert_equal(cache.hits, len(batch), label="warm cache hits", call=call)
    assert_equal(warm.cache_hits, len(batch), label="rows served from the cache", call=call)
    assert_generations_equal(warm, uncached, dtype=dtype, label="warm cache vs uncached", call=call)


@pytest.mark.claim("C15")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_cached_generation_equals_uncached_generation(impl, dtype, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    batch = data.draw(st.lists(strategies.prefixes(config), min_size=1, max_size=3), label="prefixes")
    seed = data.draw(strategies.seeds, label="sampler_seed")
    call = f"generate_*(make_model({config}), prefix={batch}, key=mx.random.key({seed}))"
    note(call)
    assert_cached_equals_uncached(api, config, batch, seed, call)


@pytest.mark.claim("C15")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cached_generation_equals_uncached_generation_on_the_sudoku_shaped_config(impl, dtype):
    api = ncm_api(impl)
    config = api.NCMConfig(**{**fixture_fields("ncm_sudoku"), "dtype": dtype})
    puzzles = [[(5 * row + 3 * column + shift) % 10 for row in range(9) for column in range(9)] for shift in (0, 4)]
    assert_cached_equals_uncached(api, config, puzzles, 11, call=f"generate_*(sudoku {dtype}, two puzzles, key(11))")
