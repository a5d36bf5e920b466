"""Persistence: a saved cache serves results equal to a fresh computation; every
corrupted, truncated, edited or foreign file is rejected or misses, never a wrong
hit; a weight change makes the old entry miss."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import mlx.core as mx
import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_equal, assert_generations_equal
from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm.config import DTYPES

CORRUPTIONS = (
    "truncate",
    "flip byte",
    "edit tokens",
    "edit fingerprint",
    "edit format version",
    "edit sha256",
    "model weights file",
    "another model's cache",
)


def edit_metadata(blob: bytes, edit) -> bytes:
    """`blob` with its safetensors metadata passed through `edit`, re-encoded validly."""
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + length])
    edit(header["__metadata__"])
    encoded = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + blob[8 + length :]


def edit_entries(field: str, change):
    def edit(metadata):
        entries = json.loads(metadata["entries"])
        entries[0][field] = change(entries[0][field])
        metadata["entries"] = json.dumps(entries, sort_keys=True, separators=(",", ":"))

    return edit


@pytest.mark.claim("C15")
@given(data=st.data())
def test_a_saved_and_reloaded_cache_serves_generation_equal_to_a_fresh_computation(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, dtypes=("float32", "float16")), label="config")
    batch = data.draw(st.lists(strategies.prefixes(config), min_size=1, max_size=2, unique_by=tuple), label="prefixes")
    seed = data.draw(strategies.seeds, label="sampler_seed")
    prefix, key = mx.array(batch, dtype=mx.int32), mx.random.key(seed)
    call = f"save/load cache and model of make_model({config}); generate_cached(prefix={batch}, key({seed}))"
    note(call)
    model, writer = api.make_model(config), api.PrefixCache()
    api.generate_cached(model, prefix, key, writer)
    with tempfile.TemporaryDirectory() as folder:
        writer.save(Path(folder) / "cache.safetensors")
        api.save_model(model, Path(folder) / "model.safetensors")
        reader = api.PrefixCache()
        assert_equal(reader.load(Path(folder) / "cache.safetensors"), len(batch), label="entries loaded", call=call)
        loaded = api.load_model(Path(folder) / "model.safetensors")
    assert_equal(api.fingerprint(loaded) == api.fingerprint(model), True, label="fingerprint survives save/load")
    served = api.generate_cached(loaded, prefix, key, reader)
    assert_equal(served.cache_hits, len(batch), label="rows served from the loaded cache", call=call)
    assert_equal(reader.hits, len(batch), label="loaded cache hits", call=call)
    fresh = api.generate_uncached(api.make_model(config), prefix, key)
    assert_generations_equal(served, fresh, dtype=DTYPES[config.dtype], label="loaded cache vs fresh", call=call)


def corrupted_file(api, kind: str, blob: bytes, model, config, prefix, data) -> bytes:
    """The bytes of a file of kind `kind` derived from the valid cache file `blob`."""
    other_config = api.NCMConfig(**{**config.__dict__, "seed": config.seed + 1})
    if kind == "another model's cache":
        foreign = api.PrefixCache()
        api.generate_cached(api.make_model(other_config), mx.array([prefix], dtype=mx.int32), mx.random.key(0), foreign)
        with tempfile.TemporaryDirectory() as folder:
            foreign.save(Path(folder) / "foreign.safetensors")
            return (Path(folder) / "foreign.safetensors").read_bytes()
    if kind == "model weights file":
        with tempfile.TemporaryDirectory() as folder:
            api.save_model(model, Path(folder) / "model.safetensors")
            return (Path(folder) / "model.safetensors").read_bytes()
    if kind == "truncate":
        return blob[: data.draw(st.integers(0, len(blob) - 1), label="truncate_at")]
    if kind == "flip byte":
        offset = data.draw(st.integers(0, len(blob) - 1), label="flip_offset")
        mask = data.draw(st.integers(1, 255), label="flip_mask")
        return blob[:offset] + bytes([blob[offset] ^ mask]) + blob[offset + 1 :]
    if kind == "edit tokens":
        position = data.draw(st.integers(0, config.prefix_length - 1), label="edited_position")
        return edit_metadata(
            blob,
            edit_entries(
                "tokens",
                lambda tokens: (
                    tokens[:position] + [(tokens[position] + 1) % config.vocab_size] + tokens[position + 1 :]
                ),
            ),
        )
    if kind == "edit fingerprint":
        other = api.fingerprint(api.make_model(other_config))
        return edit_metadata(blob, edit_entries("fingerprint", lambda value: other))
    if kind == "edit format version":
        return edit_metadata(blob, lambda metadata: metadata.update(format_version="2"))
    return edit_metadata(blob, lambda metadata: metadata.update(sha256="0" * 64))


@pytest.mark.claim("C15")
@given(data=st.data())
def test_every_corrupted_or_foreign_cache_file_is_rejected_or_misses_never_a_wrong_hit(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, min_prefix_length=2), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    model, writer = api.make_model(config), api.PrefixCache()
    api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), writer)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cache.safetensors"
        writer.save(path)
        blob = path.read_bytes()
        for kind in CORRUPTIONS:
            path.write_bytes(corrupted_file(api, kind, blob, model, config, prefix, data))
            call = f"PrefixCache().load(cache file of make_model({config}) for {prefix}, {kind})"
            note(call)
            reader = api.PrefixCache()
            if kind == "another model's cache":
                reader.load(path)
            else:
                with pytest.raises(ValueError, match="path"):
                    reader.load(path)
                assert_equal(len(reader), 0, label="entries kept from a rejected file", call=call)
            served = api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), reader)
            assert_equal(served.cache_hits, 0, label="rows served from a rejected or foreign file", call=call)
            assert_equal(reader.hits, 0, label="hits from a rejected or foreign file", call=call)


@pytest.mark.claim("C15")
@given(data=st.data())
def test_a_weight_change_makes_the_old_entry_miss(impl, data):
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig), label="config")
    prefix = data.draw(strategies.prefixes(config), label="prefix")
    model, cache = api.make_model(config), api.PrefixCache()
    weights = tree_flatten(model.parameters())
    index = data.draw(st.integers(0, len(weights) - 1), label="changed_weight")
    name, value = weights[index]
    call = f"make_model({config}); generate_cached({prefix}); {name} += 0.5 at its first entry; generate_cached again"
    note(call)
    api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), cache)
    flat = value.reshape(-1)
    changed = mx.concatenate([flat[:1] + 0.5, flat[1:]]).reshape(value.shape).astype(value.dtype)
    model.update(tree_unflatten([(name, changed)]))
    served = api.generate_cached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0), cache)
    assert_equal(served.cache_hits, 0, label="rows served after a weight change", call=call)
    assert_equal(cache.hits, 0, label="hits after a weight change", call=call)
    fresh = api.generate_uncached(model, mx.array([prefix], dtype=mx.int32), mx.random.key(0))
    assert_generations_equal(served, fresh, dtype=DTYPES[config.dtype], label="after weight change", call=call)
