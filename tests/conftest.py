"""Self-test helpers: where the teeth tests leave their evidence."""

import json
import os
from pathlib import Path

import pytest


def report_dir() -> Path:
    """Teeth verdicts go beside `make verify`'s report (kept apart from this run's own evidence)."""
    return Path(os.environ.get("NCM_VERIFY_SELFTEST_DIR", "reports"))


def pytest_sessionfinish(session):
    """Merge the per-mutant verdicts into reports/mutants.json (controller only)."""
    if hasattr(session.config, "workerinput"):
        return
    folder = report_dir() / "mutants"
    verdicts = [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    if verdicts:
        summary = {"profile": "selftest", "mutants": verdicts}
        (report_dir() / "mutants.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


@pytest.fixture
def reports() -> Path:
    folder = report_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder
