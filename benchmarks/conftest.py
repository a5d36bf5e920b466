"""Every figure carries the MLX device and version it was measured on."""

import mlx.core as mx
import pytest


@pytest.fixture(autouse=True)
def record_device(benchmark):
    benchmark.extra_info["device"] = str(mx.default_device())
    benchmark.extra_info["mlx"] = mx.__version__
