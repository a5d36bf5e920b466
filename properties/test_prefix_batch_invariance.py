"""Batch invariance: a cache entry built at one batch size serves another with the same results, and one key is
split into a key per row, so a row's draws do not depend on the rest of its batch.

Identical where the shapes are identical; across batch sizes a GEMM may block its sums otherwise (an optimised
BLAS, a GPU), so logits agree within the dtype's tolerance and draws exactly, a near tie being ill-conditioned."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, reject
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_close, assert_equal, is_near_tie
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm.config import fixture_fields


def batch_with(data, config, prefix, label: str) -> tuple[list, int]:
    """Other drawn prefixes with `prefix` inserted at a drawn row; returns rows and its index."""
    others = data.draw(st.lists(strategies.prefixes(config), max_size=3), label=f"{label}_other_prefixes")
    row = data.draw(st.integers(0, len(others)), label=f"{label}_row")
    return others[:row] + [prefix] + others[row:], row


def row_keys(seeds: list[int]) -> mx.array:
    return mx.stack([mx.random.key(seed) for seed in seeds])


@pytest.mark.claim("C15")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_a_cache_entry_built_at_one_batch_size_serves_another_with_identical_results(impl, dtype, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    seed = data.draw(strategies.seeds, label="prefix_row_seed")
    first, first_row = batch_with(data, config, prefix, "building")
    second, second_row = batch_with(data, config, prefix, "serving")
    call = (
        f"make_model({config}); generate_cached({first}) then generate_cached({second}); "
        f"prefix row keyed mx.random.key({seed}), other rows key(row index)"
    )
    note(call)
    model, cache = api.make_model(config), api.PrefixCache()
    first_keys = row_keys([seed if i == first_row else i for i in range(len(first))])
    second_keys = row_keys([seed if i == second_row else i for i in range(len(second))])
    built = api.generate_cached(model, mx.array(first, dtype=mx.int32), first_keys, cache)
    hits_before = cache.hits
    served = api.generate_cached(model, mx.array(second, dtype=mx.int32), second_keys, cache)
    assert cache.hits > hits_before and served.cache_hits >= 1, f"the prefix row was not served\n  call: {call}"
    assert_rows_equal(
        served,
        second_row,
        built,
        first_row,
        len(config.level_sizes),
        label="served at another batch size",
        call=f"{call}; batch {len(second)} vs {len(first)}",
        dtype=None if len(first) == len(second) else dtype,
    )


def assert_rows_equal(
    actual, actual_row: int, expected, expected_row: int, levels: int, label: str, call: str, dtype: str | None = None
) -> None:
    """Row `actual_row` of one generation equals row `expected_row` of another: exactly, or where `dtype` is given
    (the batches' shapes differ) draws exactly and logits within its tolerance, a near tie rejected."""
    # Labels name the check only (one report row each); the row and level go into the call.
    draws = [("latents", None, actual.latents[actual_row], expected.latents[expected_row])]
    logits = []
    for level in range(levels):
        draws.append(("tokens", level, actual.tokens[level][actual_row], expected.tokens[level][expected_row]))
        logits += [
            (
                "latent logits",
                level,
                actual.latent_logits[level][actual_row],
                expected.latent_logits[level][expected_row],
            ),
            ("token logits", level, actual.token_logits[level][actual_row], expected.token_logits[level][expected_row]),
        ]
    if dtype is not None and not all(np.array_equal(np.array(a), np.array(b)) for *_, a, b in draws):
        if is_near_tie(min(actual.margin, expected.margin), [b for *_, b in logits], getattr(mx, dtype)):
            reject()
    for what, level, a, b in draws + logits:
        where = f"row {actual_row} vs row {expected_row}" + ("" if level is None else f", level {level}")
        if dtype is None or what in ("latents", "tokens"):
            assert_equal(a, b, label=f"{label}: {what}", call=f"{call} ({where})")
        else:
            assert_close(a, b, dtype=getattr(mx, dtype), label=f"{label}: {what}", call=f"{call} ({where})")


@pytest.mark.claim("C15")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_one_key_is_split_into_a_key_per_row_so_identical_prefixes_in_a_batch_are_sampled_independently(
    impl, dtype, data
):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    copies = data.draw(st.integers(2, 4), label="copies")
    seed = data.draw(strategies.seeds, label="sampler_seed")
    key, batch = mx.random.key(seed), mx.array([prefix] * copies, dtype=mx.int32)
    split = mx.random.split(key, copies)
    call = f"make_model({config}); generate_*({copies} copies of {prefix}, key=mx.random.key({seed}))"
    note(call)
    rows = [tuple(int(x) for x in split[row].tolist()) for row in range(copies)]
    assert len(set(rows)) == copies, f"split keys repeat: {rows}\n  call: {call}"
    model, levels = api.make_model(config), len(config.level_sizes)
    for name in ("generate_uncached", "generate_cached"):
        generate = getattr(api, name)
        single = generate(model, batch, key)
        explicit = generate(model, batch, split)
        for row in range(copies):
            assert_rows_equal(
                single, row, explicit, row, levels, label=f"{name}: one key vs its explicit split", call=call
            )
            alone = generate(model, batch[row : row + 1], split[row : row + 1])
            assert_rows_equal(
                single,
                row,
                alone,
                0,
                levels,
                label=f"{name}: a row in the batch vs alone with its split key",
                call=call,
                dtype=dtype,
            )


@pytest.mark.claim("C15")
def test_copies_of_one_prefix_under_one_key_are_not_all_sampled_alike_on_the_tiny_config(impl):
    api = ncm_api(impl)
    config = api.NCMConfig(**fixture_fields("ncm_tiny"))
    prefix, copies, seed = [0, 1, 2, 3], 32, 5
    call = f"make_model(ncm_tiny); generate_*({copies} copies of {prefix}, key=mx.random.key({seed}))"
    model, batch = api.make_model(config), mx.array([prefix] * copies, dtype=mx.int32)
    for name in ("generate_uncached", "generate_cached"):
        generation = getattr(api, name)(model, batch, mx.random.key(seed))
        draws = np.concatenate([np.array(generation.latents), *map(np.array, generation.tokens)], axis=1)
        distinct = len({tuple(row) for row in draws.tolist()})
        print(f"{name}: {distinct} distinct draws among {copies} copies of one prefix under one key")
        assert distinct > 1, f"{name}: every copy drew the same latents and tokens\n  call: {call}"
        # the old broadcast semantics, spelled out: one key repeated per row forces identical draws
        repeated = getattr(api, name)(model, batch, mx.broadcast_to(mx.random.key(seed), (copies, 2)))
        for level, tokens in enumerate(repeated.tokens):
            assert_equal(
                tokens,
                mx.broadcast_to(tokens[:1], tokens.shape),
                label=f"{name}: level {level} tokens under one key repeated per row",
                call=call,
            )
