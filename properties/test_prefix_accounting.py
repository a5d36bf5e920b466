"""C4: analytic cache payload bytes and avoided positions, from the config alone,
equal the instrumented counts and the bytes the cache actually holds."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_equal
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm import accounting
from ncm_verify.reference.ncm.config import fixture_fields


def assert_counts_match(api, config, batch, call: str) -> dict:
    """Cold then warm cached generation and one uncached: every count against the analytic one."""
    model, cache, key = api.make_model(config), api.PrefixCache(), mx.random.key(0)
    prefix, layers, size = mx.array(batch, dtype=mx.int32), config.num_layers, len(batch)
    distinct = len({tuple(row) for row in batch})
    uncached = api.generate_uncached(model, prefix, key)
    assert_equal(
        uncached.positions,
        [accounting.uncached_positions(config, size)] * layers,
        label="uncached positions per layer",
        call=call,
    )
    cold = api.generate_cached(model, prefix, key, cache)
    assert_equal(
        cold.positions,
        [accounting.cached_positions(config, size)] * layers,
        label="cold cached positions per layer",
        call=call,
    )
    assert_equal(cache.nbytes, distinct * accounting.payload_bytes(config), label="bytes held", call=call)
    warm = api.generate_cached(model, prefix, key, cache)
    assert_equal(warm.cache_hits, size, label="rows served from the cache", call=call)
    assert_equal(cache.hits, size, label="cache hits", call=call)
    assert_equal(
        warm.positions,
        [accounting.cached_positions(config, size, prefix_hits=size)] * layers,
        label="warm cached positions per layer",
        call=call,
    )
    avoided = [u - w for u, w in zip(uncached.positions, warm.positions)]
    assert_equal(
        avoided,
        [accounting.avoided_positions(config, size, prefix_hits=size)] * layers,
        label="avoided positions per layer",
        call=call,
    )
    return {"uncached": uncached.positions, "cold": cold.positions, "warm": warm.positions, "bytes": cache.nbytes}


@pytest.mark.claim("C15")
@given(data=st.data())
def test_analytic_payload_and_position_counts_equal_the_instrumented_ones(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=("float32", "float16")), label="config")
    batch = data.draw(st.lists(strategies.prefixes(config), min_size=1, max_size=3), label="prefixes")
    call = f"generate_*(make_model({config}), prefix={batch})"
    note(call)
    assert_counts_match(api, config, batch, call)


@pytest.mark.claim("C15")
def test_sudoku_shaped_config_counts_equal_the_instrumented_ones(impl):
    api = ncm_api(impl)
    config = api.NCMConfig(**fixture_fields("ncm_sudoku"))
    puzzle = [(5 * row + 3 * column) % 10 for row in range(9) for column in range(9)]
    print(
        f"sudoku analytic: payload {accounting.payload_bytes(config)} bytes per prefix; per layer "
        f"uncached {accounting.uncached_positions(config)}, cached cold {accounting.cached_positions(config)}, "
        f"warm {accounting.cached_positions(config, prefix_hits=1)} positions"
    )
    measured = assert_counts_match(api, config, [puzzle], call=f"generate_*(sudoku config, puzzle={puzzle})")
    print(f"sudoku instrumented: {measured}")


@pytest.mark.claim("C15")
@given(data=st.data())
def test_the_cache_evicts_least_recently_used_entries_to_stay_within_its_byte_budget(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, min_prefix_length=2), label="config")
    # every config holds at least vocab 2 ** length 2 = 4 distinct prefixes: capacity + 1 of them always exist
    capacity = data.draw(st.integers(1, 3), label="capacity_in_entries")
    rows = data.draw(strategies.distinct_prefixes(config, capacity + 1, capacity + 3), label="prefixes")
    call = f"PrefixCache(max_bytes={capacity} entries) fed {rows} under make_model({config})"
    note(call)
    model = api.make_model(config)
    cache = api.PrefixCache(max_bytes=capacity * accounting.payload_bytes(config))
    for row in rows:
        api.generate_cached(model, mx.array([row], dtype=mx.int32), mx.random.key(0), cache)
    assert_equal(cache.evictions, len(rows) - capacity, label="evictions", call=call)
    assert_equal(cache.nbytes, capacity * accounting.payload_bytes(config), label="bytes held", call=call)
    for row, key in zip(rows, cache.keys_for(model, rows)):
        expected_hit = row in rows[-capacity:]
        assert (cache.lookup(key) is not None) == expected_hit, (
            f"prefix {row}: {'missed' if expected_hit else 'served'} after LRU eviction\n  call: {call}"
        )
