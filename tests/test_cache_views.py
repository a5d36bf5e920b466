"""The attended view of each mlx-lm cache class, its comparison with caches rebuilt from tokens, and rollback."""

from __future__ import annotations

import copy
import itertools

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, QuantizedKVCache, RotatingKVCache, make_prompt_cache

from ncm_verify.mlx_lm_real import exact_verifier, rollback
from ncm_verify.mlx_lm_real.cache_views import (
    assert_caches_equal_rebuilt,
    attended_view,
    cache_differences,
    rebuilt_caches,
    ring_positions,
)
from ncm_verify.mlx_lm_real.hybrid_models import HybridSpec, make_hybrid_model


def entries(start: int, count: int, batch: int = 1):
    """K/V rows whose first feature is their position (values: position + 1000)."""
    keys = mx.broadcast_to(
        mx.arange(start, start + count, dtype=mx.float32).reshape(1, 1, count, 1), (batch, 1, count, 1)
    )
    return keys, keys + 1000


UPDATE_PLANS = [[1] * 9, [5, 1, 1, 1, 1], [2, 3, 1, 4], [7], [1, 1, 6, 1], [3, 3, 3]]


RINGS = [(m, k, s) for m, k, s in itertools.product([1, 2, 4, 5], [0, 1, 3], UPDATE_PLANS) if k < m]
"""(window, keep prefix, update sizes): a keep prefix shorter than the window."""


@pytest.mark.parametrize(("max_size", "keep", "sizes"), RINGS)
def test_a_ring_reads_as_its_keep_prefix_and_newest_entries_in_temporal_order(max_size, keep, sizes):
    cache, offset = RotatingKVCache(max_size, keep), 0
    for size in sizes:
        cache.update_and_fetch(*entries(offset, size))
        offset += size
        view = attended_view(cache)
        assert view.fields["keys"][0, 0, :, 0].tolist() == ring_positions(offset, keep, max_size), (
            f"RotatingKVCache({max_size}, keep={keep}) after updates {sizes}: attended keys"
        )
        # the reading agrees with what mlx-lm's own one-token update hands the model
        probe = copy.deepcopy(cache)
        attended, _ = probe.update_and_fetch(*entries(offset, 1))
        assert sorted(view.fields["keys"].ravel().tolist()) == sorted(
            x for x in np.array(attended).ravel().tolist() if x != offset
        )
        assert int(view.fields["offset"]) == offset


def test_a_wrapped_ring_trimmed_by_count_reads_the_rejected_entries_it_kept():
    # mlx-lm #1423/#1512: trim moves offset and the write index back, the overwritten slots stay stale
    cache = RotatingKVCache(3)
    cache.update_and_fetch(*entries(0, 4))
    for position in range(4, 7):
        cache.update_and_fetch(*entries(position, 1))
    cache.trim(2)
    rebuilt = RotatingKVCache(3)
    rebuilt.update_and_fetch(*entries(0, 5))
    found = cache_differences([cache], [rebuilt])
    assert [d.field for d in found] == ["keys", "values"], found


def test_a_ring_whose_write_index_lies_past_its_buffer_reads_as_mlx_lm_attends_and_differs_from_a_sound_ring():
    # a ring restored without its write index: MLX drops the write at an index past the buffer, the step reads it all
    cache = RotatingKVCache(3)
    for position in range(5):
        cache.update_and_fetch(*entries(position, 1))
    sound = copy.deepcopy(cache)
    cache._idx = 5
    attended, _ = copy.deepcopy(cache).update_and_fetch(*entries(5, 1))
    assert sorted(attended_view(cache).fields["keys"].ravel().tolist()) == sorted(np.array(attended).ravel().tolist())
    assert [d.field for d in cache_differences([cache], [sound])] == ["keys", "values"]


def test_a_ring_that_lost_its_keep_prefix_differs_from_a_fresh_ring_in_keep_and_keys():
    cache = RotatingKVCache(4, keep=2)
    cache.update_and_fetch(*entries(0, 7))
    lost = RotatingKVCache(4, keep=0)
    lost.update_and_fetch(*entries(0, 7))
    assert {d.field for d in cache_differences([lost], [cache])} == {"keep", "keys", "values"}


def test_a_kv_cache_reads_the_entries_before_its_offset_whatever_its_buffer_holds_after():
    cache = KVCache()
    cache.update_and_fetch(*entries(0, 5))
    cache.trim(2)
    rebuilt = KVCache()
    rebuilt.update_and_fetch(*entries(0, 3))
    assert cache_differences([cache], [rebuilt]) == []
    assert attended_view(cache).fields["keys"].shape == (1, 1, 3, 1)


def test_a_quantized_cache_reads_dequantized_entries_before_its_offset():
    cache, rebuilt = QuantizedKVCache(group_size=32, bits=8), QuantizedKVCache(group_size=32, bits=8)
    rows = mx.random.normal((1, 1, 5, 32), key=mx.random.key(0))
    cache.update_and_fetch(rows, rows)
    cache.trim(2)
    rebuilt.update_and_fetch(rows[:, :, :3], rows[:, :, :3])
    assert cache_differences([cache], [rebuilt]) == []
    assert np.abs(attended_view(cache).fields["keys"] - np.array(rows[:, :, :3])).max() < 0.05


def test_arrays_and_cache_lists_label_convolution_and_recurrent_state_and_the_differing_rows():
    def filled(conv, recurrent):
        cache = ArraysCache(2)
        cache[0], cache[1] = mx.array(conv, dtype=mx.float32), mx.array(recurrent, dtype=mx.float32)
        return cache

    got, want = filled([[1.0], [2.0]], [[3.0], [4.0]]), filled([[1.0], [2.5]], [[3.0], [4.0]])
    found = cache_differences([got], [want])
    assert [(d.layer, d.field) for d in found] == [(0, "conv state")] and "batch rows [1]" in found[0].detail
    listed = cache_differences([CacheList(got, KVCache())], [CacheList(want, KVCache())])
    assert [d.field for d in listed] == ["0:ArraysCache.conv state"]


def test_a_cache_of_another_class_or_an_unknown_class_is_a_difference_or_a_value_error():
    assert [d.field for d in cache_differences([KVCache()], [RotatingKVCache(4)])] == ["class"]
    with pytest.raises(ValueError, match="^cache: no attended view for object"):
        attended_view(object())


HYBRIDS = [
    HybridSpec("qwen3_next", "RA"),
    HybridSpec("lfm2", "RAR"),
    HybridSpec("mamba2", "RR"),
    HybridSpec("falcon_h1", "HH"),
    HybridSpec("gemma4_text", "SAS", window=3),
    HybridSpec("llama", "SA", window=2),
]


@pytest.mark.parametrize("spec", HYBRIDS, ids=lambda s: f"{s.kind}-{s.layers}")
def test_a_hybrid_cache_fed_in_chunks_equals_the_one_rebuilt_in_one_pass_and_differs_after_another_token(spec):
    model = make_hybrid_model(spec)
    tokens = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 7, 1, 8, 2, 8, 1, 8, 2, 8]]
    cache = make_prompt_cache(model)
    model(mx.array([row[:4] for row in tokens]), cache=cache)
    for position in range(4, 10):
        model(mx.array([row[position : position + 1] for row in tokens]), cache=cache)
    assert_caches_equal_rebuilt(model, cache, tokens, label=f"{spec} fed 4 tokens then 1 at a time")
    other = [row[:-1] + [(row[-1] + 1) % spec.vocab_size] for row in tokens[:1]] + tokens[1:]
    found = cache_differences(cache, rebuilt_caches(model, other))
    # every layer depends on the last token; only batch row 0 changed
    assert {d.layer for d in found} == set(range(len(spec.layers))), found
    assert all("batch rows [0]" in d.detail for d in found if "rows" in d.detail), found


def test_a_snapshot_survives_mlx_lm_s_in_place_writes_and_a_restore_brings_the_ring_back():
    ring = RotatingKVCache(3)
    ring.update_and_fetch(*entries(0, 3))
    saved = rollback.snapshot_caches([ring])
    for position in range(3, 5):  # one-token updates write into the ring's buffer in place
        ring.update_and_fetch(*entries(position, 1))
    rollback.restore_caches([ring], saved)
    assert attended_view(ring).fields["keys"][0, 0, :, 0].tolist() == [1, 2]
    with pytest.raises(ValueError, match="^saved: 1 snapshots for 2 caches"):
        rollback.restore_caches([ring, KVCache()], saved)


def test_the_exact_verifier_keeps_a_recurrent_model_s_own_caches_and_rolls_them_back():
    spec = HybridSpec("mamba2", "RR", seed=4)
    target, draft = make_hybrid_model(spec), make_hybrid_model(spec.with_seed(5))
    assert [type(c).__name__ for c in exact_verifier.make_prompt_cache(target)] == ["ArraysCache", "ArraysCache"]
    prompt = mx.array([1, 2, 3])
    plain = [int(token) for token, _ in exact_verifier.generate_step(prompt, target, max_tokens=9)]
    drafted = exact_verifier.speculative_generate_step(prompt, target, draft, num_draft_tokens=3, max_tokens=9)
    assert [int(step[0]) for step in drafted] == plain
