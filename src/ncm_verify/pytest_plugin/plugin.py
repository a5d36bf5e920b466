"""pytest plugin: the implementation under test, the run's statistical policy, evidence. Hooks and options only;
each job lives in a module of its own, as pytest-benchmark splits its plugin:

- `implementation`: the module under test, loaded once per session, and the recorder of its calls;
- `planning`: the chi-square tests planned, deselection (thorough-only, reused), xdist order, the inventory;
- `failures`: a failed check (a verdict) or an error of the run, and what reproduces it;
- `collector`: each test's evidence, merged by the controller into evidence.json with the budget check;
- `timing`: where each process's CPU time goes.

Loaded through the ``pytest11`` entry point, so any pytest run in the project's environment has ``--impl``,
``--ncm-report-dir`` and ``--ncm-inventory``. With a report folder, every test leaves its evidence on its call
report (``user_properties``), which pytest-xdist carries from the workers to the controller; the controller writes
``evidence.json`` at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ncm_verify.evidence import EVIDENCE_FILE, NOT_APPLICABLE, RECORDS_FILE
from ncm_verify.harness import stats
from ncm_verify.harness.concept_checkpoint import describe_checkpoint, judged_line
from ncm_verify.harness.hypothesis_internals import statistics_reported_to
from ncm_verify.harness.run_state import install, run_state, uninstall
from ncm_verify.mlx_jit import remove_if_stale
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, ImplementationError, lacked_capabilities
from ncm_verify.pytest_plugin import collector, expected, failures, planning, timing
from ncm_verify.pytest_plugin.implementation import (
    RecordingImplementation,
    implementation,
    loaded_or_error,
    mark_examples,
    provided_kernels,
)

_TIMING = pytest.StashKey[timing.ProcessTiming]()
_RECORDER = pytest.StashKey[RecordingImplementation]()
"""The ``impl`` fixture's recorder, once a test asked for it (one per session)."""


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
        help="stop at the first property that fails by assertion (the planted-bug sweep needs only one); "
        "exact properties run before sampled ones",
    )
    group.addoption(
        "--ncm-first",
        action="append",
        default=[],
        help="with --ncm-stop-when-caught: this node, property or file runs before the others (repeatable, in "
        "order): the sweep's likeliest catch of a planted bug",
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
    if not _is_worker(config):
        remove_if_stale()  # g++ would read a precompiled MLX preamble whatever MLX's headers now say
    process_timing = config.stash[_TIMING] = timing.ProcessTiming("worker" if _is_worker(config) else "controller")
    config.pluginmanager.register(timing.TimingHooks(process_timing), "ncm-verify-timing")
    config.pluginmanager.register(expected, "ncm-verify-expected")
    module = loaded_or_error(config)
    if isinstance(module, ImplementationError) and config.getoption("--impl") != DEFAULT_IMPLEMENTATION:
        if not _is_worker(config):  # one message and no test run, rather than one traceback per property
            raise pytest.UsageError(str(module))
    report_dir = config.getoption("--ncm-report-dir")
    state = install(config, report_dir=Path(report_dir).resolve() if report_dir else None)
    state.kernels = provided_kernels(module)
    if report_dir and not _is_worker(config):
        records = Path(report_dir).resolve() / RECORDS_FILE
        records.parent.mkdir(parents=True, exist_ok=True)
        records.unlink(missing_ok=True)
        # a run that dies before its end must not leave an older run's evidence behind
        (Path(report_dir) / EVIDENCE_FILE).unlink(missing_ok=True)
        evidence = collector.EvidenceCollector(config, Path(report_dir), process_timing)
        config.pluginmanager.register(evidence, "ncm-verify-evidence")


def pytest_unconfigure(config):
    uninstall(config)


def pytest_collection_modifyitems(session, config, items):
    """Plan the policy over what this profile runs, then drop what the reference's evidence carries, then order."""
    planned = config.getoption("--ncm-planned-tests")
    if planned is not None and planned < 1:
        raise pytest.UsageError(f"--ncm-planned-tests: must be a positive count, got {planned}")
    inventory = config.getoption("--ncm-inventory")
    if inventory:
        Path(inventory).write_text(json.dumps(planning.collected_inventory(items), indent=1), encoding="utf-8")
    planning.deselect(config, items, planning.thorough_only(items))  # before planning: not in this run's budget
    run_state(config).policy = stats.Policy(planned_tests=planned or planning.planned_statistical_tests(items))
    reused = planning.reused_entries(config)
    # after the policy is planned over every property, so alpha and n are those of a full run
    planning.deselect(config, items, [item for item in items if item.nodeid in reused])
    # a port's run shows its first failure early: exact properties (seconds each) before sampled ones
    port = config.getoption("--impl") != DEFAULT_IMPLEMENTATION
    if port:  # an experiment never calls the module: its finding is the reference run's, never a port's failure
        planning.deselect(config, items, planning.experiments(items))
    if config.getoption("--ncm-stop-when-caught"):
        items[:] = planning.named_first(planning.exact_first(items), config.getoption("--ncm-first"))
    elif port:
        items[:] = planning.exact_first(items)
    if _is_worker(config) and getattr(config.option, "dist", None) == "worksteal":  # every worker orders alike
        items[:] = planning.balanced_order(items, int(config.workerinput["workercount"]), exact_first=port)


@pytest.fixture(scope="session")
def impl(request):
    """The implementation module under test (``--impl``), seen through a recorder of its calls."""
    recorder = request.config.stash[_RECORDER] = RecordingImplementation(implementation(request.config))
    return recorder


def pytest_runtest_setup(item):
    """A property marked ``needs(...)`` that the module declares it cannot take is not applicable, not run."""
    marker = item.get_closest_marker("needs")
    if marker is None:
        return
    try:
        lacked = lacked_capabilities(implementation(item.config), marker.args)
    except ValueError as error:
        raise pytest.UsageError(f"{item.nodeid}: {error}") from None
    if lacked:
        pytest.skip(f"{NOT_APPLICABLE} {'; '.join(lacked.values())}")


def pytest_report_header(config):
    checkpoint = describe_checkpoint(config.getoption("--ncm-model"))
    return [
        f"ncm-verify: implementation under test {config.getoption('--impl')}",
        f"ncm-verify: checkpoints {judged_line(checkpoint)}",
    ]


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
    """Keep Hypothesis's statistics of the call (this wrapper runs inside Hypothesis's own callback)."""

    def keep(statistics):
        item.stash[collector.STATISTICS] = collector.summarize_hypothesis_statistics(statistics)
        item.stash[timing.HYPOTHESIS_TIMES] = timing.hypothesis_times(statistics)

    item.stash[collector.RECORDS_START] = len(run_state(item.config).records)
    recorder = item.config.stash.get(_RECORDER, None)
    if recorder is not None:
        recorder.begin_test()
    restore = mark_examples(item, recorder)
    try:
        with statistics_reported_to(keep):
            yield
    finally:
        restore()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and run_state(item.config).report_dir is not None:
        recorder = item.config.stash.get(_RECORDER, None)
        found = collector.item_evidence(item, recorder)
        if report.failed and call.excinfo is not None:
            names = recorder.example_names if recorder is not None else ()
            found.failure_kind = failures.failure_kind(call.excinfo)
            if found.failure_kind == failures.ASSERTION and item.config.getoption("--ncm-stop-when-caught"):
                item.session.shouldfail = "a property failed by assertion: the planted bug is caught"
            found.failure_claims = failures.attributed_claims(found.claims, names)
            found.failure_kernels = sorted(names)
            found.failure_group = failures.group_message(call.excinfo.value)
        report.user_properties.append((collector.EVIDENCE_PROPERTY, found.to_json()))
