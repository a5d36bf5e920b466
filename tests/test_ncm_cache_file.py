"""Exhaustive self-tests of the cache file format: every truncation and every
single-bit flip of a small file is rejected; keys never alias; the byte total
stays exact across replacement and eviction."""

from __future__ import annotations

import mlx.core as mx
import pytest

from ncm_verify.reference.ncm import CacheKey, NCMConfig, PrefixCache, generate_cached, make_model
from ncm_verify.reference.ncm.cache import entry_nbytes
from ncm_verify.reference.ncm.config import fixture_fields


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    config = NCMConfig(**{**fixture_fields("ncm_tiny"), "num_layers": 1, "d_model": 8, "dtype": "float16"})
    cache = PrefixCache()
    generate_cached(make_model(config), mx.array([[0, 1, 2, 3]]), mx.random.key(0), cache)
    path = tmp_path_factory.mktemp("cache") / "cache.safetensors"
    cache.save(path)
    return path, path.read_bytes()


def test_a_saved_file_loads_back(saved):
    path, _ = saved
    assert PrefixCache().load(path) == 1


def test_every_truncation_is_rejected(saved, tmp_path):
    _, blob = saved
    target = tmp_path / "truncated.safetensors"
    for length in range(len(blob)):
        target.write_bytes(blob[:length])
        with pytest.raises(ValueError, match="path"):
            PrefixCache().load(target)


@pytest.mark.parametrize("bit", [0, 3, 7])
def test_every_single_bit_flip_is_rejected(saved, tmp_path, bit):
    _, blob = saved
    target = tmp_path / "flipped.safetensors"
    for offset in range(len(blob)):
        target.write_bytes(blob[:offset] + bytes([blob[offset] ^ (1 << bit)]) + blob[offset + 1 :])
        with pytest.raises(ValueError, match="path"):
            PrefixCache().load(target)


def test_writes_leave_no_temporary_file(saved):
    path, _ = saved
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "first, second",
    [
        (CacheKey((1, 23), "f", "ncm", "float32"), CacheKey((12, 3), "f", "ncm", "float32")),
        (CacheKey((1,), "ab", "c", "float32"), CacheKey((1,), "a", "bc", "float32")),
        (CacheKey((1,), "f", "ncm", "float32", "t1"), CacheKey((1,), "f", "ncm", "float32t", "1")),
        (CacheKey((), "f", "ncm", "float32"), CacheKey((0,), "f", "ncm", "float32")),
        (CacheKey((65541,), "f", "ncm", "float32"), CacheKey((5,), "f", "ncm", "float32")),
        (CacheKey((2**20 - 1,), "f", "ncm", "float32"), CacheKey((2**16 - 1,), "f", "ncm", "float32")),
    ],
)
def test_distinct_keys_never_share_an_encoding(first, second):
    assert first.encode() != second.encode()


def test_a_negative_byte_budget_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)


def test_the_running_byte_total_counts_a_replaced_entry_once_and_drops_evicted_ones(saved):
    path, _ = saved
    cache = PrefixCache()
    cache.load(path)
    (key, entry), one = next(iter(cache._entries.values())), cache.nbytes
    assert one == entry_nbytes(entry) > 0
    cache.load(path)  # the same key again: replaced, not double counted
    cache.store(key, entry)
    assert (len(cache), cache.nbytes) == (1, one)
    small = PrefixCache(max_bytes=2 * one)
    for token in range(5):
        small.store(CacheKey((token,), "f", "ncm", "float16"), entry)
        assert small.nbytes == sum(entry_nbytes(e) for _, e in small._entries.values()) <= small.max_bytes
    assert (len(small), small.evictions, small.nbytes) == (2, 3, 2 * one)


@pytest.mark.parametrize("refresh", ["lookup", "store"])
def test_a_hit_or_a_store_under_a_held_key_makes_it_the_most_recently_used(refresh):
    entry = ((mx.zeros((1, 1, 2)), mx.zeros((1, 1, 2))),)
    first, second, third = (CacheKey((token,), "f", "ncm", "float32") for token in (1, 2, 3))
    cache = PrefixCache(max_bytes=2 * entry_nbytes(entry))
    cache.store(first, entry)
    cache.store(second, entry)
    if refresh == "lookup":
        cache.lookup(first)
    else:
        cache.store(first, entry)
    cache.store(third, entry)  # over budget: the least recently used, `second`, goes
    assert [cache.lookup(key) is not None for key in (first, second, third)] == [True, False, True]
    assert (cache.evictions, cache.nbytes) == (1, 2 * entry_nbytes(entry))
