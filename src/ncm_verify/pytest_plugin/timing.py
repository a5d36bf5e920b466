"""Where one pytest process's CPU time goes: start-up, collection, fixtures, examples, bookkeeping.

CPU seconds (user + system, `resource.getrusage`), not wall seconds: on a shared machine the wall clock measures the
neighbours. A property's call is split further by Hypothesis's own per-example timings (wall, so used as fractions
of the call's CPU): the test bodies, the draws of its strategies, and the engine's own work (generation bookkeeping,
shrinking, replay) as the rest of the call.
"""

from __future__ import annotations

import resource
import time

import pytest

CHILD_PROCESSES = "child processes: MLX's kernel compiles"
PARTS = (
    "start-up",
    "collection",
    "fixtures",
    "examples: test bodies",
    "examples: strategy draws",
    "examples: Hypothesis engine",
    "bookkeeping",
    CHILD_PROCESSES,
)
"""The parts, in the order a process spends them; "bookkeeping" is the rest of each test's run protocol (its
reports, the plugin's evidence and planning) and the session's end. The last is outside the process's own CPU: on
the CPU backend ``mx.compile`` builds each new fused kernel with a C++ compiler (~0.8 s of CPU each, cached on disk
by MLX), which a fresh machine pays in full."""


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class ProcessTiming:
    """The CPU seconds of one pytest process by part; made at configure time, when start-up has been spent."""

    def __init__(self, role: str):
        self.role = role
        self.parts = dict.fromkeys(PARTS, 0.0)
        self.parts["start-up"] = self.mark = cpu_seconds()
        self.children_before = cpu_seconds(resource.RUSAGE_CHILDREN)
        self.wall_started = time.perf_counter()
        self.tests = 0

    def collected(self) -> None:
        now = cpu_seconds()
        self.parts["collection"] += now - self.mark
        self.mark = now

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] += seconds

    def add_call(self, seconds: float, hypothesis: dict | None) -> None:
        """A test's call, split by Hypothesis's timings of its examples when it ran any."""
        self.tests += 1
        if not hypothesis or hypothesis["call_s"] <= 0:
            self.parts["examples: test bodies"] += seconds
            return
        call, run, draws = hypothesis["call_s"], hypothesis["runtime_s"], hypothesis["drawtime_s"]
        draws, run = min(draws, call), min(run, call)
        self.parts["examples: strategy draws"] += seconds * draws / call
        self.parts["examples: test bodies"] += seconds * max(run - draws, 0.0) / call
        self.parts["examples: Hypothesis engine"] += seconds * (call - run) / call

    def describe(self) -> dict:
        """The JSON evidence.json keeps: parts in CPU seconds, the rest of the process's CPU as bookkeeping."""
        total = cpu_seconds()
        # An xdist controller's children are its workers, who report their own: only a process that ran tests counts
        children = cpu_seconds(resource.RUSAGE_CHILDREN) - self.children_before if self.tests else 0.0
        counted = sum(v for k, v in self.parts.items() if k not in ("bookkeeping", CHILD_PROCESSES))
        parts = {**self.parts, "bookkeeping": max(total - counted, 0.0), CHILD_PROCESSES: children}
        return {
            "role": self.role,
            "tests": self.tests,
            "cpu_s": round(total + children, 2),
            "wall_s": round(time.perf_counter() - self.wall_started, 2),
            "parts_cpu_s": {k: round(v, 2) for k, v in parts.items()},
        }


def hypothesis_times(statistics: dict) -> dict:
    """Seconds Hypothesis measured over every example of every phase: whole runs, and their strategies' draws."""
    cases = [
        case for key, phase in statistics.items() if key.endswith("-phase") for case in phase.get("test-cases", [])
    ]
    return {
        "runtime_s": sum(case.get("runtime", 0.0) for case in cases),
        "drawtime_s": sum(case.get("drawtime", 0.0) for case in cases),
    }


def summed(processes: list[dict]) -> dict[str, float]:
    """CPU seconds per part over `processes` (a phase's workers and its controller)."""
    return {part: round(sum(p["parts_cpu_s"].get(part, 0.0) for p in processes), 1) for part in PARTS}


HYPOTHESIS_TIMES = pytest.StashKey[dict]()
"""An item's `hypothesis_times`, left by the plugin's statistics callback."""
WORKER_OUTPUT = "ncm_verify_timing"
"""Key of a worker's `ProcessTiming.describe` in the output xdist hands its controller."""


class TimingHooks:
    """The hooks that feed one process's `ProcessTiming` (registered by the plugin at configure time)."""

    def __init__(self, timing: ProcessTiming):
        self.timing = timing

    def pytest_collection_finish(self, session):
        self.timing.collected()

    def fixtures(self):
        """A hook wrapper's body that counts the CPU of what it wraps as fixtures."""
        started = cpu_seconds()
        try:
            return (yield)
        finally:
            self.timing.add("fixtures", cpu_seconds() - started)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        return (yield from self.fixtures())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item):
        return (yield from self.fixtures())

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item):
        started, wall = cpu_seconds(), time.perf_counter()
        try:
            return (yield)
        finally:
            times = item.stash.get(HYPOTHESIS_TIMES, None)
            times = {**times, "call_s": time.perf_counter() - wall} if times else None
            self.timing.add_call(cpu_seconds() - started, times)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[WORKER_OUTPUT] = self.timing.describe()
