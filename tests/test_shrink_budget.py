"""The per-profile shrink budget of properties/conftest.py: Hypothesis still reads it, and a failure still prints."""

from __future__ import annotations

import runpy
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine

CONFTEST = Path(__file__).resolve().parents[1] / "properties" / "conftest.py"


@pytest.fixture
def apply_shrink_budget(monkeypatch):
    """The conftest's setter; the engine's limit is restored after the test."""
    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", engine.MAX_SHRINKING_SECONDS)
    return runpy.run_path(str(CONFTEST))["apply_shrink_budget"]


def test_each_profile_sets_the_global_hypothesis_reads_when_it_shrinks(apply_shrink_budget):
    """An upgrade of Hypothesis that drops or renames the global fails here instead of shrinking for minutes."""
    assert apply_shrink_budget("ci") == 10 and engine.MAX_SHRINKING_SECONDS == 10
    assert apply_shrink_budget("thorough") == 300
    source = Path(engine.__file__).read_text()
    assert "time.perf_counter() + MAX_SHRINKING_SECONDS" in source  # read at run time, not bound at import


def test_shrinking_stops_at_the_budget_and_the_failure_still_prints_its_example_and_reproduction(
    apply_shrink_budget, capsys
):
    apply_shrink_budget("ci")
    engine.MAX_SHRINKING_SECONDS = 0.5  # the `ci` budget, scaled down to a self-test's time
    calls = []

    @settings(database=None, derandomize=True, print_blob=True, deadline=None, max_examples=200)
    @given(values=st.lists(st.integers(0, 1000), min_size=40, max_size=40))
    def slow_to_shrink(values):
        calls.append(sum(values))
        time.sleep(0.1)  # a statistical property's example takes seconds; unbounded, this shrinks for ~7 s
        assert sum(values) < 50

    started = time.perf_counter()
    with pytest.raises(AssertionError) as failure:
        slow_to_shrink()
    elapsed = time.perf_counter() - started
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    assert "Failing test case: slow_to_shrink(" in notes and "@reproduce_failure(" in notes, notes
    # unbounded, Hypothesis runs ~70 examples here (~7 s); a load-proof bound on calls, not on wall time
    assert len(calls) < 40, f"{len(calls)} examples in {elapsed:.1f} s under a 0.5 s shrink budget"
    assert "stopped because it is making very slow progress" in capsys.readouterr().out  # the budget stopped it


BUDGET_SUITE = """
import time

from hypothesis import given, settings, strategies as st
from hypothesis.internal.conjecture import engine

engine.MAX_SHRINKING_SECONDS = 0.3  # after the conftest set the profile's budget: a self-test's time


@settings(database=None, derandomize=True, print_blob=True, max_examples=100)
@given(x=st.integers(0, 10**9))
def test_slow_to_shrink(x):
    time.sleep(0.05)
    assert x < 1000
"""


def test_under_pytest_the_budget_that_stopped_shrinking_is_named_instead_of_hypothesiss_five_minute_warning(
    tmp_path, run_pytest_inprocess, monkeypatch
):
    """Through pytest and Hypothesis's plugin, as `make verify` runs the properties, with the real conftest."""
    monkeypatch.setattr(engine, "MAX_SHRINKING_SECONDS", engine.MAX_SHRINKING_SECONDS)  # the suite sets its own
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text())
    (tmp_path / "test_budget.py").write_text(BUDGET_SUITE)
    result = run_pytest_inprocess(tmp_path, "-p", "no:xdist")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "shrinking stopped at this profile's 0.3 s budget" in result.stdout, result.stdout
    assert "five minutes" not in result.stdout and "PLEASE REPORT" not in result.stdout, result.stdout
    assert "@reproduce_failure(" in result.stdout
