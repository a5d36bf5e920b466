"""The `make verify` orchestrator (run.py): early stops, phases, run.json, the self-test cache, port runs and reuse."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from synthetic import PASSING_SELFTESTS, POLICY, chi_square_record, node

from ncm_verify.cli import main
from ncm_verify.evidence import Phase, PropertyRecord, files
from ncm_verify.report import document as doc
from ncm_verify.report import status as claim_status


def test_a_misspelt_implementation_stops_the_run_before_any_phase_saying_the_last_report_is_unchanged(tmp_path, capsys):
    from ncm_verify import run

    (tmp_path / files.VERIFY_JSON).write_text("{}")
    assert run.verify("ncm_verify.mutants.ratio_invrted", "ci", tmp_path, 1) == 2
    error = capsys.readouterr().err
    assert error.count("cannot import") == 1 and "Did you mean 'ncm_verify.mutants.ratio_inverted'?" in error
    assert f"the report in {tmp_path} is the previous run's, unchanged" in error
    assert (tmp_path / files.VERIFY_JSON).read_text() == "{}"


def test_a_requirement_naming_no_claim_or_family_stops_the_run_listing_both(tmp_path, capsys):
    from ncm_verify import run

    assert main(["verify", "--reports", str(tmp_path), "--require", "C5,treeverification", "--require", "C55"]) == 2
    error = capsys.readouterr().err
    assert "require: no claim or protocol family 'C55'" in error and "families: SpeculativeKernels" in error
    assert run.check_required(["C5", "treeverification"]) == ["C5", "TreeVerification"]


def test_an_unknown_profile_stops_the_run_with_the_profiles_there_are(tmp_path, capsys):
    from ncm_verify import run

    assert run.verify("ncm_verify.reference", "nonsense", tmp_path, 1) == 2
    assert "profile: no Hypothesis profile 'nonsense'; choose one of" in capsys.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing written"


@pytest.fixture
def fake_phases(monkeypatch, passing, ledger, tmp_path):
    """Phases that leave passing evidence and self-test files instead of running pytest; counts self-test runs.

    The cache is the test's own, never the checkout's.
    """
    from ncm_verify import run

    monkeypatch.setattr(run, "DEFAULT_CACHE", tmp_path / "cache")
    ran = []

    def fake(name, step, command, env, log=None):
        if name == "properties":
            folder = Path(next(a for a in command if a.startswith("--ncm-report-dir=")).split("=", 1)[1])
            run_id = next(a for a in command if a.startswith("--ncm-run-id=")).split("=", 1)[1]
            (folder / files.EVIDENCE_FILE).write_text(json.dumps({**passing, "run_id": run_id}))
        else:
            ran.append(name)
            folder = Path(next(a for a in command if a.startswith("--ncm-selftest-dir=")).split("=", 1)[1])
            for part, data in PASSING_SELFTESTS.items():
                (folder / f"{part}.json").write_text(json.dumps(data))
        return Phase(name, 0, 0.0)

    monkeypatch.setattr(run, "run_phase", fake)
    monkeypatch.setattr(run, "suite_key", lambda: "k1")
    monkeypatch.setattr(
        run, "ledger_against_run", lambda reports, selected=False: []
    )  # the synthetic ledger is not this repository's
    monkeypatch.setattr(doc, "read_ledger", lambda path=None: (ledger, []))
    return ran


def test_the_self_tests_run_once_then_are_reused_until_ci_asks_for_a_rerun(fake_phases, tmp_path, monkeypatch):
    from ncm_verify import run

    monkeypatch.delenv("CI", raising=False)
    assert run.verify("ncm_verify.reference", "ci", tmp_path, 1) == 0
    first = json.loads((tmp_path / files.VERIFY_JSON).read_text())
    assert first["run_facts"]["selftests"]["reused"] is False and len(fake_phases) == 2
    assert run.verify("ncm_verify.reference", "ci", tmp_path, 1) == 0
    second = json.loads((tmp_path / files.VERIFY_JSON).read_text())
    assert second["run_facts"]["selftests"] == {**first["run_facts"]["selftests"], "reused": True}
    assert second["run_facts"]["run_id"] != first["run_facts"]["run_id"] and len(fake_phases) == 2
    monkeypatch.setenv("CI", "true")
    assert run.verify("ncm_verify.reference", "ci", tmp_path, 1) == 0
    assert len(fake_phases) == 4


def test_a_run_that_failed_only_through_a_phase_rebuilds_with_the_same_verdict_reasons_and_exit_status(
    fake_phases, tmp_path, monkeypatch
):
    """A teeth self-test that fails (e.g. a power check) leaves the self-test files passing beside it: only its
    phase's exit status says so, and the rebuild must read it as the run did."""
    from ncm_verify import run

    fake = run.run_phase

    def teeth_fail(name, step, command, env, log=None):
        result = fake(name, step, command, env, log)
        return dataclasses.replace(result, exit_status=1) if name == "calibration and power" else result

    monkeypatch.setattr(run, "run_phase", teeth_fail)
    monkeypatch.delenv("CI", raising=False)
    reports = tmp_path / "r"
    ran = run.verify("ncm_verify.reference", "ci", reports, 1)
    written = (reports / files.VERIFY_JSON).read_bytes()
    verdict = json.loads(written)["run"]
    assert ran == 1 == verdict["exit_status"], verdict
    assert verdict["reasons"] == [
        "phases: phase calibration and power: a self-test failed (see planted bugs and calibration)"
    ]
    assert main(["report", "--reports", str(reports)]) == ran
    assert (reports / files.VERIFY_JSON).read_bytes() == written  # the rebuild is the run's report, byte for byte
    (reports / files.RUN_FILE).unlink()  # evidence without the run's record: the phases are unknown, never passed
    assert main(["report", "--reports", str(reports)]) == 1
    phases = json.loads((reports / files.VERIFY_JSON).read_text())["run"]["parts"]["phases"]
    assert phases["reasons"] == [
        "no run record (run.json): the phases are unknown, so their exit statuses are not shown"
    ]


def test_a_port_run_with_its_reports_elsewhere_reuses_what_the_reference_run_left_in_the_cache(
    properties_commands, fake_phases, port_file, tmp_path
):
    from ncm_verify import run

    run.verify("ncm_verify.reference", "ci", tmp_path / "reports", 1)
    assert len(fake_phases) == 2 and not (tmp_path / "reports" / ".selftests").exists()
    run.verify(port_file, "ci", tmp_path / "elsewhere", 1)
    facts = json.loads((tmp_path / "elsewhere" / files.VERIFY_JSON).read_text())["run_facts"]
    assert reused_nodeids(properties_commands[-1]) == [
        "properties/test_chain.py::test_samples[float32]",
        "properties/test_prefix.py::test_cached",
        "properties/test_prefix.py::test_isolated",
    ]
    assert facts["reuse"]["reused"] == 3 and facts["selftests"]["reused"] is True and len(fake_phases) == 2
    run.verify(port_file, "ci", tmp_path / "elsewhere", 1, cache=tmp_path / "another-cache")  # a cache of its own
    assert reused_nodeids(properties_commands[-1]) is None and len(fake_phases) == 4


def test_a_port_run_of_some_properties_carries_only_theirs_and_plans_as_the_reference_run_did(
    properties_commands, fake_phases, port_file, tmp_path, monkeypatch
):
    """A quick look (``--properties``) is a part of a full run: its budget is the full run's, never overspent."""
    from ncm_verify import run

    run.verify("ncm_verify.reference", "ci", tmp_path / "reports", 1)
    planned = json.loads((tmp_path / "reports" / files.EVIDENCE_FILE).read_text())["policy"]["planned_tests"]
    monkeypatch.chdir(tmp_path)  # the synthetic evidence's file, which the run checks exists before it starts
    (tmp_path / "properties").mkdir()
    (tmp_path / "properties" / "test_prefix.py").touch()
    run.verify(port_file, "ci", tmp_path / "elsewhere", 1, properties=["properties/test_prefix.py"])
    command = properties_commands[-1]
    assert reused_nodeids(command) == [
        "properties/test_prefix.py::test_cached",
        "properties/test_prefix.py::test_isolated",
    ]
    assert f"--ncm-planned-tests={planned}" in command


# --- reuse: a port's run carries the reference's evidence for the properties it would repeat exactly ---

GREEDY_PORT = '''
"""A port of verify_greedy alone; everything else is the reference's."""
from ncm_verify.reference import *  # noqa: F403


def verify_greedy(target, draft_tokens, *, num_draft=None, validate=True):
    return "mine"
'''


@pytest.fixture
def port_file(tmp_path):
    """The greedy port's file; loaded in this process, it is forgotten afterwards (another test has its own)."""
    folder = tmp_path / "ports"
    folder.mkdir()
    (folder / "greedy_port.py").write_text(GREEDY_PORT)
    yield str(folder / "greedy_port.py")
    sys.modules.pop("greedy_port", None)


@pytest.fixture
def properties_commands(fake_phases, passing, monkeypatch) -> list[list[str]]:
    """The properties phase's command of each run; the passing evidence records what each property read."""
    from ncm_verify import run

    for entry in passing["properties"]:
        entry["looked_up"] = sorted(entry["calls"])
    passing["properties"][0].update(calls={}, looked_up=[])  # an enumeration identity: reads no implementation
    passing["properties"][3]["calls"] = {
        "verify_greedy": {"calls": 3, "own": True, "origin": "ncm_verify.reference.speculative"}
    }
    passing["properties"][3]["looked_up"] = ["verify_greedy"]
    commands, fake = [], run.run_phase

    def recorded(name, step, command, env, log=None):
        if name == "properties":
            commands.append(command)
        return fake(name, step, command, env, log)

    monkeypatch.setattr(run, "run_phase", recorded)
    monkeypatch.delenv("CI", raising=False)
    return commands


def reused_nodeids(command: list[str]) -> list[str] | None:
    """The node ids a properties command carries from the reference run (None: it reuses nothing)."""
    reuse = next((Path(a.split("=", 1)[1]) for a in command if a.startswith("--ncm-reuse=")), None)
    if reuse is None:
        return None
    swapped = reuse.parent.parent / reuse.name  # the run wrote it in its staging folder, then swapped it in
    return sorted(e["nodeid"] for e in json.loads(swapped.read_text())["properties"])


def test_a_port_reuses_reference_evidence_only_under_the_same_suite_key_profile_and_seed(
    properties_commands, port_file, tmp_path, monkeypatch
):
    from ncm_verify import run

    reports = tmp_path / "r"
    run.verify(port_file, "ci", reports, 1)  # nothing cached yet: every property runs, and the run says why
    first = json.loads((reports / files.VERIFY_JSON).read_text())["run_facts"]["reuse"]
    assert (
        first["reused"] == 0
        and "`make verify` once" in first["why"]
        and reused_nodeids(properties_commands[-1]) is None
    )
    run.verify("ncm_verify.reference", "ci", reports, 1)
    reference_run = json.loads((reports / files.VERIFY_JSON).read_text())["run_facts"]["run_id"]
    run.verify(port_file, "ci", reports, 1)
    assert reused_nodeids(properties_commands[-1]) == [
        "properties/test_chain.py::test_samples[float32]",
        "properties/test_prefix.py::test_cached",
        "properties/test_prefix.py::test_isolated",
    ]  # not test_greedy: it read verify_greedy, which the port defines
    reuse = json.loads((reports / files.VERIFY_JSON).read_text())["run_facts"]["reuse"]
    assert reuse["reused"] == 3 and reuse["from_run"] == reference_run
    for changed in ({"seed": 5}, {"profile": "thorough"}):
        run.verify(port_file, changed.get("profile", "ci"), reports, 1, seed=changed.get("seed"))
        assert reused_nodeids(properties_commands[-1]) is None, changed
    assert "draws random examples" in json.loads((reports / files.VERIFY_JSON).read_text())["run_facts"]["reuse"]["why"]
    monkeypatch.setattr(run, "suite_key", lambda: "k2")  # the suite or its environment changed
    run.verify(port_file, "ci", reports, 1)
    assert reused_nodeids(properties_commands[-1]) is None
    monkeypatch.setattr(run, "suite_key", lambda: "k1")
    monkeypatch.setenv("CI", "true")
    run.verify(port_file, "ci", reports, 1)
    assert reused_nodeids(properties_commands[-1]) is None


def test_a_property_that_read_a_name_the_port_defines_is_never_reused(port_file, passing):
    from ncm_verify import run
    from ncm_verify.protocol import load_implementation

    read = {
        "calls only inherited": ({"verify_chain": {"calls": 2, "own": True}}, ["verify_chain"]),
        "calls its own": ({"verify_greedy": {"calls": 2, "own": True}}, ["verify_greedy"]),
        "reads its own without calling": (
            {"verify_chain": {"calls": 2, "own": True}},
            ["verify_chain", "verify_greedy"],
        ),
        "reads nothing": ({}, []),
    }
    kept = {"properties": [node(name, ["C5"], calls=calls, looked_up=names) for name, (calls, names) in read.items()]}
    kept["properties"].append(node("failed", ["C5"], outcome="failed", calls={}, looked_up=[]))
    kept["properties"].append(node("older evidence without reads", ["C5"], calls={}))
    carried = {e["nodeid"]: e for e in run.reusable_properties(kept, load_implementation(port_file))}
    assert sorted(carried) == ["calls only inherited", "reads nothing"]
    assert carried["calls only inherited"]["calls"]["verify_chain"]["own"] is False  # judged as the port's


REUSED_SUITE = """
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.claim("C5")
@pytest.mark.statistical(tests=2)
@settings(max_examples=3, derandomize=True, database=None)
@given(x=st.integers(0, 10))
def test_reused(x, impl):
    raise AssertionError("a reused property must not run")

@pytest.mark.claim("C5")
@pytest.mark.statistical(tests=1)
@settings(max_examples=4, derandomize=True, database=None)
@given(x=st.integers(0, 10))
def test_runs(x, impl):
    impl.verify_greedy(None, None)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_reused_evidence_is_carried_marked_and_planned_as_in_a_full_run(tmp_path, workers, run_pytest_with, port_file):
    (tmp_path / "test_suite.py").write_text(REUSED_SUITE)
    carried = node("test_suite.py::test_reused", ["C5"], stats=[chi_square_record("test_suite.py::test_reused", 0.4)])
    carried["calls"] = {"verify_chain": {"calls": 3, "own": False, "origin": "ncm_verify.reference.speculative"}}
    source = {"run_id": "ref123", "ran": "2026-11-30T22:00:00+00:00", "key": "k1-ci-derandomized"}
    reuse = {"source": source, "policy": {**POLICY, "planned_tests": 10}, "properties": [carried]}
    (tmp_path / "reuse.json").write_text(json.dumps(reuse))
    arguments = [f"--impl={port_file}", f"--ncm-report-dir={tmp_path / 'r'}", f"--ncm-reuse={tmp_path / 'reuse.json'}"]
    run_pytest = run_pytest_with(workers)
    result = run_pytest(tmp_path, *workers, *arguments)
    assert result.returncode == 0, result.stdout + result.stderr  # test_reused would have failed, had it run
    assert "1 properties reused from reference run ref123" in result.stdout
    evidence = json.loads((tmp_path / "r" / "evidence.json").read_text())
    nodes = {n["property"]: n for n in evidence["properties"]}
    assert nodes["test_suite.py::test_reused"]["reused"] == source and "reused" not in nodes["test_suite.py::test_runs"]
    # alpha and n are those of a full run (2 x 3 + 1 x 4 planned), and the reused tests count against the budget
    assert evidence["policy"]["planned_tests"] == 10 and evidence["budget"]["chi_square_tests_run"] == 1
    summary = claim_status.property_summary(
        PropertyRecord.from_json(nodes["test_suite.py::test_reused"]), {"impl": "greedy_port"}, "C5"
    )
    assert summary["reused"] == "reused from reference run ref123 (2026-11-30T22:00:00+00:00)"
    assert summary["implementation_use_reason"].startswith("not provided by greedy_port")
    if workers:
        return  # the refusal below is the controller's, whatever the workers: checked once, serially (~15 s of CPU)
    reuse["policy"]["planned_tests"] = 12  # a reference run that planned otherwise is not this run's evidence
    (tmp_path / "reuse.json").write_text(json.dumps(reuse))
    result = run_pytest(tmp_path, *workers, *arguments)
    assert result.returncode == 1 and "reused reference run planned 12" in result.stdout, result.stdout


def test_each_phase_prints_beside_its_budget_and_the_run_beside_the_goal():
    from ncm_verify import run

    spent = {"start": 3.0, "properties": 150.0, "planted bugs": 60.0, "calibration and power": 20.0, "report": 1.0}
    lines = run.budget_lines(spent)
    assert sum(run.PHASE_BUDGETS_S.values()) == run.VERIFY_GOAL_S == 240, "the budgets share the goal exactly"
    assert lines[2].split() == ["properties", "150", "s", "of", "145", "s", "OVER"]
    assert lines[3].split() == ["planted", "bugs", "60", "s", "of", "65", "s"]
    assert lines[-1].split() == ["total", "234", "s", "of", "240", "s"]


# --- a run's files: a typo or an interrupted run leaves the last report whole; a passing run prints a summary ---


def report_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def last_report(fake_phases, tmp_path, monkeypatch) -> tuple[Path, dict[str, bytes]]:
    """A passing run's reports folder and its files, byte for byte (the self-tests then cached)."""
    from ncm_verify import run

    monkeypatch.delenv("CI", raising=False)
    reports = tmp_path / "reports"
    assert run.verify("ncm_verify.reference", "ci", reports, 1) == 0
    return reports, report_files(reports)


def stopping_in(phase: str, stop: Callable[[], None]) -> Callable:
    """The fake phases, with `stop` called once `phase` has left its files."""
    from ncm_verify import run

    fake = run.run_phase

    def stopped(name, step, command, env, log=None):
        result = fake(name, step, command, env, log)
        if name == phase:
            stop()
        return result

    return stopped


@pytest.mark.parametrize(
    "bad",
    [
        {"impl": "no.such.module"},
        {"profile": "cii"},
        {"required": ["C99"]},
        {"model": "no/such/checkpoint.safetensors"},
        {"properties": ["properties/test_no_such_file.py"]},
        {"jobs": 0},
    ],
    ids=lambda bad: next(iter(bad)),
)
def test_a_bad_argument_after_a_passing_run_exits_2_and_leaves_its_report_byte_for_byte(bad, last_report, capsys):
    from ncm_verify import run

    reports, before = last_report
    assert files.VERIFY_HTML in before and files.EVIDENCE_FILE in before and files.VERIFY_LOG not in before
    capsys.readouterr()
    arguments = {"impl": "ncm_verify.reference", "profile": "ci", "jobs": 1, **bad}
    impl, profile, jobs = arguments.pop("impl"), arguments.pop("profile"), arguments.pop("jobs")
    assert run.verify(impl, profile, reports, jobs, **arguments) == 2
    error = capsys.readouterr().err
    assert f"{next(iter(bad)).removesuffix('d')}" in error and "previous run's, unchanged" in error, error
    assert report_files(reports) == before


def test_a_run_interrupted_mid_way_leaves_the_previous_report_whole_and_no_staging_folder(last_report, monkeypatch):
    from ncm_verify import run

    reports, before = last_report

    def interrupt() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "run_phase", stopping_in("planted bugs", interrupt))
    monkeypatch.setenv("CI", "true")  # the self-tests rerun: the run is stopped in their phase
    with pytest.raises(KeyboardInterrupt):
        run.verify("ncm_verify.reference", "ci", reports, 1)
    assert report_files(reports) == before


def test_a_run_killed_mid_way_leaves_the_previous_report_whole_and_the_next_run_sweeps_its_leftovers(
    last_report, monkeypatch
):
    """SIGKILL runs no cleanup: what the killed run wrote stays in its staging folder, never among the report."""
    import os
    import signal

    from ncm_verify import run

    reports, before = last_report
    fake = run.run_phase
    monkeypatch.setattr(run, "run_phase", stopping_in("properties", lambda: os.kill(os.getpid(), signal.SIGKILL)))
    child = os.fork()
    if child == 0:  # the run, killed in its first phase
        try:
            run.verify("ncm_verify.reference", "ci", reports, 1)
        finally:
            os._exit(3)  # never reached unless the kill failed
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    left = [path.name for path in reports.iterdir() if path.name.startswith(run.STAGING_PREFIX)]
    assert len(left) == 1 and (reports / left[0] / files.EVIDENCE_FILE).is_file(), "it had written its evidence"
    assert {k: v for k, v in report_files(reports).items() if not k.startswith(run.STAGING_PREFIX)} == before
    monkeypatch.setattr(run, "run_phase", fake)
    assert run.verify("ncm_verify.reference", "ci", reports, 1) == 0
    assert not [path for path in reports.iterdir() if path.name.startswith(run.STAGING_PREFIX)]


PHASE_OUTPUT = """
import sys
for i in range(1, 5):
    print(f"selftests/test_mutants.py::test_caught[m{i}] PASSED [ {25 * i}%]")
print("ncm-verify: first failure, 3 s into the properties (the run goes on to its report):")
print("  FIRST FAILURE: properties/test_x.py::test_y (C5), failed by assertion")
print("    rerun: cd /suite && pytest 'properties/test_x.py::test_y'")
print("ncm-verify: evidence written to x")
if "fail" in sys.argv:
    print("=================================== FAILURES ===================================")
    print("____ test_caught[m5] ____")
    print("E   AssertionError: m5 survived")
    print("=========================== 1 failed, 4 passed in 0.50s ============================")
    sys.exit(1)
print("============================== 4 passed in 0.50s ===============================")
"""


@pytest.mark.parametrize("fails", [False, True], ids=["passing", "failing"])
def test_a_phase_prints_its_tally_and_first_failure_and_in_full_only_what_failed_the_rest_to_the_log(
    fails, tmp_path, capsys, monkeypatch
):
    from ncm_verify import run

    monkeypatch.setattr(run, "PROGRESS_FIRST_S", 0)  # a progress line at every percentage pytest prints
    log = tmp_path / files.VERIFY_LOG
    command = [sys.executable, "-c", PHASE_OUTPUT, *(["fail"] if fails else [])]
    phase = run.run_phase("planted bugs", "2/4", command, {}, log)
    printed = capsys.readouterr().out
    assert phase.exit_status == int(fails) and "PASSED" in log.read_text() and "PASSED" not in printed
    assert "  FIRST FAILURE: properties/test_x.py::test_y" in printed and "    rerun: cd /suite" in printed
    assert "evidence written" not in printed and "[2/4] planted bugs: 50% after" in printed
    if fails:
        assert "[2/4] planted bugs: 1 failed, 4 passed in" in printed and "E   AssertionError: m5 survived" in printed
    else:
        assert "[2/4] planted bugs: 4 passed in" in printed and "FAILURES" not in printed
