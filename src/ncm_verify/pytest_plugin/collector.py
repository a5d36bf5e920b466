"""The evidence: what each test leaves where it ran (`item_evidence`, carried on its call report), and the
controller's `EvidenceCollector`, which merges every report into one `PropertyRecord` per node id, checks the
statistical budget and writes evidence.json at the session's end."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ncm_verify.evidence import (
    EVIDENCE_FILE,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_PROVIDED,
    Budget,
    Evidence,
    HypothesisSummary,
    Outcome,
    PropertyRecord,
)
from ncm_verify.harness import stats
from ncm_verify.harness.concept_checkpoint import describe_checkpoint
from ncm_verify.harness.hypothesis_internals import explicit_examples, generated_seed
from ncm_verify.harness.run_state import run_state
from ncm_verify.pytest_plugin import failures, timing
from ncm_verify.pytest_plugin.implementation import RecordingImplementation, implementation_facts
from ncm_verify.pytest_plugin.planning import claims_of, read_reuse, reused_entries
from ncm_verify.report.status import never_reaches_implementation

EVIDENCE_PROPERTY = "ncm_verify_evidence"
"""Key of the JSON string each call report carries in its ``user_properties``."""
STATISTICS = pytest.StashKey[HypothesisSummary]()
"""An item's `summarize_hypothesis_statistics`, left by the plugin's statistics callback."""
RECORDS_START = pytest.StashKey[int]()
"""How many chi-square records the run state held when the item's call began."""


# --- on the side that runs the test (a worker, or the only process) ---


def summarize_hypothesis_statistics(statistics: dict) -> HypothesisSummary:
    """Count the examples Hypothesis ran from its engine statistics.

    An example is a test case that ran to completion (status ``valid``, or
    ``interesting`` for a failure) outside the shrink and explain phases;
    ``invalid``/``overrun`` cases were rejected by ``assume`` or filters.
    """
    examples = invalid = failing = 0
    phases = {}
    for key, phase in statistics.items():
        if not key.endswith("-phase"):
            continue
        name = key[: -len("-phase")]
        statuses = [case.get("status") for case in phase.get("test-cases", [])]
        phases[name] = len(statuses)
        if name in ("shrink", "explain"):
            continue
        examples += sum(status in ("valid", "interesting") for status in statuses)
        failing += sum(status == "interesting" for status in statuses)
        invalid += sum(status in ("invalid", "overrun") for status in statuses)
    return HypothesisSummary(
        examples=examples,
        failing_examples=failing,
        invalid_examples=invalid,
        test_cases_per_phase=phases,
        stopped_because=statistics.get("stopped-because"),
    )


@dataclasses.dataclass
class CallEvidence:
    """What one test's call leaves on its report for the controller: the record's call-phase fields, the run's
    policy, and for a failure its kind, the claims and kernels of the failing example, a group's message."""

    calls: dict[str, dict]
    looked_up: list[str]
    claims: list[str]
    statistical_tests_per_example: int | None
    hypothesis: HypothesisSummary | None
    stats: list[dict]
    differences: list[dict]
    policy: dict
    failure_kind: str | None = None
    failure_claims: list[str] | None = None
    failure_kernels: list[str] = dataclasses.field(default_factory=list)
    failure_group: str | None = None

    def to_json(self) -> str:
        # shallow: `dataclasses.asdict` would deep-copy every chi-square record's counts first
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["hypothesis"] = self.hypothesis.to_json() if self.hypothesis else None
        return json.dumps(data, default=float)

    @classmethod
    def from_json(cls, text: str) -> CallEvidence:
        data = json.loads(text)
        return cls(**{**data, "hypothesis": HypothesisSummary.from_json(data["hypothesis"])})


def item_evidence(item, recorder: RecordingImplementation | None) -> CallEvidence:
    """What one test leaves for the report, gathered where it ran."""
    nodeid = item.nodeid
    state = run_state(item.config)
    start = item.stash.get(RECORDS_START, len(state.records))
    records = [r for r in state.records[start:] if r.get("test") == nodeid]
    differences = sorted((d for d in state.differences.values() if d["test"] == nodeid), key=lambda d: d["check"])
    for difference in differences:  # keep memory flat over a long run
        state.differences.pop(f"{nodeid}::{difference['check']}", None)
    test = getattr(item, "obj", None)
    hypothesis = item.stash.get(STATISTICS, None)
    if hypothesis is not None:
        explicit = explicit_examples(test)
        hypothesis = dataclasses.replace(
            hypothesis,
            explicit_examples=explicit,
            examples=(hypothesis.examples or 0) + explicit,
            generated_seed=generated_seed(test),
        )
    statistical = item.get_closest_marker("statistical")
    # a test that never asks for the implementation made no call into it: the suite's own check
    recorder = recorder if "impl" in getattr(item, "fixturenames", ()) else None
    return CallEvidence(
        calls=recorder.call_records() if recorder is not None else {},
        looked_up=sorted(recorder.looked_up) if recorder is not None else [],
        claims=claims_of(item),
        statistical_tests_per_example=statistical.kwargs.get("tests", 1) if statistical else None,
        hypothesis=hypothesis,
        stats=records,
        differences=differences,
        policy=state.policy.describe(),
    )


# --- the controller: merge the reports of every phase, write evidence.json ---


def skip_outcome(reason: str) -> Outcome:
    """A skip's outcome from its reason: a name the module lacks, a capability it declares it lacks, or a skip."""
    said = reason.removeprefix("Skipped: ")
    if said.startswith(NOT_PROVIDED):
        return Outcome.NOT_PROVIDED
    if said.startswith(INCONCLUSIVE):
        return Outcome.INCONCLUSIVE
    return Outcome.NOT_APPLICABLE if said.startswith(NOT_APPLICABLE) else Outcome.SKIPPED


class EvidenceCollector:
    """Controller-side plugin: one evidence entry per node id, written at session end."""

    def __init__(self, config, report_dir: Path, process_timing: timing.ProcessTiming):
        self.config = config
        self.report_dir = report_dir
        self.process_timing = process_timing
        self.entries: dict[str, PropertyRecord] = reused_entries(config)
        self.reuse = read_reuse(config)
        self.reused = len(self.entries)
        self.seen_policy: dict | None = None
        self.budget: Budget | None = None
        self.worker_timings: list[dict] = []
        self.first_failure_shown = False
        self.started = time.monotonic()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """An xdist worker's CPU seconds by part (`timing.ProcessTiming`), as it handed them over."""
        found = getattr(node, "workeroutput", {}).get(timing.WORKER_OUTPUT)
        if found is not None:
            self.worker_timings.append(found)

    def entry(self, report) -> PropertyRecord:
        if report.nodeid not in self.entries:
            self.entries[report.nodeid] = PropertyRecord(nodeid=report.nodeid, duration_s=0.0)
        return self.entries[report.nodeid]

    def take_call_evidence(self, entry: PropertyRecord, found: CallEvidence) -> None:
        entry.calls, entry.looked_up, entry.claims = found.calls, found.looked_up, found.claims
        entry.statistical_tests_per_example = found.statistical_tests_per_example
        entry.hypothesis, entry.stats, entry.differences = found.hypothesis, found.stats, found.differences
        if self.seen_policy is None:
            self.seen_policy = found.policy

    def pytest_runtest_logreport(self, report):
        entry = self.entry(report)
        if report.when == "call":
            entry.duration_s = round(report.duration, 6)
        found = None
        for key, value in report.user_properties:
            if key == EVIDENCE_PROPERTY:
                found = CallEvidence.from_json(value)
                self.take_call_evidence(entry, found)
        if report.skipped and hasattr(report, "wasxfail"):  # a strict xfail that failed: a known upstream bug
            entry.outcome = Outcome.XFAILED
            entry.xfail_reason = report.wasxfail
        elif report.skipped and entry.outcome == Outcome.PASSED:
            longrepr = report.longrepr
            entry.skip_reason = reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            entry.outcome = skip_outcome(reason)
        elif report.failed:
            kind = failures.report_kind(report, found.failure_kind if found else None)
            # a check that failed is a verdict; anything else raised is an error of the run
            entry.outcome = Outcome.FAILED if kind == failures.ASSERTION else Outcome.ERROR
            claims, kernels, group = (
                (found.failure_claims, found.failure_kernels, found.failure_group) if found else (None, [], None)
            )
            entry.failure = failures.report_failure(report, kind, claims, kernels, group)
            if not self.first_failure_shown and not never_reaches_implementation(entry):  # the suite's own: apart
                self.first_failure_shown = True
                self.show_first_failure(entry)

    def show_first_failure(self, entry: PropertyRecord) -> None:
        """Print the first failure that reached the module at once, labelled and with the line that reruns it; the
        run goes on, and its closing summary and report give every failure."""
        from ncm_verify.report.model import Failure
        from ncm_verify.report.status import reproduce_command, rerun_pythonpath
        from ncm_verify.report.terminal import failure_block

        failure = entry.failure
        assert failure is not None
        # the workers' plan (the controller of an xdist run collects nothing, so plans nothing itself)
        planned = self.policy()["planned_tests"]
        run = {"profile": os.environ.get("HYPOTHESIS_PROFILE", "dev"), "planned_tests": planned}
        run["impl"] = self.config.getoption("--impl")
        # the phase runs in the suite's folder with the caller's first on PYTHONPATH (run.subprocess_environment)
        caller = Path((os.environ.get("PYTHONPATH") or os.getcwd()).split(os.pathsep)[0])
        found = rerun_pythonpath(run["impl"], caller, self.config.rootpath)
        run["rerun_from"] = {"root": str(self.config.rootpath), "python": sys.executable, **found}
        block = failure_block(
            Failure(
                nodeid=entry.nodeid,
                claims=tuple(failure.claims or entry.claims),
                outcome=entry.outcome.value,
                kind=failure.kind,
                kernels=tuple(failure.kernels or ()),
                message=failure.message or "",
                falsifying_example=failure.falsifying_example,
                reproduce_failure=failure.reproduce_failure,
                seed=failure.seed,
                command=reproduce_command(entry, run),
                shrink_stopped=False,
                plot=None,
            ),
            None,
            None,
            "FIRST FAILURE",
        )
        seconds = time.monotonic() - self.started
        heading = f"ncm-verify: first failure, {seconds:.0f} s into the properties (the run goes on to its report):"
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write("\n")  # after the progress characters, which the reporter does not end
            for line in (heading, *block):
                terminal.write_line(line)
            terminal.flush()

    def policy(self) -> dict:
        if self.seen_policy is None and self.reused:  # nothing ran here: the reused run's policy is this run's
            return self.reuse["policy"]
        return self.seen_policy or (run_state(self.config).policy or stats.Policy()).describe()

    def budget_check(self, policy: dict) -> Budget:
        """Chi-square tests run vs planned; over plan with no failure fails the run."""
        planned = policy["planned_tests"]
        run = sum(len(e.stats) for e in self.entries.values())
        failing = sum(e.failing for e in self.entries.values())
        within = run <= planned
        if within:
            note = f"{run} chi-square tests run of {planned} planned"
        elif failing:
            note = (
                f"{run} chi-square tests run > {planned} planned; expected while "
                "Hypothesis shrinks a failure, so the failures decide this run"
            )
        else:
            note = (
                f"{run} chi-square tests run > {planned} planned with no failing property: the suite's plan did not "
                "count them all, so its family-wise false-failure budget does not hold and the run fails (a fault "
                "of the suite's plan, not of the module)"
            )
        return Budget(planned, run, within, not within and not failing, note)

    def pytest_sessionfinish(self, session, exitstatus):
        from ncm_verify.environment import describe_environment

        policy = self.policy()
        self.budget = budget = self.budget_check(policy)
        reused_plan = self.reuse["policy"]["planned_tests"] if self.reused else None
        if self.reused and policy["planned_tests"] != reused_plan:
            budget.run_failed_by_budget = True
            budget.note = (
                f"{policy['planned_tests']} chi-square tests planned here, but the reused reference run planned "
                f"{reused_plan}: the suite changed between the two runs, so its evidence cannot join this run's under "
                "one budget (not a fault of the module; `make verify` on the reference again, or CI=true, fixes it)"
            )
        if self.reused and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:  # every property was reused
            failing = any(e.failing for e in self.entries.values())
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if failing else pytest.ExitCode.OK
        if budget.run_failed_by_budget:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        document = Evidence(
            run_id=self.config.getoption("--ncm-run-id"),
            impl=self.config.getoption("--impl"),
            implementation=implementation_facts(self.config),
            checkpoint=describe_checkpoint(self.config.getoption("--ncm-model")),
            profile=os.environ.get("HYPOTHESIS_PROFILE", "dev"),
            exit_status=int(session.exitstatus),
            environment=describe_environment(),
            policy=policy,
            budget=budget,
            properties=[self.entries[nodeid] for nodeid in sorted(self.entries)],
            timing=self.timing(),
        )
        self.report_dir.mkdir(parents=True, exist_ok=True)
        path = self.report_dir / EVIDENCE_FILE
        path.write_text(json.dumps(document.to_json(), indent=1, default=float) + "\n", encoding="utf-8")

    def timing(self) -> dict[str, Any]:
        """Where this run's CPU time went: each process (the workers and this controller) by part, and the sum."""
        processes = [*self.worker_timings, self.process_timing.describe()]
        return {"processes": processes, "parts_cpu_s": timing.summed(processes), "unit": "CPU seconds"}

    def pytest_terminal_summary(self, terminalreporter):
        outcomes = [e.outcome for e in self.entries.values()]
        not_provided = outcomes.count(Outcome.NOT_PROVIDED)
        if not_provided:
            terminalreporter.write_line(f"ncm-verify: {not_provided} property runs need names the module lacks")
        not_applicable = outcomes.count(Outcome.NOT_APPLICABLE)
        if not_applicable:
            terminalreporter.write_line(
                f"ncm-verify: {not_applicable} property runs need what the module declares it cannot do"
            )
        if self.budget is None:
            return
        if self.reused:
            source = self.reuse["source"]
            terminalreporter.write_line(
                f"ncm-verify: {self.reused} properties reused from reference run {source['run_id']} ({source['ran']})"
            )
        terminalreporter.write_line(f"ncm-verify: {self.budget.note}")
        if self.budget.run_failed_by_budget:
            why = (
                "more chi-square tests than planned"
                if not self.budget.within_plan
                else "a plan unlike the reused run's"
            )
            terminalreporter.write_line(f"ncm-verify: run FAILED by the suite's statistical plan: {why}", red=True)
        terminalreporter.write_line(f"ncm-verify: evidence written to {self.report_dir / EVIDENCE_FILE}")
