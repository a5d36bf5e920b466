"""Unit tests' fixtures: a nested pytest run over a suite of its own, and the synthetic ledger and evidence."""

import subprocess
import sys
from pathlib import Path

import pytest

# pytester's in-process runs drop the modules they imported, and numpy's C modules cannot load twice: scipy's
# statistics (which the plugin imports on first use) are imported once, here.
import scipy.stats  # noqa: F401
from hypothesis import settings
from synthetic import POLICY, REPRODUCE, chi_square_record, greedy_and_uncheckable_claims, node

pytest_plugins = ["pytester"]
"""The plugin's tests run pytest in-process on suites of their own (tests/test_plugin.py, `run_pytest_inprocess`)."""


def with_markers(folder: Path, *args: str) -> list[str]:
    """Register the claim markers in `folder`'s own pytest.ini; the arguments every nested run starts with."""
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    claim: c\n    statistical: s\n")
    return ["-q", "-p", "no:cacheprovider", *args]


@pytest.fixture
def run_pytest():
    """Run pytest in a folder holding a suite of its own (claim markers registered); the completed process."""

    def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pytest", *with_markers(folder, *args)]
        return subprocess.run(command, cwd=folder, capture_output=True, text=True)

    return run


@pytest.fixture
def in_process_pytest(pytester, monkeypatch):
    """pytest run in this process from `folder` with these arguments, as ``python -m pytest`` there would run; the
    completed process. It saves the ~7 s of CPU a fresh interpreter spends importing MLX, Hypothesis, scipy and the
    plugin, where a run needs no process of its own (no xdist workers, no environment of its own)."""
    # pytester drops the modules a run imported, and MLX aborts when imported twice: the plugin's are imported here
    import ncm_verify.environment  # noqa: F401
    import ncm_verify.reference  # noqa: F401
    from ncm_verify.harness import checks, evidence, stats  # noqa: F401

    def run(folder: Path, *arguments: str) -> subprocess.CompletedProcess:
        monkeypatch.chdir(folder)  # undone with pytester's own change of folder, at teardown
        profile = settings.get_current_profile_name()
        try:
            result = pytester.runpytest_inprocess(*arguments)
        finally:  # a suite's conftest may load a Hypothesis profile of its own: this process's tests keep theirs
            settings.load_profile(profile)
        out, err = ("".join(f"{line}\n" for line in lines) for lines in (result.outlines, result.errlines))
        return subprocess.CompletedProcess(arguments, int(result.ret), out, err)

    return run


@pytest.fixture
def run_pytest_inprocess(in_process_pytest):
    """`run_pytest` in this process (`in_process_pytest`)."""
    return lambda folder, *args: in_process_pytest(folder, *with_markers(folder, *args))


@pytest.fixture
def run_pytest_with(request):
    """The runner for a nested run with these xdist arguments: a subprocess for workers, this process without."""
    return lambda workers: request.getfixturevalue("run_pytest" if workers else "run_pytest_inprocess")


@pytest.fixture
def ledger() -> dict:
    claim = {"sources": ["S01"], "paths": ["src/x.py"]}
    return {
        "schema": "ncm-verify/ledger/1",
        "sources": [
            {
                "id": "S01",
                "title": "A paper",
                "url": "https://example.org/p",
                "kind": "paper",
                "read_scope": "abstract",
                "supports": "the identity",
            }
        ],
        "claims": [
            {
                "id": "C1",
                "statement": "prefix isolated",
                **claim,
                "properties": ["properties/test_prefix.py::test_isolated"],
            },
            {
                "id": "C2",
                "statement": "cached equals uncached",
                **claim,
                "properties": ["properties/test_prefix.py::test_cached"],
            },
            {
                "id": "C5",
                "statement": "chain preserves the target",
                **claim,
                "properties": ["properties/test_chain.py::test_samples"],
            },
            *greedy_and_uncheckable_claims(claim),
        ],
    }


@pytest.fixture
def evidence() -> dict:
    failure = {
        "phase": "call",
        "message": "AssertionError: tokens differ",
        "seed": None,
        "falsifying_example": "Failing test case: test_cached(\n    seed=3,\n)",
        "reproduce_failure": REPRODUCE,
    }
    samples = "properties/test_chain.py::test_samples[float32]"
    return {
        "schema": "ncm-verify/evidence/1",
        "impl": "ncm_verify.reference",
        "profile": "ci",
        "exit_status": 1,
        "environment": {"mlx": "0.32.4", "mlx_default_device": "Device(gpu, 0)", "platform": "test"},
        "policy": POLICY,
        "budget": {
            "planned_tests": 60,
            "chi_square_tests_run": 2,
            "within_plan": True,
            "run_failed_by_budget": False,
            "note": "2 chi-square tests run of 60 planned",
        },
        "properties": [
            node(
                "properties/test_prefix.py::test_isolated",
                ["C1"],
                differences=[{"test": "t", "check": "states", "difference": 1e-7, "tolerance": 1e-5}],
            ),
            node("properties/test_prefix.py::test_cached", ["C2"], outcome="failed", failure=failure),
            node(
                samples,
                ["C5"],
                statistical_tests_per_example=1,
                stats=[chi_square_record(samples, 0.4, law=f"law{i}") for i in range(11)]
                + [chi_square_record(samples, 0.03, law="law0")],
            ),
        ],
    }


@pytest.fixture
def passing(evidence) -> dict:
    """Evidence on which every claim with properties is shown."""
    samples = "properties/test_chain.py::test_samples[float32]"
    evidence["properties"] = [
        node("properties/test_prefix.py::test_isolated", ["C1"]),
        node("properties/test_prefix.py::test_cached", ["C2"]),
        node(
            samples,
            ["C5"],
            statistical_tests_per_example=1,
            stats=[chi_square_record(samples, 0.4, law=f"law{i}") for i in range(12)],
        ),
        node("properties/test_greedy.py::test_greedy", ["C7"]),
    ]
    return evidence
