"""pytest plugin: the implementation under test, the run's statistical policy, evidence.

Loaded through the ``pytest11`` entry point, so any pytest run in the
project's environment has ``--impl`` and ``--ncm-report-dir``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncm_verify import stats
from ncm_verify.impl import DEFAULT_IMPLEMENTATION, load_implementation


def pytest_addoption(parser):
    group = parser.getgroup("ncm-verify")
    group.addoption(
        "--impl",
        default=os.environ.get("NCM_VERIFY_IMPL", DEFAULT_IMPLEMENTATION),
        help="module providing the kernels under test (default: %(default)s)",
    )
    group.addoption(
        "--ncm-report-dir",
        default=os.environ.get("NCM_VERIFY_REPORT_DIR"),
        help="folder for the statistical records and evidence of this run",
    )


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    report_dir = config.getoption("--ncm-report-dir")
    if report_dir:
        os.environ["NCM_VERIFY_REPORT_DIR"] = str(Path(report_dir).resolve())
        if not _is_worker(config):
            records = stats.records_path()
            records.parent.mkdir(parents=True, exist_ok=True)
            records.unlink(missing_ok=True)


def planned_statistical_tests(items) -> int:
    """Chi-square tests the collected statistical properties will run at most."""
    from hypothesis import settings

    total = 0
    for item in items:
        marker = item.get_closest_marker("statistical")
        if marker is None:
            continue
        per_example = marker.kwargs.get("tests", 1)
        test = getattr(item, "obj", None)
        test_settings = getattr(test, "_hypothesis_internal_use_settings", settings.default)
        explicit = len(getattr(test, "hypothesis_explicit_examples", ()))
        total += per_example * (test_settings.max_examples + explicit)
    return max(total, 1)


def pytest_collection_modifyitems(session, config, items):
    stats.set_policy(stats.Policy(planned_tests=planned_statistical_tests(items)))


@pytest.fixture(scope="session")
def impl(request):
    """The implementation module under test (``--impl``)."""
    return load_implementation(request.config.getoption("--impl"))


def pytest_report_header(config):
    return f"ncm-verify: implementation under test {config.getoption('--impl')}"
