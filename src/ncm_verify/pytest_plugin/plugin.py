"""pytest plugin: the implementation under test, the run's statistical policy, evidence.

Loaded through the ``pytest11`` entry point, so any pytest run in the
project's environment has ``--impl``, ``--ncm-report-dir`` and
``--ncm-inventory``. With a report folder, every test leaves its evidence on
its call report (``user_properties``), which pytest-xdist carries from the
workers to the controller; the controller writes ``evidence.json`` at the end.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ncm_verify.harness import stats
from ncm_verify.harness.concept_checkpoint import describe_checkpoint
from ncm_verify.harness.hypothesis_internals import generated_seed, settings_of
from ncm_verify.harness.kernels import SAMPLING_KERNELS
from ncm_verify.harness.run_state import RECORDS_FILE, install, run_state, uninstall
from ncm_verify.protocol import (
    DEFAULT_IMPLEMENTATION,
    NOT_APPLICABLE,
    NOT_PROVIDED,
    ImplementationError,
    RecordingImplementation,
    describe_implementation,
    lacked_capabilities,
    load_implementation,
    own_names,
)
from ncm_verify.pytest_plugin import expected, timing
from ncm_verify.report.ledger import THOROUGH_PROFILE, ledger_kernel_claims

EVIDENCE_FILE = "evidence.json"
EVIDENCE_SCHEMA = "ncm-verify/evidence/1"
EVIDENCE_PROPERTY = "ncm_verify_evidence"
"""Key of the JSON string each call report carries in its ``user_properties``."""
MAX_MESSAGE_CHARS = 4000

_STATISTICS = pytest.StashKey[dict]()
_RECORDS_START = pytest.StashKey[int]()
_COLLECTOR = pytest.StashKey["EvidenceCollector"]()
_REUSE = pytest.StashKey[dict]()
_TIMING = pytest.StashKey[timing.ProcessTiming]()


def pytest_addoption(parser):
    group = parser.getgroup("ncm-verify")
    group.addoption(
        "--impl",
        default=os.environ.get("NCM_VERIFY_IMPL", DEFAULT_IMPLEMENTATION),
        help="module providing the kernels under test (default: %(default)s)",
    )
    group.addoption(
        "--ncm-model",
        default=os.environ.get("NCM_VERIFY_MODEL") or None,
        help="checkpoint the model-level properties judge on path (b), loaded by the implementation's "
        "load_concept_model (default: fixtures/ncm_concept_tiny.safetensors)",
    )
    group.addoption(
        "--ncm-report-dir",
        default=None,
        help="folder for the statistical records and evidence of this run",
    )
    group.addoption(
        "--ncm-planned-tests",
        type=int,
        default=None,
        help="fix the chi-square tests the policy plans (alpha and n follow): reproduces one test of a larger run",
    )
    group.addoption(
        "--ncm-run-id",
        default=os.environ.get("NCM_VERIFY_RUN_ID"),
        help="stamp evidence.json with this run id, so that a report never reads another run's evidence",
    )
    group.addoption(
        "--ncm-stop-when-caught",
        action="store_true",
        help="stop at the first property that fails by assertion (the planted-bug sweep needs only one)",
    )
    group.addoption(
        "--ncm-reuse",
        default=None,
        help="JSON of reference evidence to carry into this run; its properties are deselected, not rerun",
    )
    group.addoption(
        "--ncm-inventory",
        default=None,
        help="write the collected tests with their claim markers to this JSON file",
    )


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    process_timing = config.stash[_TIMING] = timing.ProcessTiming("worker" if _is_worker(config) else "controller")
    config.pluginmanager.register(timing.TimingHooks(process_timing), "ncm-verify-timing")
    config.pluginmanager.register(expected, "ncm-verify-expected")
    if config.getoption("--impl") != DEFAULT_IMPLEMENTATION and not _is_worker(config):
        try:  # one message and no test run, rather than one traceback per property
            load_implementation(config.getoption("--impl"))
        except ImplementationError as error:
            raise pytest.UsageError(str(error)) from None
    report_dir = config.getoption("--ncm-report-dir")
    state = install(config, report_dir=Path(report_dir).resolve() if report_dir else None)
    state.kernels = provided_kernels(config.getoption("--impl"))
    if report_dir:
        if not _is_worker(config):
            records = Path(report_dir).resolve() / RECORDS_FILE
            records.parent.mkdir(parents=True, exist_ok=True)
            records.unlink(missing_ok=True)
            # a run that dies before its end must not leave an older run's evidence behind
            (Path(report_dir) / EVIDENCE_FILE).unlink(missing_ok=True)
            collector = EvidenceCollector(config, Path(report_dir))
            config.stash[_COLLECTOR] = collector
            config.pluginmanager.register(collector, "ncm-verify-evidence")


def provided_kernels(argument: str) -> tuple[str, ...] | None:
    """The sampling kernels the module provides itself, when that is not all (None: all, or it does not load).

    A kernel it re-exports from the reference gives no evidence (its runs read 'not provided'), so properties
    over every kernel draw among its own.
    """
    try:
        module = load_implementation(argument)
    except ImplementationError:
        return None
    own = own_names(module)
    every = tuple(kernel.name for kernel in SAMPLING_KERNELS)
    provided = tuple(k.name for k in SAMPLING_KERNELS if own.get(k.verify))
    return provided if provided and provided != every else None


def pytest_unconfigure(config):
    uninstall(config)


def planned_tests_of(item) -> int:
    """Chi-square tests one collected property will run at most (0 unless statistical)."""
    from hypothesis import settings

    marker = item.get_closest_marker("statistical")
    if marker is None:
        return 0
    test = getattr(item, "obj", None)
    test_settings = settings_of(test) or settings.default
    explicit = len(getattr(test, "hypothesis_explicit_examples", ()))
    return marker.kwargs.get("tests", 1) * (test_settings.max_examples + explicit)


def planned_statistical_tests(items) -> int:
    """Chi-square tests the collected statistical properties will run at most."""
    return max(sum(planned_tests_of(item) for item in items), 1)


def balanced_order(items: list, workers: int) -> list:
    """Statistical properties (the long ones: each example samples 10-100k outcomes) first, largest plan first,
    dealt in turn to the `workers` contiguous blocks xdist's work stealing first hands out (the first worker gets
    n // workers of the pending list, the next n // (workers - 1) of the rest, ...), so that the longest start at
    once on different workers instead of queueing behind one another."""
    ranked = sorted(items, key=lambda item: -planned_tests_of(item))  # stable: the rest keep collection order
    sizes, left = [], len(items)
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    blocks: list[list] = [[] for _ in sizes]
    for rank, item in enumerate(ranked):
        free = [b for b in range(workers) if len(blocks[b]) < sizes[b]]
        blocks[min(free, key=lambda b: (b - rank) % workers)].append(item)
    return [item for block in blocks for item in block]


THOROUGH_ONLY = "thorough_only"
"""Properties marked so run under `THOROUGH_PROFILE` alone (the ledger's `thorough_properties`)."""


def pytest_collection_modifyitems(session, config, items):
    planned = config.getoption("--ncm-planned-tests")
    if planned is not None and planned < 1:
        raise pytest.UsageError(f"--ncm-planned-tests: must be a positive count, got {planned}")
    inventory = config.getoption("--ncm-inventory")
    if inventory:
        Path(inventory).write_text(json.dumps(collected_inventory(items), indent=1), encoding="utf-8")
    if os.environ.get("HYPOTHESIS_PROFILE", "dev") != THOROUGH_PROFILE:  # before planning: not in this run's budget
        thorough = [item for item in items if item.get_closest_marker(THOROUGH_ONLY)]
        config.hook.pytest_deselected(items=thorough)
        items[:] = [item for item in items if item not in thorough]
    run_state(config).policy = stats.Policy(planned_tests=planned or planned_statistical_tests(items))
    reused = reused_entries(config)
    if reused:  # after the policy is planned over every property, so alpha and n are those of a full run
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in reused])
        items[:] = [item for item in items if item.nodeid not in reused]
    if _is_worker(config) and getattr(config.option, "dist", None) == "worksteal":  # every worker orders alike
        items[:] = balanced_order(items, int(config.workerinput["workercount"]))


def read_reuse(config) -> dict:
    """What `--ncm-reuse` carries: {"source": the reference run, "policy": its policy, "properties": entries}.

    Read once per session: collection and the evidence collector both ask.
    """
    if _REUSE not in config.stash:
        path = config.getoption("--ncm-reuse")
        config.stash[_REUSE] = json.loads(Path(path).read_text(encoding="utf-8")) if path else {"properties": []}
    return config.stash[_REUSE]


def reused_entries(config) -> dict[str, dict]:
    """Node id -> the reference evidence carried into this run, stamped with the run it came from."""
    reuse = read_reuse(config)
    return {entry["nodeid"]: {**entry, "reused": reuse["source"]} for entry in reuse["properties"]}


def claims_of(item) -> list[str]:
    """The claim ids of the item's closest ``@pytest.mark.claim``, sorted, once each.

    A property's own marker replaces its module's: a protocol property (C11) may sit among distribution ones.
    """
    marker = item.get_closest_marker("claim")
    return sorted({str(arg) for arg in marker.args}) if marker else []


def property_id(nodeid: str) -> str:
    """A node id without its parametrization: the form ledger.json lists."""
    return nodeid.split("[", 1)[0]


def collected_inventory(items) -> list[dict]:
    """What ``--ncm-inventory`` writes: each collected test with its markers."""
    return [
        {
            "nodeid": item.nodeid,
            "property": property_id(item.nodeid),
            "claims": claims_of(item),
            "statistical": item.get_closest_marker("statistical") is not None,
        }
        for item in items
    ]


@pytest.fixture(scope="session")
def impl(request):
    """The implementation module under test (``--impl``), seen through a recorder of its calls."""
    recorder = RecordingImplementation(load_implementation(request.config.getoption("--impl")))
    run_state(request.config).recorder = recorder
    return recorder


def pytest_runtest_setup(item):
    """A property marked ``needs(...)`` that the module declares it cannot take is not applicable, not run."""
    marker = item.get_closest_marker("needs")
    if marker is None:
        return
    try:
        lacked = lacked_capabilities(load_implementation(item.config.getoption("--impl")), marker.args)
    except ValueError as error:
        raise pytest.UsageError(f"{item.nodeid}: {error}") from None
    if lacked:
        pytest.skip(f"{NOT_APPLICABLE} {'; '.join(lacked.values())}")


def pytest_report_header(config):
    checkpoint = describe_checkpoint(config.getoption("--ncm-model"))
    return [
        f"ncm-verify: implementation under test {config.getoption('--impl')}",
        f"ncm-verify: checkpoint {checkpoint['path']} sha256 {checkpoint['sha256']}",
    ]


# --- evidence on the side that runs the test (a worker, or the only process) ---


def summarize_hypothesis_statistics(statistics: dict) -> dict:
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
    return {
        "examples": examples,
        "failing_examples": failing,
        "invalid_examples": invalid,
        "test_cases_per_phase": phases,
        "stopped_because": statistics.get("stopped-because"),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """The harness files what a test records under its node id, set here for its set-up, call and teardown."""
    state = run_state(item.config)
    state.test = item.nodeid
    try:
        yield
    finally:
        state.test = ""


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    """Chain onto Hypothesis's statistics callback (this wrapper runs inside its own)."""
    from hypothesis.statistics import collector

    outer = collector.value

    def keep(statistics):
        item.stash[_STATISTICS] = summarize_hypothesis_statistics(statistics)
        item.stash[timing.HYPOTHESIS_TIMES] = timing.hypothesis_times(statistics)
        if outer is not None:
            outer(statistics)

    state = run_state(item.config)
    item.stash[_RECORDS_START] = len(state.records)
    if state.recorder is not None:
        state.recorder.begin_test()
    restore = mark_examples(item)
    try:
        with collector.with_value(keep):
            yield
    finally:
        restore()


def mark_examples(item):
    """Tell the recorder where each Hypothesis example starts, so a failure names the kernels its example called.

    Hypothesis calls ``test.hypothesis.inner_test`` for every example, the last time for the failing one.
    Returns the function that undoes the wrapping.
    """
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    recorder = run_state(item.config).recorder
    if handle is None or recorder is None:
        return lambda: None
    inner = handle.inner_test
    # Hypothesis seeds a derandomized test from the source of `inner_test`, this wrapper: its text is kept as it
    # was (loop and name included) so that every property draws the examples it drew before.
    _RECORDER = [recorder]

    def example(*args, **kwargs):
        for recorder in _RECORDER:
            recorder.begin_example()
        return inner(*args, **kwargs)

    handle.inner_test = example

    def restore():
        handle.inner_test = inner

    return restore


ASSERTION_KINDS = ("AssertionError", "Failed")
"""Exceptions that mean a property's check failed; anything else is an error of the run, not a verdict."""


def failure_kind(excinfo) -> str:
    """'assertion' when a check of the property failed (in any example of a group), else the exception type."""
    error = excinfo.value
    members = getattr(error, "exceptions", None) or [error]
    kinds = {type(member).__name__ for member in members}
    if any(isinstance(member, AssertionError) or type(member).__name__ in ASSERTION_KINDS for member in members):
        return "assertion"
    return ", ".join(sorted(kinds))


def group_message(error: BaseException) -> str | None:
    """Each failure of a Hypothesis group with its own message and falsifying example; None for one failure.

    The group's own text is one line ("found 2 distinct failures"): the checks' messages live in its members.
    """
    members = getattr(error, "exceptions", None)
    if not members:
        return None
    parts = [f"Hypothesis found {len(members)} distinct failures."]
    for number, member in enumerate(members, 1):
        notes = "\n".join(getattr(member, "__notes__", ()))
        parts.append(f"Failure {number} of {len(members)}: {type(member).__name__}: {member}\n{notes}".rstrip())
    return "\n\n".join(parts)[:MAX_MESSAGE_CHARS]


def attributed_claims(claims: list[str], names) -> list[str] | None:
    """The item's claims that the kernels of the failing example bear on (None: all of its claims)."""
    kernel_claims = ledger_kernel_claims()
    touched = sorted({kernel_claims[name] for name in names if name in kernel_claims} & set(claims))
    return touched or None


def item_evidence(item) -> dict:
    """What one test leaves for the report, gathered where it ran."""
    nodeid = item.nodeid
    state = run_state(item.config)
    start = item.stash.get(_RECORDS_START, len(state.records))
    records = [r for r in state.records[start:] if r.get("test") == nodeid]
    differences = sorted((d for d in state.differences.values() if d["test"] == nodeid), key=lambda d: d["check"])
    for difference in differences:  # keep memory flat over a long run
        state.differences.pop(f"{nodeid}::{difference['check']}", None)
    test = getattr(item, "obj", None)
    hypothesis = item.stash.get(_STATISTICS, None)
    if hypothesis is not None:
        hypothesis = dict(hypothesis)
        explicit = len(getattr(test, "hypothesis_explicit_examples", ()))
        hypothesis["explicit_examples"] = explicit
        hypothesis["examples"] += explicit
        hypothesis["generated_seed"] = generated_seed(test)
    statistical = item.get_closest_marker("statistical")
    # a test that never asks for the implementation made no call into it: the suite's own check
    recorder = state.recorder if "impl" in getattr(item, "fixturenames", ()) else None
    return {
        "calls": recorder.call_records() if recorder is not None else {},
        "looked_up": sorted(recorder.looked_up) if recorder is not None else [],
        "claims": claims_of(item),
        "statistical_tests_per_example": statistical.kwargs.get("tests", 1) if statistical else None,
        "hypothesis": hypothesis,
        "stats": records,
        "differences": differences,
        "policy": state.policy.describe(),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    recorder = run_state(item.config).recorder
    if report.when == "call" and run_state(item.config).report_dir is not None:
        found = item_evidence(item)
        if report.failed and call.excinfo is not None:
            names = recorder.example_names if recorder is not None else ()
            found["failure_kind"] = failure_kind(call.excinfo)
            if found["failure_kind"] == "assertion" and item.config.getoption("--ncm-stop-when-caught"):
                item.session.shouldfail = "a property failed by assertion: the planted bug is caught"
            found["failure_claims"] = attributed_claims(found["claims"], names)
            found["failure_kernels"] = sorted(names)
            found["failure_group"] = group_message(call.excinfo.value)
        report.user_properties.append((EVIDENCE_PROPERTY, json.dumps(found, default=float)))


# --- the controller: merge the reports of every phase, write evidence.json ---

_FALSIFYING = re.compile(r"^(?:Falsifying (?:explicit )?example|Failing test case):.*?(?:^\)$|\Z)", re.M | re.S)
_HYPOTHESIS_TAIL = re.compile(r"^(?:Falsifying|Failing test case:|You can reproduce)", re.M)
"""Where Hypothesis's own lines start in a crash message; the report shows them apart."""
_REPRODUCE = re.compile(r"@reproduce_failure\(.*?\)")
_SEED = re.compile(r"@seed\((\d+)\)|--hypothesis-seed=(\d+)")


def failure_details(text: str) -> dict:
    """The falsifying example, ``@reproduce_failure`` line and seed in a failure's text (the first, in a group)."""
    falsifying = _FALSIFYING.search(text)
    reproduce = _REPRODUCE.search(text)
    seed = _SEED.search(text)
    return {
        "falsifying_example": falsifying.group(0).strip() if falsifying else None,
        "reproduce_failure": reproduce.group(0) if reproduce else None,
        "seed": next((g for g in seed.groups() if g), None) if seed else None,
    }


def report_text(report) -> str:
    """The crash message first, then the traceback (its ``E   `` prefixes removed), then sections."""
    sections = "\n".join(content for _, content in getattr(report, "sections", ()))
    traceback = re.sub(r"^E {1,7}", "", report.longreprtext, flags=re.M)
    return f"{crash_message(report)}\n{traceback}\n{sections}"


def crash_message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else report.longreprtext
    return message[:MAX_MESSAGE_CHARS]


def implementation_facts(argument: str) -> dict | None:
    """The module under test as the report names it; None if it cannot be loaded here."""
    try:
        return describe_implementation(load_implementation(argument), argument)
    except ImplementationError as error:
        return {"argument": argument, "error": str(error)}


class EvidenceCollector:
    """Controller-side plugin: one evidence entry per node id, written at session end."""

    def __init__(self, config, report_dir: Path):
        self.config = config
        self.report_dir = report_dir
        self.entries: dict[str, dict] = reused_entries(config)
        self.reuse = read_reuse(config)
        self.reused = len(self.entries)
        self.budget: dict | None = None
        self.worker_timings: list[dict] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """An xdist worker's CPU seconds by part (`timing.ProcessTiming`), as it handed them over."""
        found = getattr(node, "workeroutput", {}).get(timing.WORKER_OUTPUT)
        if found is not None:
            self.worker_timings.append(found)

    def entry(self, report) -> dict:
        return self.entries.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                "property": property_id(report.nodeid),
                "outcome": "passed",
                "duration_s": 0.0,
                "claims": [],
                "hypothesis": None,
                "stats": [],
                "differences": [],
                "failure": None,
                "skip_reason": None,
            },
        )

    def pytest_runtest_logreport(self, report):
        entry = self.entry(report)
        if report.when == "call":
            entry["duration_s"] = round(report.duration, 6)
        for key, value in report.user_properties:
            if key == EVIDENCE_PROPERTY:
                entry.update(json.loads(value))
        if report.skipped and hasattr(report, "wasxfail"):  # a strict xfail that failed: a known upstream bug
            entry["outcome"] = "xfailed"
            entry["xfail_reason"] = report.wasxfail
        elif report.skipped and entry["outcome"] == "passed":
            longrepr = report.longrepr
            entry["skip_reason"] = reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            said = reason.removeprefix("Skipped: ")
            missing_name, not_applicable = said.startswith(NOT_PROVIDED), said.startswith(NOT_APPLICABLE)
            entry["outcome"] = "not provided" if missing_name else "not applicable" if not_applicable else "skipped"
        elif report.failed:
            kind = entry.pop("failure_kind", None) if report.when == "call" else "error in " + report.when
            if kind is None and str(report.longrepr).startswith("[XPASS(strict)]"):
                kind = "assertion"  # a known upstream bug no longer shows: a verdict, so the run tells us
            # a check that failed is a verdict; anything else raised is an error of the run
            entry["outcome"] = "failed" if kind == "assertion" else "error"
            group = entry.pop("failure_group", None)
            entry["failure"] = {
                "phase": report.when,
                "kind": kind,
                "claims": entry.pop("failure_claims", None),
                "kernels": entry.pop("failure_kernels", []),
                "message": group or _HYPOTHESIS_TAIL.split(crash_message(report), 1)[0].strip(),
                **failure_details(group or report_text(report)),
            }

    def policy(self) -> dict:
        seen = [e.pop("policy") for e in self.entries.values() if "policy" in e]
        if not seen and self.reused:  # nothing ran here: the reused run's policy is this run's
            return self.reuse["policy"]
        return seen[0] if seen else (run_state(self.config).policy or stats.Policy()).describe()

    def budget_check(self, policy: dict) -> dict:
        """Chi-square tests run vs planned; over plan with no failure fails the run."""
        run = sum(len(e["stats"]) for e in self.entries.values())
        failures = sum(e["outcome"] in ("failed", "error") for e in self.entries.values())
        within = run <= policy["planned_tests"]
        if within:
            note = f"{run} chi-square tests run of {policy['planned_tests']} planned"
        elif failures:
            note = (
                f"{run} chi-square tests run > {policy['planned_tests']} planned; expected while "
                "Hypothesis shrinks a failure, so the failures decide this run"
            )
        else:
            note = (
                f"{run} chi-square tests run > {policy['planned_tests']} planned with no failing "
                "property: the family-wise budget was overspent, so this run fails"
            )
        return {
            "planned_tests": policy["planned_tests"],
            "chi_square_tests_run": run,
            "within_plan": within,
            "run_failed_by_budget": not within and not failures,
            "note": note,
        }

    def pytest_sessionfinish(self, session, exitstatus):
        from ncm_verify.environment import describe_environment

        policy = self.policy()
        self.budget = self.budget_check(policy)
        if self.reused and policy["planned_tests"] != self.reuse["policy"]["planned_tests"]:
            self.budget.update(
                run_failed_by_budget=True,
                note=f"{policy['planned_tests']} chi-square tests planned, but the reused reference run planned "
                f"{self.reuse['policy']['planned_tests']}: its evidence is not this run's",
            )
        if self.reused and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:  # every property was reused
            failing = any(e["outcome"] in ("failed", "error") for e in self.entries.values())
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if failing else pytest.ExitCode.OK
        if self.budget["run_failed_by_budget"]:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        document = {
            "schema": EVIDENCE_SCHEMA,
            "run_id": self.config.getoption("--ncm-run-id"),
            "impl": self.config.getoption("--impl"),
            "implementation": implementation_facts(self.config.getoption("--impl")),
            "checkpoint": describe_checkpoint(self.config.getoption("--ncm-model")),
            "profile": os.environ.get("HYPOTHESIS_PROFILE", "dev"),
            "exit_status": int(session.exitstatus),
            "environment": describe_environment(),
            "policy": policy,
            "budget": self.budget,
            "properties": [self.entries[nodeid] for nodeid in sorted(self.entries)],
            "timing": self.timing(),
        }
        self.report_dir.mkdir(parents=True, exist_ok=True)
        path = self.report_dir / EVIDENCE_FILE
        path.write_text(json.dumps(document, indent=1, default=float) + "\n", encoding="utf-8")

    def timing(self) -> dict:
        """Where this run's CPU time went: each process (the workers and this controller) by part, and the sum."""
        processes = [*self.worker_timings, self.config.stash[_TIMING].describe()]
        return {"processes": processes, "parts_cpu_s": timing.summed(processes), "unit": "CPU seconds"}

    def pytest_terminal_summary(self, terminalreporter):
        not_provided = sorted(e["nodeid"] for e in self.entries.values() if e["outcome"] == "not provided")
        if not_provided:
            terminalreporter.write_line(f"ncm-verify: {len(not_provided)} property runs need names the module lacks")
        not_applicable = [e for e in self.entries.values() if e["outcome"] == "not applicable"]
        if not_applicable:
            terminalreporter.write_line(
                f"ncm-verify: {len(not_applicable)} property runs need what the module declares it cannot do"
            )
        if self.budget is None:
            return
        if self.reused:
            source = self.reuse["source"]
            terminalreporter.write_line(
                f"ncm-verify: {self.reused} properties reused from reference run {source['run_id']} ({source['ran']})"
            )
        terminalreporter.write_line(f"ncm-verify: {self.budget['note']}")
        if self.budget["run_failed_by_budget"]:
            terminalreporter.write_line("ncm-verify: run FAILED: statistical budget overspent", red=True)
        terminalreporter.write_line(f"ncm-verify: evidence written to {self.report_dir / EVIDENCE_FILE}")
