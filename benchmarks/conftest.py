"""Every figure carries the MLX device and version it was measured on."""

import mlx.core as mx
import pytest


@pytest.fixture(autouse=True)
def record_device(benchmark, pytestconfig):
    benchmark.extra_info["device"] = str(mx.default_device())
    benchmark.extra_info["mlx"] = mx.__version__
    benchmark.extra_info["grid"] = pytestconfig.getoption("bench_grid")


def pytest_addoption(parser):
    parser.addoption(
        "--bench-grid",
        choices=("quick", "full"),
        default="quick",
        help="the trained level rows' sizes: quick (make bench) or full (make bench GRID=full)",
    )
    parser.addoption(
        "--untrained-level-rows",
        action="store_true",
        default=False,
        help="also run level drafting's untrained rows (seeded models; make bench runs the trained ones)",
    )
