"""The precompiled MLX CPU preamble: built only when it changes nothing, never read once MLX's headers change."""

import shutil
import sys

import pytest

from ncm_verify import mlx_jit

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("g++") is None or mlx_jit.mlx_include() is None,
    reason="MLX JIT-compiles CPU kernels with g++ only on Linux",
)


@pytest.fixture
def include(tmp_path):
    """A copy of MLX's include folder without any precompiled header: the tests build and break their own."""
    copy = tmp_path / "include"
    shutil.copytree(mlx_jit.mlx_include(), copy, ignore=shutil.ignore_patterns("*.gch", "*.gch.sha256"))
    return copy


def test_a_precompiled_preamble_is_built_once_kept_byte_identical_to_mlxs_own_and_removed_once_a_header_changes(
    include, tmp_path, monkeypatch
):
    # one test, so that the ~10 s of CPU a precompiled preamble costs to build is spent once for both guards
    plain = mlx_jit._compile_probe(tmp_path, [include], "plain.so")
    assert mlx_jit.preamble_state(include) == "parsed per kernel"
    assert mlx_jit.ensure_precompiled(include).startswith("built:")
    assert mlx_jit.preamble_state(include) == "precompiled"
    assert mlx_jit.ensure_precompiled(include).startswith("current:")
    assert mlx_jit._compile_probe(tmp_path, [include], "precompiled.so") == plain
    mlx_jit.remove_if_stale(include)
    assert mlx_jit.preamble_state(include) == "precompiled", "kept while MLX's headers are those it was built from"
    with monkeypatch.context() as without_compiler:  # a session without g++ (a nested run's bare PATH) can't judge it
        without_compiler.setenv("PATH", "")
        mlx_jit.remove_if_stale(include)
    assert mlx_jit.preamble_state(include) == "precompiled", "kept by a session that has no g++ to read it"
    header = include / "mlx" / "backend" / "cpu" / "unary_ops.h"
    header.write_text(header.read_text() + "\n// an MLX upgrade\n")
    mlx_jit.remove_if_stale(include)
    assert mlx_jit.preamble_state(include) == "parsed per kernel"
    assert mlx_jit.ensure_precompiled(include).startswith("built:")
