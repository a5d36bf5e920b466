"""The report writers and the one verdict on synthetic evidence, and the `make verify` orchestrator (run.py)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from ncm_verify.cli import main
from ncm_verify.harness import stats
from ncm_verify.report import document as doc
from ncm_verify.report import status as claim_status
from ncm_verify.report.html import render_html
from ncm_verify.report.markdown import render_markdown
from ncm_verify.report.terminal import render_terminal

REPRODUCE = "@reproduce_failure('6.170.17', b'AEEy')"
POLICY = {
    "family_budget": 1e-3,
    "planned_tests": 60,
    "per_test_share": 1.67e-5,
    "alpha": 8.3e-6,
    "alpha_fraction": 0.5,
    "min_expected": 20,
    "power": 0.99,
    "power_safety": 1.75,
    "target_tv": 0.02,
}


def chi_square_record(test: str, p_value: float, passed: bool = True, law: str = "a") -> dict:
    return {
        "law_digest": law,
        "name": "chain output",
        "n": 8192,
        "df": 3,
        "statistic": 2.5,
        "p_value": p_value,
        "alpha": POLICY["alpha"],
        "min_detectable_tv": 0.019,
        "pooled_mass": 0.01,
        "impossible_count": 0,
        "expected": [4096.0, 2048.0, 1024.0, 1024.0],
        "observed": [4100.0, 2040.0, 1030.0, 1022.0],
        "context": {"seed": 3},
        "passed": passed,
        "test": test,
    }


def node(nodeid: str, claims: list[str], outcome: str = "passed", **extra) -> dict:
    entry = {
        "nodeid": nodeid,
        "property": nodeid.split("[", 1)[0],
        "outcome": outcome,
        "duration_s": 0.5,
        "claims": claims,
        "stats": [],
        "differences": [],
        "failure": None,
        "skip_reason": None,
        "hypothesis": {
            "examples": 30,
            "failing_examples": 0,
            "invalid_examples": 0,
            "stopped_because": "settings.max_examples=30",
        },
        "calls": {"verify_chain": {"calls": 30, "own": True, "origin": "ncm_verify.reference.speculative"}},
    }
    entry.update(extra)
    return entry


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
            {
                "id": "C7",
                "statement": "greedy exact",
                **claim,
                "properties": ["properties/test_greedy.py::test_greedy"],
            },
            {
                "id": "C10",
                "statement": "a hypothesis",
                "sources": [],
                "paths": [],
                "properties": [],
                "not_checkable": "literature only",
            },
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


def claims_by_id(report: dict) -> dict:
    return {claim["id"]: claim for claim in report["claims"]}


def test_statuses_are_derived_from_the_evidence(ledger, evidence):
    claims = claims_by_id(doc.build_report(ledger, evidence))
    assert {key: claim["status"] for key, claim in claims.items()} == {
        "C1": "shown",
        "C2": "failed",
        "C5": "shown",
        "C7": "not run",
        "C10": "not checkable",
    }
    assert claims["C5"]["distinct_examples"] == 11 and claims["C5"]["property_count"] == 1
    statistics = claims["C5"]["properties"][0]["statistics"]
    assert statistics["tests"] == 12 and statistics["distinct_laws"] == 11
    assert statistics["p_min"] == 0.03 and statistics["worst"]["p_value"] == 0.03


def test_a_property_with_one_parametrisation_skipped_leaves_its_claim_not_run(ledger, evidence):
    skipped = "properties/test_prefix.py::test_isolated[float16]"
    evidence["properties"] = [
        node("properties/test_prefix.py::test_isolated[float32]", ["C1"]),
        node(skipped, ["C1"], outcome="skipped", skip_reason="float16 unsupported"),
    ]
    claim = claims_by_id(doc.build_report(ledger, evidence))["C1"]
    assert claim["status"] == "not run"
    assert skipped in claim["reason"] and "test_isolated[float32]" not in claim["reason"]


def test_a_failed_property_fails_its_claim_with_the_reproduction_line(ledger, evidence):
    report = doc.build_report(ledger, evidence)
    failure = claims_by_id(report)["C2"]["properties"][0]["failure"]
    assert failure["reproduce_failure"] == REPRODUCE
    assert failure["command"] == (
        "HYPOTHESIS_PROFILE=ci .venv/bin/python -m pytest 'properties/test_prefix.py::test_cached' -p no:xdist "
        "--impl=ncm_verify.reference --ncm-planned-tests=60"
    )
    assert report["run"]["verdict"] == "failed"
    for text in (render_markdown(report), render_html(report)):
        assert REPRODUCE.replace("'", "&#x27;") in text or REPRODUCE in text
        assert "seed=3" in text


def test_same_evidence_gives_identical_report_bytes(ledger, evidence, tmp_path):
    outputs = []
    for run in ("a", "b"):
        folder = tmp_path / run
        folder.mkdir()
        (folder / "evidence.json").write_text(json.dumps(evidence))
        (tmp_path / "ledger.json").write_text(json.dumps(ledger))
        assert main(["report", "--reports", str(folder), "--ledger", str(tmp_path / "ledger.json")]) == 1
        outputs.append([(folder / name).read_bytes() for name in (doc.VERIFY_JSON, doc.VERIFY_MD, doc.VERIFY_HTML)])
    assert outputs[0] == outputs[1]
    assert b"Device(gpu, 0)" in outputs[0][2]  # every figure names the MLX device


def test_no_evidence_reports_every_claim_not_run(ledger):
    report = doc.build_report(ledger, None)
    assert report["run"]["verdict"] == "failed" and report["run"]["exit_status"] == 1
    assert "properties: no evidence: the properties were not run" in report["run"]["reasons"]
    assert {c["status"] for c in report["claims"]} == {"not run", "not checkable"}
    assert "not run" in render_terminal(report)


def test_html_is_self_contained(ledger, evidence):
    calibration = {
        "alpha": 0.05,
        "runs": 100,
        "rejections": 4,
        "binomial_p_value": 0.74,
        "p_values": [i / 100 for i in range(100)],
        "planted": {"name": "ratio_inverted", "runs": 20, "rejections": 20, "rejection_rate": 1.0},
    }
    page = render_html(doc.build_report(ledger, evidence, calibration=calibration))
    assert "<script" not in page and "<link" not in page and " src=" not in page
    assert page.count("<svg") == 2  # one frequency plot, one calibration histogram
    for claim in ledger["claims"]:
        assert f"{claim['id']} <span" in page


def test_planted_bug_table_names_the_claims_that_caught_each_bug(ledger, evidence):
    mutants = {
        "generated": "2026-11-30T00:00:00",
        "profile": "selftest",
        "mutants": [
            {
                "name": "ratio_inverted",
                "module": "m.a",
                "description": "p/q inverted",
                "caught": True,
                "caught_by": ["properties/test_chain.py::test_samples[float32]"],
                "failed": ["x"],
                "passed": [],
            },
            {
                "name": "off_by_one",
                "module": "m.b",
                "description": "bonus skipped",
                "caught": False,
                "caught_by": [],
                "failed": [],
                "passed": ["y"],
            },
        ],
    }
    report = doc.build_report(ledger, evidence, mutants=mutants)
    rows = {row["name"]: row for row in report["mutants"]["mutants"]}
    assert rows["ratio_inverted"]["claims"] == ["C5"]
    assert report["mutants"]["survived"] == ["off_by_one"]
    assert "planted bugs: planted bugs not caught: off_by_one" in report["run"]["reasons"]
    assert "SURVIVED" in render_markdown(report)


def test_an_overspent_budget_fails_the_run(ledger, evidence):
    evidence = copy.deepcopy(evidence)
    evidence["properties"] = [p for p in evidence["properties"] if p["outcome"] == "passed"]
    evidence["budget"].update(within_plan=False, run_failed_by_budget=True, note="budget overspent")
    reasons = doc.build_report(ledger, evidence, **PASSING_SELFTESTS)["run"]["reasons"]
    assert "budget: budget overspent" in reasons


def test_bench_summary_is_linked_when_present(ledger, evidence):
    bench = {
        "datetime": "2026-11-30",
        "machine_info": {"node": "n"},
        "benchmarks": [
            {
                "fullname": "benchmarks/test_b.py::test_kernel",
                "stats": {"median": 0.001, "mean": 0.0011, "stddev": 1e-5, "rounds": 50},
            }
        ],
    }
    report = doc.build_report(ledger, evidence, bench=bench)
    assert report["bench"]["benchmarks"][0]["rounds"] == 50
    assert '<a href="bench.json">' in render_html(report)


# --- one verdict: every way a part can fail gives a failing verdict, the same in the report and the exit status ---

PASSING_SELFTESTS = {
    "mutants": {
        "profile": "selftest",
        "mutants": [
            {
                "name": name,
                "module": f"m.{name}",
                "description": "a bug",
                "caught": True,
                "caught_by": ["properties/test_chain.py::test_samples[float32]"],
                "failed": ["x"],
                "passed": [],
                "sweep_error": None,
            }
            for name in doc.registered_mutants()
        ],
    },
    "calibration": {
        "alpha": 0.05,
        "runs": 400,
        "rejections": 20,
        "binomial_p_value": 0.9,
        "ks_uniform_p_value": 0.5,
        "check_budget": 3.3e-5,
        "p_values": [],
        "power_cases": [
            {"name": name, "runs": 200, "rejections": 199, "needed": 190, "n": 9216, "alpha": 3.3e-6, "passed": True}
            for name in stats.power_case_names()
        ],
        "size": {"passed": True, "largest_ratio": 0.9999},
        "size_large_df": {"passed": True, "largest_ratio": 0.4},
    },
}


PASSING_RUN = {
    "phases": [
        {"name": name, "exit_status": 0, "seconds": 1.0, "problem": None}
        for name in ("properties", "planted bugs", "calibration and power")
    ]
}
"""The record `ncm-verify verify` leaves of a run whose phases each exited with a verdict."""


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


def verdict_through_files(ledger: dict, evidence: dict, folder: Path, **selftests) -> tuple[int, dict]:
    """Write the run's JSON (its run record among it), rebuild the report with the CLI: (exit status, verify.json)."""
    folder.mkdir()
    (folder / "evidence.json").write_text(json.dumps(evidence))
    (folder / doc.RUN_FILE).write_text(json.dumps(PASSING_RUN))
    for name, data in selftests.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    (folder / "ledger.json").write_text(json.dumps(ledger))
    exit_status = main(["report", "--reports", str(folder), "--ledger", str(folder / "ledger.json")])
    return exit_status, json.loads((folder / doc.VERIFY_JSON).read_text())


def test_a_run_with_every_part_passing_passes_and_exits_zero(ledger, passing, tmp_path):
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **PASSING_SELFTESTS)
    assert report["run"]["reasons"] == [] and report["run"]["verdict"] == "passed"
    assert exit_status == 0 == report["run"]["exit_status"]
    assert {c["id"]: c["status"] for c in report["claims"]} == {
        "C1": "shown",
        "C2": "shown",
        "C5": "shown",
        "C7": "shown",
        "C10": "not checkable",
    }


def set_path(data: dict, path: str, value) -> None:
    *keys, last = path.split(".")
    for key in keys:
        data = data[int(key)] if isinstance(data, list) else data[key]
    data[int(last) if isinstance(data, list) else last] = value


NODE_BREAKS = {
    # (path into evidence["properties"][i], value) -> (claim, status, words of the reason)
    "an errored property": ("3.outcome", "error", "C7", "failed", "failed"),
    "a skipped property": ("3.outcome", "skipped", "C7", "not run", "skipped"),
    "zero examples": ("3.hypothesis.examples", 0, "C7", "not shown", "0 distinct examples < 10"),
    "a mostly filtered property": (
        "3.hypothesis.invalid_examples",
        299,
        "C7",
        "not shown",
        "299 of 329 examples filtered",
    ),
    "zero chi-square tests": ("2.stats", [], "C5", "not shown", "statistical but ran no chi-square test"),
    "a statistical property testing few laws": (
        "2.stats",
        [chi_square_record("s", 0.4, law="same")] * 30,
        "C5",
        "not shown",
        "1 distinct law < 10",
    ),
    "no call into the implementation": ("3.calls", {}, "C7", "not shown", "suite's own check"),
    "calls only into inherited names": (
        "3.calls",
        {"verify_greedy": {"calls": 3, "own": False, "origin": "ncm_verify.reference.speculative"}},
        "C7",
        "not provided",
        "only inherited names",
    ),
}


@pytest.mark.parametrize("break_name", sorted(NODE_BREAKS))
def test_each_way_a_property_lacks_evidence_gives_its_claim_a_status_and_the_run_a_failing_verdict(
    break_name, ledger, passing, tmp_path
):
    path, value, claim_id, expected_status, words = NODE_BREAKS[break_name]
    set_path(passing["properties"], path, value)
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **PASSING_SELFTESTS)
    claim = claims_by_id(report)[claim_id]
    assert claim["status"] == expected_status and words in claim["reason"], claim["reason"]
    others = {c["id"]: c["status"] for c in report["claims"] if c["id"] != claim_id}
    assert set(others.values()) <= {"shown", "not checkable"}, others
    if expected_status == "not provided":  # what the module does not provide is not its failure
        assert report["run"]["verdict"] == "passed" and exit_status == 0
    else:
        assert report["run"]["verdict"] == "failed" and exit_status == 1 == report["run"]["exit_status"]


PART_BREAKS = {
    "a failing KS check": ("calibration", "ks_uniform_p_value", 1e-9, "calibration", "KS uniformity check failed"),
    "a failing binomial check": ("calibration", "binomial_p_value", 1e-9, "calibration", "binomial check failed"),
    "a power case below its bar": ("calibration", "power_cases.2.rejections", 120, "calibration", ": 120 of 200"),
    "a power case that failed its raw-model bar": ("calibration", "power_cases.0.passed", False, "calibration", "199"),
    "no power case": ("calibration", "power_cases", [], "calibration", "power cases not recorded"),
    "one power case missing": (
        "calibration",
        "power_cases",
        [{"name": "chain fixture, 9 outcomes: spread", "runs": 200, "rejections": 199, "needed": 190, "passed": True}],
        "calibration",
        "not recorded: chain fixture, 9 outcomes: concentrated",
    ),
    "no size bound of many bins": ("calibration", "size_large_df", None, "calibration", "many bins not recorded"),
    "a plan whose exact size exceeds alpha": ("calibration", "size.passed", False, "calibration", "exact size exceeds"),
    "no exact size check": ("calibration", "size", None, "calibration", "exact test-size check not recorded"),
    "a surviving planted bug": (
        "mutants",
        "mutants.0.caught",
        False,
        "planted bugs",
        f"not caught: {doc.registered_mutants()[0]}",
    ),
    "a broken sweep": ("mutants", "mutants.0.sweep_error", "pytest exited 4", "planted bugs", "sweep broken"),
}


@pytest.mark.parametrize("break_name", sorted(PART_BREAKS))
def test_each_failing_self_test_part_fails_the_run_in_report_and_exit_status(break_name, ledger, passing, tmp_path):
    file, path, value, part, words = PART_BREAKS[break_name]
    selftests = copy.deepcopy(PASSING_SELFTESTS)
    set_path(selftests[file], path, value)
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **selftests)
    assert not report["run"]["parts"][part]["passed"]
    assert any(words in reason for reason in report["run"]["parts"][part]["reasons"]), report["run"]["parts"][part]
    assert report["run"]["verdict"] == "failed" and exit_status == 1 == report["run"]["exit_status"]


def test_a_registered_planted_bug_without_a_sweep_result_fails_the_run(ledger, passing):
    expected = [*doc.registered_mutants(), "lost_one"]
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN, expected_mutants=expected)
    assert report["run"]["reasons"] == ["planted bugs: planted bugs with no sweep result: lost_one"]


@pytest.mark.parametrize("missing", ["mutants", "calibration"])
def test_a_self_test_file_that_is_missing_fails_the_run(missing, ledger, passing, tmp_path):
    selftests = {name: data for name, data in PASSING_SELFTESTS.items() if name != missing}
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **selftests)
    assert exit_status == 1 and report["run"]["verdict"] == "failed"


def test_a_claim_marker_that_names_no_ledger_entry_fails_the_ledger_part(ledger, passing, tmp_path):
    passing["properties"][0]["claims"] = ["C1", "C99"]
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **PASSING_SELFTESTS)
    assert report["run"]["parts"]["ledger"]["reasons"] == [
        "properties/test_prefix.py::test_isolated: claim marker C99 names no ledger entry"
    ]
    assert exit_status == 1


def test_evidence_of_another_run_is_refused(ledger, passing):
    passing["run_id"] = "old"
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run={"run_id": "new", "phases": []})
    assert "phases: evidence.json belongs to run old, not this run new" in report["run"]["reasons"]


def test_a_phase_that_exits_without_a_verdict_fails_the_run(ledger, passing):
    phases = [{"name": "properties", "exit_status": 4, "problem": "pytest exited 4"}]
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run={"phases": phases})
    assert report["run"]["reasons"] == ["phases: phase properties: pytest exited 4"]


def assertion_failure(claims: list[str], kernels: list[str], message: str, **extra) -> dict:
    """The failure the plugin records for a property whose check failed on an example calling `kernels`."""
    return {"phase": "call", "kind": "assertion", "claims": claims, "kernels": kernels, "message": message, **extra}


def test_a_failure_counts_against_the_claim_of_the_kernel_its_example_called(ledger, passing):
    """A property under C5 and C7 that failed on a greedy example fails C7 only; C5 is left not shown."""
    shared = passing["properties"][3]
    shared.update(
        claims=["C5", "C7"],
        outcome="failed",
        failure=assertion_failure(["C7"], ["verify_greedy"], "AssertionError"),
    )
    claims = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))
    assert claims["C7"]["status"] == "failed"
    assert claims["C5"]["status"] == "not shown" and "another claim's kernel" in claims["C5"]["reason"]


def test_a_failure_on_another_claims_kernel_leaves_a_claim_whose_kernels_are_inherited_not_provided(ledger, passing):
    """A port of verify_chain alone fails a property shared by C5 and C7 on verify_chain: C7's kernel was the
    reference's, so C7 reads not provided by the module, not 'not shown'."""
    shared = passing["properties"][3]
    shared.update(
        claims=["C5", "C7"],
        outcome="failed",
        calls={
            "verify_chain": {"calls": 9, "own": True, "origin": "my_port"},
            "verify_greedy": {"calls": 9, "own": False, "origin": "ncm_verify.reference.speculative"},
        },
        failure=assertion_failure(["C5"], ["verify_chain"], "A"),
    )
    claims = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))
    assert claims["C5"]["status"] == "failed"
    assert claims["C7"]["status"] == "not provided", claims["C7"]["reason"]
    file_of_shared = shared["nodeid"].split("::")[0].rsplit("/", 1)[-1]
    assert (
        f"not provided by ncm_verify.reference: its calls reached only inherited names (verify_greedy) "
        f"[{file_of_shared} (1)]" in claims["C7"]["reason"]
    ), "the reason is said once, with the runs behind it counted by file"
    shared["calls"]["verify_greedy"]["own"] = True  # the port's own greedy kernel ran: no verdict on C7 either way
    claims = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))
    assert claims["C7"]["status"] == "not shown" and "another claim's kernel" in claims["C7"]["reason"]


# --- the orchestrator: stops early on bad input, stamps the run, caches the self-tests ---


def test_a_misspelt_implementation_stops_the_run_before_any_phase_and_leaves_no_report(tmp_path, capsys):
    from ncm_verify import run

    (tmp_path / doc.VERIFY_JSON).write_text("{}")  # an earlier run's report must not pass for this one's
    assert run.verify("ncm_verify.mutants.ratio_invrted", "ci", tmp_path, 1) == 2
    error = capsys.readouterr().err
    assert error.count("cannot import") == 1 and "Did you mean 'ncm_verify.mutants.ratio_inverted'?" in error
    assert not (tmp_path / doc.VERIFY_JSON).exists()


def test_an_unknown_profile_stops_the_run_with_the_profiles_there_are(tmp_path, capsys):
    from ncm_verify import run

    assert run.verify("ncm_verify.reference", "nonsense", tmp_path, 1) == 2
    assert "profile: no Hypothesis profile 'nonsense'; choose one of" in capsys.readouterr().err
    assert not (tmp_path / doc.VERIFY_JSON).exists()


@pytest.fixture
def fake_phases(monkeypatch, passing, ledger, tmp_path):
    """Phases that leave passing evidence and self-test files instead of running pytest; counts self-test runs.

    The cache is the test's own, never the checkout's.
    """
    from ncm_verify import run

    monkeypatch.setattr(run, "DEFAULT_CACHE", tmp_path / "cache")
    ran = []

    def fake(name, step, command, env):
        if name == "properties":
            folder = Path(next(a for a in command if a.startswith("--ncm-report-dir=")).split("=", 1)[1])
            run_id = next(a for a in command if a.startswith("--ncm-run-id=")).split("=", 1)[1]
            (folder / doc.EVIDENCE_FILE).write_text(json.dumps({**passing, "run_id": run_id}))
        else:
            ran.append(name)
            folder = Path(next(a for a in command if a.startswith("--ncm-selftest-dir=")).split("=", 1)[1])
            for part, data in PASSING_SELFTESTS.items():
                (folder / f"{part}.json").write_text(json.dumps(data))
        return {"name": name, "exit_status": 0, "seconds": 0.0, "problem": None}

    monkeypatch.setattr(run, "run_phase", fake)
    monkeypatch.setattr(run, "suite_key", lambda: "k1")
    monkeypatch.setattr(run, "ledger_against_run", lambda reports: [])  # the synthetic ledger is not this repository's
    monkeypatch.setattr(doc, "read_ledger", lambda path=None: (ledger, []))
    return ran


def test_the_self_tests_run_once_then_are_reused_until_ci_asks_for_a_rerun(fake_phases, tmp_path, monkeypatch):
    from ncm_verify import run

    monkeypatch.delenv("CI", raising=False)
    assert run.verify("ncm_verify.reference", "ci", tmp_path, 1) == 0
    first = json.loads((tmp_path / doc.VERIFY_JSON).read_text())
    assert first["run_facts"]["selftests"]["reused"] is False and len(fake_phases) == 2
    assert run.verify("ncm_verify.reference", "ci", tmp_path, 1) == 0
    second = json.loads((tmp_path / doc.VERIFY_JSON).read_text())
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

    def teeth_fail(name, step, command, env):
        result = fake(name, step, command, env)
        return {**result, "exit_status": 1} if name == "calibration and power" else result

    monkeypatch.setattr(run, "run_phase", teeth_fail)
    monkeypatch.delenv("CI", raising=False)
    reports = tmp_path / "r"
    ran = run.verify("ncm_verify.reference", "ci", reports, 1)
    written = (reports / doc.VERIFY_JSON).read_bytes()
    verdict = json.loads(written)["run"]
    assert ran == 1 == verdict["exit_status"], verdict
    assert verdict["reasons"] == [
        "phases: phase calibration and power: a self-test failed (see planted bugs and calibration)"
    ]
    assert main(["report", "--reports", str(reports)]) == ran
    assert (reports / doc.VERIFY_JSON).read_bytes() == written  # the rebuild is the run's report, byte for byte
    (reports / doc.RUN_FILE).unlink()  # evidence without the run's record: the phases are unknown, never passed
    assert main(["report", "--reports", str(reports)]) == 1
    phases = json.loads((reports / doc.VERIFY_JSON).read_text())["run"]["parts"]["phases"]
    assert phases["reasons"] == [
        "no run record (run.json): the phases are unknown, so their exit statuses are not shown"
    ]


def test_one_property_run_by_pytest_alone_rebuilds_as_failed_and_says_what_was_not_run(ledger, passing, tmp_path):
    """README's "One property, still with a report": evidence only, no self-tests and no run record."""
    folder = tmp_path / "quick"
    folder.mkdir()
    (folder / doc.EVIDENCE_FILE).write_text(json.dumps(passing))
    (folder / "ledger.json").write_text(json.dumps(ledger))
    assert main(["report", "--reports", str(folder), "--ledger", str(folder / "ledger.json")]) == 1
    parts = json.loads((folder / doc.VERIFY_JSON).read_text())["run"]["parts"]
    failed = {name: part["reasons"] for name, part in parts.items() if not part["passed"]}
    assert sorted(failed) == ["calibration", "phases", "planted bugs"], failed
    assert failed["planted bugs"] == ["not run: no mutants.json"] and "no run record" in failed["phases"][0]


def test_a_port_run_with_its_reports_elsewhere_reuses_what_the_reference_run_left_in_the_cache(
    properties_commands, fake_phases, port_file, tmp_path
):
    from ncm_verify import run

    run.verify("ncm_verify.reference", "ci", tmp_path / "reports", 1)
    assert len(fake_phases) == 2 and not (tmp_path / "reports" / ".selftests").exists()
    run.verify(port_file, "ci", tmp_path / "elsewhere", 1)
    facts = json.loads((tmp_path / "elsewhere" / doc.VERIFY_JSON).read_text())["run_facts"]
    assert reused_nodeids(properties_commands[-1]) == [
        "properties/test_chain.py::test_samples[float32]",
        "properties/test_prefix.py::test_cached",
        "properties/test_prefix.py::test_isolated",
    ]
    assert facts["reuse"]["reused"] == 3 and facts["selftests"]["reused"] is True and len(fake_phases) == 2
    run.verify(port_file, "ci", tmp_path / "elsewhere", 1, cache=tmp_path / "another-cache")  # a cache of its own
    assert reused_nodeids(properties_commands[-1]) is None and len(fake_phases) == 4


def test_the_closing_summary_gives_each_failure_one_block_with_its_worst_bins_example_and_rerun_line(ledger, passing):
    samples = passing["properties"][2]
    failing = chi_square_record(samples["nodeid"], 1e-30, passed=False, law="bad")
    failing["observed"] = [4000.0, 2048.0, 1524.0, 620.0]  # chi-square parts 2.25, 0, 244, 159
    samples["stats"].append(failing)
    samples["hypothesis"]["stopped_because"] = "shrinking was very slow"
    samples.update(
        outcome="failed",
        failure=assertion_failure(
            ["C5"],
            ["verify_chain"],
            "Hypothesis found 2 distinct failures.\n\n"
            "Failure 1 of 2: chain output: chi-square rejects the exact distribution: p = 1e-30\n"
            "  the 4 worst of 4 bins:\n" + "\n".join(f"    bin {i} row" for i in range(4)),
            falsifying_example="Failing test case: test_samples(\n    seed=3,\n)",
        ),
    )
    passing["properties"][3].update(
        outcome="error",
        failure={"phase": "call", "kind": "ValueError", "message": "\n".join(f"line {i}" for i in range(9))},
    )
    lines = render_terminal(doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN)).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("  FAILURE ")]
    assert [lines[i].split(":")[0] for i in starts] == ["  FAILURE 1 of 2", "  FAILURE 2 of 2"], lines
    chain, greedy = lines[starts[0] : starts[1]], lines[starts[1] :]
    assert "(C5), failed by assertion on verify_chain" in chain[0]
    assert chain[1:3] == [
        "    Hypothesis found 2 distinct failures.",
        "    Failure 1 of 2: chain output: chi-square rejects the exact distribution: p = 1e-30",
    ]
    assert [line.split(":")[0].strip() for line in chain[4:7]] == ["bin 2", "bin 3", "bin 0"], chain
    assert "    example: Failing test case: test_samples( seed=3, )" in chain
    assert any("shrinking stopped at the profile's time budget" in line for line in chain)
    assert chain[-1].startswith("    rerun: HYPOTHESIS_PROFILE=ci") and "test_samples[float32]" in chain[-1]
    assert "(C7), error with ValueError" in greedy[0] and greedy[1:8] == [
        *(f"    line {i}" for i in range(6)),
        "    ... 3 more lines in verify.md",
    ]
    assert not any("shrinking stopped" in line for line in greedy), greedy


def test_a_relation_over_every_kernel_is_evidence_for_a_claim_only_through_that_claims_own_kernels(ledger, passing):
    """A port of verify_chain alone: the relation property shows C5 but leaves C7 not provided."""
    relation = passing["properties"][3]
    relation["claims"] = ["C5", "C7"]
    relation["calls"] = {
        "verify_chain": {"calls": 9, "own": True, "origin": "my_port"},
        "verify_greedy": {"calls": 9, "own": False, "origin": "ncm_verify.reference.speculative"},
    }
    claims = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))
    assert claims["C5"]["status"] == "shown"
    assert claims["C7"]["status"] == "not provided" and "(verify_greedy)" in claims["C7"]["reason"]


def test_a_property_the_ledger_does_not_list_fails_the_run_that_collected_it(ledger, passing):
    """The orchestrator checks the ledger against what the run collected and passes the problems on."""
    from ncm_verify.report.ledger import repository_problems

    passing["properties"].append(node("properties/test_chain.py::test_new", ["C5"]))
    problems = repository_problems(doc.normalized_claims_ledger(ledger), Path("/nonexistent"), passing["properties"])
    assert "properties/test_chain.py::test_new: collected but listed under no claim" in problems
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run={"ledger_problems": problems})
    assert not report["run"]["parts"]["ledger"]["passed"] and report["run"]["exit_status"] == 1


def test_thin_evidence_on_what_a_port_provides_is_not_excused_by_what_it_does_not(ledger, passing):
    passing["properties"][2]["stats"] = [chi_square_record("s", 0.4, law="one")] * 12  # provided, one law
    passing["properties"].append(
        node(
            "properties/test_chain.py::test_numerics",
            ["C5"],
            calls={"apply_chain": {"calls": 4, "own": False, "origin": "ncm_verify.reference.speculative"}},
        )
    )
    claim = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))["C5"]
    assert claim["status"] == "not shown" and "1 distinct law < 10" in claim["reason"]


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

    def recorded(name, step, command, env):
        if name == "properties":
            commands.append(command)
        return fake(name, step, command, env)

    monkeypatch.setattr(run, "run_phase", recorded)
    monkeypatch.delenv("CI", raising=False)
    return commands


def reused_nodeids(command: list[str]) -> list[str] | None:
    """The node ids a properties command carries from the reference run (None: it reuses nothing)."""
    reuse = next((a.split("=", 1)[1] for a in command if a.startswith("--ncm-reuse=")), None)
    return None if reuse is None else sorted(e["nodeid"] for e in json.loads(Path(reuse).read_text())["properties"])


def test_a_port_reuses_reference_evidence_only_under_the_same_suite_key_profile_and_seed(
    properties_commands, port_file, tmp_path, monkeypatch
):
    from ncm_verify import run

    reports = tmp_path / "r"
    run.verify(port_file, "ci", reports, 1)  # nothing cached yet: every property runs, and the run says why
    first = json.loads((reports / doc.VERIFY_JSON).read_text())["run_facts"]["reuse"]
    assert (
        first["reused"] == 0
        and "`make verify` once" in first["why"]
        and reused_nodeids(properties_commands[-1]) is None
    )
    run.verify("ncm_verify.reference", "ci", reports, 1)
    reference_run = json.loads((reports / doc.VERIFY_JSON).read_text())["run_facts"]["run_id"]
    run.verify(port_file, "ci", reports, 1)
    assert reused_nodeids(properties_commands[-1]) == [
        "properties/test_chain.py::test_samples[float32]",
        "properties/test_prefix.py::test_cached",
        "properties/test_prefix.py::test_isolated",
    ]  # not test_greedy: it read verify_greedy, which the port defines
    reuse = json.loads((reports / doc.VERIFY_JSON).read_text())["run_facts"]["reuse"]
    assert reuse["reused"] == 3 and reuse["from_run"] == reference_run
    for changed in ({"seed": 5}, {"profile": "thorough"}):
        run.verify(port_file, changed.get("profile", "ci"), reports, 1, seed=changed.get("seed"))
        assert reused_nodeids(properties_commands[-1]) is None, changed
    assert "draws random examples" in json.loads((reports / doc.VERIFY_JSON).read_text())["run_facts"]["reuse"]["why"]
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
def test_reused_evidence_is_carried_marked_and_planned_as_in_a_full_run(tmp_path, workers, run_pytest, port_file):
    (tmp_path / "test_suite.py").write_text(REUSED_SUITE)
    carried = node("test_suite.py::test_reused", ["C5"], stats=[chi_square_record("test_suite.py::test_reused", 0.4)])
    carried["calls"] = {"verify_chain": {"calls": 3, "own": False, "origin": "ncm_verify.reference.speculative"}}
    source = {"run_id": "ref123", "ran": "2026-11-30T22:00:00+00:00", "key": "k1-ci-derandomized"}
    reuse = {"source": source, "policy": {**POLICY, "planned_tests": 10}, "properties": [carried]}
    (tmp_path / "reuse.json").write_text(json.dumps(reuse))
    arguments = [f"--impl={port_file}", f"--ncm-report-dir={tmp_path / 'r'}", f"--ncm-reuse={tmp_path / 'reuse.json'}"]
    result = run_pytest(tmp_path, *workers, *arguments)
    assert result.returncode == 0, result.stdout + result.stderr  # test_reused would have failed, had it run
    assert "1 properties reused from reference run ref123" in result.stdout
    evidence = json.loads((tmp_path / "r" / "evidence.json").read_text())
    nodes = {n["property"]: n for n in evidence["properties"]}
    assert nodes["test_suite.py::test_reused"]["reused"] == source and "reused" not in nodes["test_suite.py::test_runs"]
    # alpha and n are those of a full run (2 x 3 + 1 x 4 planned), and the reused tests count against the budget
    assert evidence["policy"]["planned_tests"] == 10 and evidence["budget"]["chi_square_tests_run"] == 1
    summary = claim_status.property_summary(nodes["test_suite.py::test_reused"], {"impl": "greedy_port"}, "C5")
    assert summary["reused"] == "reused from reference run ref123 (2026-11-30T22:00:00+00:00)"
    assert summary["implementation_use_reason"].startswith("not provided by greedy_port")
    reuse["policy"]["planned_tests"] = 12  # a reference run that planned otherwise is not this run's evidence
    (tmp_path / "reuse.json").write_text(json.dumps(reuse))
    result = run_pytest(tmp_path, *workers, *arguments)
    assert result.returncode == 1 and "reused reference run planned 12" in result.stdout, result.stdout


def test_distinct_laws_are_counted_per_test_and_the_fewest_kept():
    """A law that never changes is not shown by another test's changing: the property counts the fewer."""
    records = [
        {"name": "first tokens", "law_digest": "same", "expected": [1.0], "n": 1},
        *({"name": "acceptance", "law_digest": f"law {i}", "expected": [1.0], "n": 1} for i in range(12)),
    ]
    assert claim_status.distinct_laws(records) == 1
    assert claim_status.distinct_laws([r for r in records if r["name"] == "acceptance"]) == 12
    assert claim_status.distinct_laws([]) == 0
