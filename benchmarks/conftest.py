"""Every figure carries the MLX device and version it was measured on."""

import mlx.core as mx
import pytest


@pytest.fixture(autouse=True)
def record_device(benchmark):
    benchmark.extra_info["device"] = str(mx.default_device())
    benchmark.extra_info["mlx"] = mx.__version__


def pytest_addoption(parser):
    parser.addoption(
        "--untrained-level-rows",
        action="store_true",
        default=False,
        help="also run level drafting's untrained rows (seeded models; make bench runs the trained ones)",
    )
