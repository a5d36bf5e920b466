"""Self-test helpers: where the teeth tests leave their evidence (`ncm_verify.run` reads it)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SELFTEST_DIR = "NCM_VERIFY_SELFTEST_DIR"
OWN_SELFTEST_DIR = pytest.StashKey[str]()


def report_dir() -> Path:
    """Where the teeth verdicts of this session go: the folder `make verify` names (its self-test cache)."""
    return Path(os.environ[SELFTEST_DIR])


def pytest_configure(config):
    """A session `make verify` did not start gets a fresh folder: merging parts left under reports/ by an earlier
    session would overwrite the last run's mutants.json with stale verdicts (xdist workers inherit the variable)."""
    if not hasattr(config, "workerinput") and not os.environ.get(SELFTEST_DIR):
        config.stash[OWN_SELFTEST_DIR] = os.environ[SELFTEST_DIR] = tempfile.mkdtemp(prefix="ncm-verify-selftests-")


def pytest_unconfigure(config):
    """The fresh folder holds nothing anyone reads once the session's verdicts are printed."""
    folder = config.stash.get(OWN_SELFTEST_DIR, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ[SELFTEST_DIR]


@pytest.fixture
def nested_environment():
    """The environment for a nested pytest run under a profile, free of this run's report and worker settings."""

    def under(profile: str) -> dict[str, str]:
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("NCM_VERIFY_", "PYTEST_XDIST"))}
        return {**kept, "HYPOTHESIS_PROFILE": profile}

    return under


def parts(name: str) -> dict[str, dict]:
    """The JSON parts the teeth tests left under reports/<name>/, by file stem."""
    folder = report_dir() / name
    return (
        {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
    )


def pytest_sessionfinish(session):
    """Merge the teeth verdicts into reports/mutants.json and calibration.json (controller only)."""
    if hasattr(session.config, "workerinput"):
        return
    mutants, calibration = parts("mutants"), parts("calibration")
    if mutants:
        summary = {"profile": "selftest", "mutants": list(mutants.values())}
        (report_dir() / "mutants.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if calibration:
        planted = [part for stem, part in calibration.items() if stem.startswith("planted")]
        # The report shows one planted deviation in its summary: the one with the most outcomes.
        merged = {
            **calibration.get("nominal", {}),
            "planted": max(planted, key=lambda p: p["df"], default=None),
            "power_cases": planted,
            "size": calibration.get("size"),
            "size_large_df": calibration.get("size large df"),
        }
        (report_dir() / "calibration.json").write_text(json.dumps(merged, indent=2) + "\n")


@pytest.fixture
def run_pytest():
    """Run pytest in a folder holding a suite of its own (claim markers registered); the completed process."""

    def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
        (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    claim: c\n    statistical: s\n")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        return subprocess.run(command, cwd=folder, capture_output=True, text=True)

    return run


@pytest.fixture
def reports() -> Path:
    folder = report_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder
