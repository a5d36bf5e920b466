"""Self-tests of the NCM config, fixtures, masks, generation input checks and the implementation protocol."""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.protocol import ncm_api
from ncm_verify.reference.ncm import (
    ISOLATED_MASK_NAMES,
    MASKS,
    NCMConfig,
    generate_cached,
    generate_uncached,
    is_partial_prefix_isolated,
    is_prefix_isolated,
    make_model,
)
from ncm_verify.reference.ncm.config import FIXTURES, fixture_fields, load_config

GOOD = fixture_fields("ncm_tiny")


@pytest.mark.parametrize(
    "field, value",
    [
        ("vocab_size", 1),
        ("prefix_length", 0),
        ("level_sizes", []),
        ("level_sizes", [2, 0]),
        ("codebook_size", 0),
        ("d_model", 0),
        ("num_heads", 3),
        ("num_layers", 0),
        ("mask", "bidirectional"),
        ("dropout", 1.0),
        ("dtype", "int8"),
        ("seed", -1),
        ("vocab_size", 2.5),
        ("num_layers", True),
    ],
)
def test_an_invalid_config_field_is_a_value_error_naming_it(field, value):
    with pytest.raises(ValueError, match=field):
        NCMConfig(**{**GOOD, field: value})


def test_unknown_and_missing_config_fields_are_named():
    with pytest.raises(ValueError, match="colour"):
        NCMConfig.from_dict({**GOOD, "colour": "red"})
    with pytest.raises(ValueError, match="d_model"):
        NCMConfig.from_dict({k: v for k, v in GOOD.items() if k != "d_model"})


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("ncm_*.json")), ids=lambda p: p.name)
def test_every_fixture_config_loads_and_round_trips_through_json(path):
    config = load_config(path)
    assert NCMConfig.from_json(config.to_json()) == config


def test_the_sudoku_fixture_has_the_documented_shape():
    config = load_config(FIXTURES / "ncm_sudoku.json")
    assert (config.prefix_length, config.vocab_size, config.level_sizes) == (81, 10, (9, 81))


@pytest.mark.parametrize("name", sorted(MASKS))
def test_prefix_isolation_is_read_from_the_mask_as_the_design_table_says(name):
    mask = MASKS[name](3, [2, 2])
    assert is_prefix_isolated(mask, 3) == (name in ISOLATED_MASK_NAMES)
    assert is_partial_prefix_isolated(mask, 3) == (name == "causal")
    assert np.asarray(mask).diagonal().all(), "every row must see itself"


def test_a_module_without_the_ncm_names_fails_with_a_message_naming_them():
    with pytest.raises(ValueError, match="PrefixCache"):
        ncm_api(types.ModuleType("speculative_only"))


@pytest.mark.parametrize("generate", [generate_uncached, generate_cached], ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "prefix",
    [
        mx.array([[0.0, 1.0, 2.0, 3.0]]),
        mx.array([[0.5, 1.0, 2.0, 3.0]]),
        np.array([[0.9, 1.0, 2.0, 3.0]]),
        [[0, 1.5, 2, 3]],
        mx.array([[True, False, True, False]]),
    ],
    ids=["whole floats", "fractional float", "numpy float", "list with a float", "bool"],
)
def test_a_non_integer_prefix_is_a_value_error_naming_prefix_not_a_silent_truncation(generate, prefix):
    model = make_model(NCMConfig(**GOOD))
    with pytest.raises(ValueError, match="^prefix:"):
        generate(model, prefix, mx.random.key(0))


@pytest.mark.parametrize("generate", [generate_uncached, generate_cached], ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(0, 4), (4,), (1, 3)], ids=["empty batch", "one dimension", "short prefix"])
def test_a_prefix_of_the_wrong_shape_or_an_empty_batch_is_a_value_error_naming_prefix(generate, shape):
    model = make_model(NCMConfig(**GOOD))
    with pytest.raises(ValueError, match=r"^prefix: expected shape \[B >= 1, 4\]"):
        generate(model, mx.zeros(shape, dtype=mx.int32), mx.random.key(0))
