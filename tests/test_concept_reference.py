"""Unit tests of the source's NCM reference (issue 23): configs, bad input, the fixture checkpoint,
and path (b) judging a checkpoint outside the repository."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from ncm_verify.harness.concept_checkpoint import (
    DEFAULT_CHECKPOINT,
    TRAINED_CHECKPOINT,
    checkpoint_paths,
    describe_checkpoint,
    judged_line,
)
from ncm_verify.harness.concept_instances import perturb_parameters
from ncm_verify.reference.ncm import concept_fixture
from ncm_verify.reference.ncm.concept_config import ConceptConfig, cache_schedule, kv_bytes_per_position
from ncm_verify.reference.ncm.concept_generate import generate_cached_concepts, row_keys, sample_codes
from ncm_verify.reference.ncm.concept_model import load_concept_model, make_concept_model
from ncm_verify.train.concept_checkpoint import write_trained_fixture

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"level_lengths": (1, 3), "codebook_sizes": (8, 8)}, "level_lengths"),
        ({"codebook_sizes": (8,)}, "codebook_sizes"),
        ({"mask": "block_diagonal"}, "mask"),
        ({"level_input": "sum"}, "level_input"),
        ({"dropout": 1.0}, "dropout"),
        ({"d_model": 30, "num_heads": 4}, "num_heads"),
        ({"vocab_size": 0}, "vocab_size"),
    ],
)
def test_a_bad_config_is_refused_naming_its_field(fields, name):
    with pytest.raises(ValueError, match=name):
        ConceptConfig(**fields)


@pytest.fixture(scope="module")
def model():
    return make_concept_model(ConceptConfig())


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"prefix": mx.array([[0, 99]])}, "prefix"),
        ({"prefix": mx.array([0.5, 1.0])}, "prefix"),
        ({"keys": mx.zeros((2, 2), dtype=mx.uint32)}, "keys"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"start": -3}, "start"),
    ],
)
def test_bad_generation_input_is_a_value_error_naming_the_argument(model, change, name):
    arguments = {"prefix": mx.array([[1, 2, 3]]), "keys": row_keys(0, 1), "temperature": 1.0, "top_k": None, "start": 0}
    arguments.update(change)
    prefix, keys = arguments.pop("prefix"), arguments.pop("keys")
    with pytest.raises(ValueError, match=name):
        generate_cached_concepts(model, prefix, keys, **arguments)


def test_greedy_sampling_takes_the_first_maximum_and_ignores_the_keys():
    logits = mx.array([[[0.0, 2.0, 2.0, 1.0]]])
    assert sample_codes(logits, row_keys(5, 1), 0.0).tolist() == [[1]]


def test_the_fixture_checkpoint_is_what_its_seeds_make(tmp_path):
    written = concept_fixture.write_fixture(tmp_path / "again.safetensors")
    assert hashlib.sha256(written.read_bytes()).hexdigest() == describe_checkpoint(None)["sha256"]
    assert DEFAULT_CHECKPOINT.stat().st_size < 2**20


def test_a_run_describes_every_checkpoint_path_b_judges_with_its_sha256(tmp_path):
    both = describe_checkpoint(None)
    assert [entry["path"] for entry in both["judged"]] == [str(path) for path in checkpoint_paths(None)]
    assert both["judged"][1]["sha256"] == hashlib.sha256(TRAINED_CHECKPOINT.read_bytes()).hexdigest()
    assert judged_line(both).count("sha256") == 2
    assert len(describe_checkpoint(str(TRAINED_CHECKPOINT))["judged"]) == 1
    assert describe_checkpoint(str(tmp_path / "absent"))["judged"][0]["sha256"] == "missing"


def test_the_trained_checkpoint_is_the_trained_drafters_ncm_and_sits_away_from_initialisation(tmp_path):
    written = write_trained_fixture(tmp_path / "again.safetensors")
    assert written.read_bytes() == TRAINED_CHECKPOINT.read_bytes()
    assert checkpoint_paths(None) == (DEFAULT_CHECKPOINT.resolve(), TRAINED_CHECKPOINT.resolve())
    assert checkpoint_paths(str(TRAINED_CHECKPOINT)) == (TRAINED_CHECKPOINT.resolve(),)
    layer = load_concept_model(TRAINED_CHECKPOINT).generator.layers[0]
    assert float(mx.abs(layer.key_norm.weight - 1).max()) > 0.1
    assert float(mx.abs(layer.up.bias).max()) > 0.05


def test_a_perturbed_model_moves_every_gain_bias_and_weight_reproducibly():
    first, second = make_concept_model(ConceptConfig()), make_concept_model(ConceptConfig())
    before = dict(tree_flatten(first.parameters()))
    assert (
        perturb_parameters(first, 7, 0.1)
        == perturb_parameters(second, 7, 0.1)
        == ("perturb_parameters(model, seed=7, scale=0.1)")
    )
    after, again = dict(tree_flatten(first.parameters())), dict(tree_flatten(second.parameters()))
    for name, value in before.items():
        assert not mx.array_equal(after[name], value).item(), name
        assert mx.array_equal(after[name], again[name]).item(), name
    assert perturb_parameters(object(), 7, 0.1).startswith("not perturbed")


def test_the_fixture_declares_its_schedule_and_kv_bytes():
    config = concept_fixture.FIXTURE_CONFIG
    # block_diagonal_upto: level l's forward runs levels 0..l (1, 3, 7, 15 rows) after the 6 prefix rows
    assert cache_schedule(config, 6, "uncached") == (7, 9, 13, 21)
    assert cache_schedule(config, 6, "pc1") == (6, 1, 3, 7, 15)
    assert cache_schedule(config, 6, "pc1_levels") == (6, 1, 2, 4, 8)
    assert kv_bytes_per_position(config) == 2 * 2 * 32 * 4


def test_a_file_that_is_not_a_checkpoint_is_refused_naming_the_path(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="path"):
        load_concept_model(path)


def test_a_checkpoint_outside_the_repository_with_a_wrong_prefix_cache_fails_c2_on_path_b(tmp_path):
    """Path (b) judges the file given, named by path and sha256; a port whose PC-1 cache keeps K
    before the rotation fails C2 on that checkpoint."""
    outside = tmp_path / "researchers-checkpoint.safetensors"
    shutil.copyfile(DEFAULT_CHECKPOINT, outside)
    sha = hashlib.sha256(outside.read_bytes()).hexdigest()
    command = [
        sys.executable, "-m", "pytest", "properties/test_concept_model.py", "-p", "no:xdist", "-p", "no:cacheprovider",
        "-k", "checkpoint and cached_prefix_kv", f"--ncm-model={outside}",
        "--impl=ncm_verify.mutants.concept_prefix_k_before_rotation",
    ]  # fmt: skip
    done = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"HYPOTHESIS_PROFILE": "selftest", "PATH": ""},
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert f"checkpoints {outside} (sha256 {sha})" in output, output[:2000]
    failed = "test_concept_model.py::test_level_logits_from_the_cached_prefix_kv_equal_the_recomputed_ones[checkpoint]"
    assert f"FAILED properties/{failed}" in output
    assert "given prefix K/V vs recomputed" in output
