"""Unit tests' fixtures: a nested pytest run over a suite of the test's own."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
"""The plugin's tests run pytest in-process on suites of their own (tests/test_plugin.py)."""


@pytest.fixture
def run_pytest():
    """Run pytest in a folder holding a suite of its own (claim markers registered); the completed process."""

    def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
        (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    claim: c\n    statistical: s\n")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
        return subprocess.run(command, cwd=folder, capture_output=True, text=True)

    return run
