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
    from hypothesis.reporting import current_reporter, with_reporter

    budget_reporter = runpy.run_path(str(CONFTEST))["budget_reporter"]
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
    with pytest.raises(AssertionError) as failure, with_reporter(budget_reporter(current_reporter())):
        slow_to_shrink()
    elapsed = time.perf_counter() - started
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    assert "Failing test case: slow_to_shrink(" in notes and "@reproduce_failure(" in notes, notes
    # unbounded, Hypothesis runs ~70 examples here (~7 s); a load-proof bound on calls, not on wall time
    assert len(calls) < 40, f"{len(calls)} examples in {elapsed:.1f} s under a 0.5 s shrink budget"
    printed = capsys.readouterr().out  # the budget stopped it, said as such instead of Hypothesis's 5-minute warning
    assert "shrinking stopped at this profile's 0.5 s budget" in printed and "PLEASE REPORT" not in printed, printed
