"""The one verdict (report/status.py) on synthetic evidence: claim statuses, the run's parts, its exit status."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from synthetic import (
    PASSING_RUN,
    PASSING_SELFTESTS,
    assertion_failure,
    chi_square_record,
    claims_by_id,
    node,
    verdict_through_files,
)

from ncm_verify.report import document as doc
from ncm_verify.report import status as claim_status
from ncm_verify.report.markdown import render_markdown
from ncm_verify.report.terminal import render_terminal


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


def test_no_evidence_reports_every_claim_not_run(ledger):
    report = doc.build_report(ledger, None)
    assert report["run"]["verdict"] == "failed" and report["run"]["exit_status"] == 1
    assert "properties: no evidence: the properties were not run" in report["run"]["reasons"]
    assert {c["status"] for c in report["claims"]} == {"not run", "not checkable"}
    assert "not run" in render_terminal(doc.build_document(report))


def test_an_overspent_budget_fails_the_run(ledger, evidence):
    evidence = copy.deepcopy(evidence)
    evidence["properties"] = [p for p in evidence["properties"] if p["outcome"] == "passed"]
    evidence["budget"].update(within_plan=False, run_failed_by_budget=True, note="budget overspent")
    reasons = doc.build_report(ledger, evidence, **PASSING_SELFTESTS)["run"]["reasons"]
    assert "budget: budget overspent" in reasons


def test_distinct_laws_are_counted_per_test_and_the_fewest_kept():
    """A law that never changes is not shown by another test's changing: the property counts the fewer."""
    records = [
        {"name": "first tokens", "law_digest": "same", "expected": [1.0], "n": 1},
        *({"name": "acceptance", "law_digest": f"law {i}", "expected": [1.0], "n": 1} for i in range(12)),
    ]
    assert claim_status.distinct_laws(records) == 1
    assert claim_status.distinct_laws([r for r in records if r["name"] == "acceptance"]) == 12
    assert claim_status.distinct_laws([]) == 0


# --- one verdict: every way a part can fail gives a failing verdict, the same in the report and the exit status ---


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


def hypothesis_claim(ledger: dict) -> dict:
    """C10 as the ledger states it: a research hypothesis, checked by one property (not a Hypothesis one)."""
    claim = claims_by_id(ledger)["C10"]
    claim.pop("not_checkable")
    claim.update(hypothesis=True, properties=["properties/test_drafters.py::test_direction"])
    return claim


def refuting_node() -> dict:
    """C10's property failed by assertion: the data refute the hypothesis."""
    failure = assertion_failure(None, [], "AssertionError: distillation does not beat the baseline")
    return node("properties/test_drafters.py::test_direction", ["C10"], outcome="failed", failure=failure)


def test_a_refuted_hypothesis_is_a_finding_and_a_correct_run_still_passes(ledger, passing, tmp_path):
    hypothesis_claim(ledger)
    passing["properties"].append(refuting_node())
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **PASSING_SELFTESTS)
    assert claims_by_id(report)["C10"]["status"] == claim_status.REFUTED
    assert "refute" in claims_by_id(report)["C10"]["reason"]
    assert (exit_status, report["run"]["verdict"]) == (0, "passed"), report["run"]["reasons"]


def test_an_inconclusive_hypothesis_is_a_finding_a_plain_skip_is_not(ledger, passing, tmp_path):
    claim = hypothesis_claim(ledger)
    weak = node("properties/test_drafters.py::test_direction", ["C10"], outcome="inconclusive")
    passing["properties"].append(weak)
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "r", **PASSING_SELFTESTS)
    assert claims_by_id(report)["C10"]["status"] == claim_status.INCONCLUSIVE_AT_THIS_SCALE
    assert (exit_status, report["run"]["verdict"]) == (0, "passed"), report["run"]["reasons"]
    weak["outcome"] = "skipped"
    claim["properties"] = [weak["property"]]
    exit_status, report = verdict_through_files(ledger, passing, tmp_path / "s", **PASSING_SELFTESTS)
    assert claims_by_id(report)["C10"]["status"] == claim_status.NOT_RUN and exit_status == 1


def test_a_refuted_direction_beside_an_inconclusive_one_reads_refuted(ledger, passing):
    hypothesis_claim(ledger)
    passing["properties"] += [
        refuting_node(),
        node("properties/test_drafters.py::test_direction[features]", ["C10"], outcome="inconclusive"),
    ]
    assert claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))["C10"]["status"] == (
        claim_status.REFUTED
    )


def test_an_error_in_a_hypothesis_property_still_fails_the_run(ledger, passing):
    hypothesis_claim(ledger)
    passing["properties"].append(
        node(
            "properties/test_drafters.py::test_direction",
            ["C10"],
            outcome="error",
            failure={"phase": "call", "kind": "RuntimeError", "message": "RuntimeError: broke"},
        )
    )
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS)
    assert claims_by_id(report)["C10"]["status"] == "failed"
    assert report["run"]["verdict"] == "failed"


def test_a_thorough_only_property_is_not_required_under_ci_but_counts_when_it_ran(ledger, passing):
    smoke = "properties/test_greedy.py::test_sampled_smoke"
    claims_by_id(ledger)["C7"]["thorough_properties"] = [smoke]
    assert claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))["C7"]["status"] == "shown"
    passing["properties"].append(
        node(smoke, ["C7"], outcome="failed", failure=assertion_failure(["C7"], [], "AssertionError: chi-square"))
    )
    assert claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS))["C7"]["status"] == "failed"


def test_a_refuted_hypothesis_prints_under_findings_and_never_as_a_failure(ledger, passing, tmp_path):
    hypothesis_claim(ledger)
    passing["properties"].append(refuting_node())
    document = doc.build_document(doc.build_report(ledger, passing, **PASSING_SELFTESTS))
    assert [f.nodeid for f in document.findings] == ["properties/test_drafters.py::test_direction"]
    assert not document.failures
    printed = render_terminal(document)
    assert "FINDING 1 of 1: properties/test_drafters.py::test_direction" in printed and "FAILURE" not in printed
    assert "FAILURE" not in render_markdown(document) and "Findings" in render_markdown(document)


@pytest.mark.parametrize("impl", ["ncm_verify.reference", "my_port"])
def test_no_line_of_a_passing_run_with_a_finding_says_failed(impl, ledger, passing):
    """A refuted hypothesis is a result: the summary of a run that passed names it a finding, in brief."""
    hypothesis_claim(ledger)
    passing["properties"].append(refuting_node())
    passing["impl"] = impl
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN)
    assert report["run"]["exit_status"] == 0, report["run"]["reasons"]
    printed = render_terminal(doc.build_document(report))
    said = [line for line in printed.splitlines() if re.search(r"\bfail(ed|ure)\b", line, re.I)]
    assert not said, said
    if impl == "ncm_verify.reference":
        assert "C10  finding: hypothesis refuted" in printed and "FINDING 1 of 1" in printed


def test_a_hypothesis_whose_experiment_a_ports_run_left_out_is_the_suites_own_check_not_a_gap(ledger, passing):
    hypothesis_claim(ledger)
    passing["impl"] = "my_port"
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN)
    assert claims_by_id(report)["C10"]["status"] == claim_status.SUITE_CHECK
    assert report["run"]["exit_status"] == 0, report["run"]["reasons"]


@pytest.mark.parametrize("impl", ["my_port", "ncm_verify.reference"])
def test_a_claim_on_the_suites_own_loop_is_shown_by_suite_checks_and_is_the_suites_on_a_port(impl, ledger, passing):
    """A claim whose subject is the suite's own code over mlx-lm (`judges_suite_code`) is shown by properties that
    never call the module; without that field such a claim is not shown, and on a port it is the suite's own."""
    rollback = "properties/test_rollback.py::test_rolled_back_equals_rebuilt"
    claim = claims_by_id(ledger)["C7"]
    claim["properties"] = [rollback]
    passing["properties"].append(node(rollback, ["C7"], calls={}, looked_up=[]))
    passing["properties"] = [
        p for p in passing["properties"] if p["nodeid"] != "properties/test_greedy.py::test_greedy"
    ]
    passing["impl"] = impl
    unmarked = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN))["C7"]["status"]
    claim["judges_suite_code"] = "the suite's exact verifier over mlx-lm's models"
    marked = claims_by_id(doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN))["C7"]["status"]
    if impl == "my_port":
        assert (unmarked, marked) == (claim_status.SUITE_CHECK, claim_status.SUITE_CHECK)
    else:
        assert (unmarked, marked) == (claim_status.NOT_SHOWN, claim_status.SHOWN)


@pytest.mark.parametrize("impl", ["my_port", "ncm_verify.reference"])
def test_a_failing_suite_check_is_reported_apart_on_a_port_and_fails_only_the_references_run(impl, ledger, passing):
    """A property that never reaches the module (no call, no name looked up) is the suite's own check: its failure
    is the same for every module, so it fails the suite's own run and never a port's."""
    identity = "properties/test_chain.py::test_enumeration_identity"
    ledger_claim = claims_by_id(ledger)["C5"]
    ledger_claim["properties"] = [*ledger_claim["properties"], identity]
    failed = assertion_failure(None, [], "AssertionError: the oracle sums to 0.9")
    passing["properties"].append(node(identity, ["C5"], outcome="failed", calls={}, looked_up=[], failure=failed))
    passing["impl"] = impl
    document = doc.build_document(doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN))
    assert (identity, "failed") in document.suite_checks
    printed = render_terminal(document)
    if impl == "my_port":
        assert document.verdict.exit_status == 0, document.verdict.reasons
        assert claims_by_id(document.data)["C5"]["status"] == "shown" and not document.failures
        assert f"not a verdict on the module): 1 never called the module; 1 FAILED: {identity}" in printed
    else:
        assert document.verdict.reasons == (
            "claims: claims failed: C5",
            f"suite checks: 1 suite check failed: {identity}",
        )
        assert [f.nodeid for f in document.failures] == [identity] and "FAILURE 1 of 1" in printed


def test_a_property_that_looked_up_a_name_it_never_called_is_the_modules_not_the_suites(ledger, passing):
    passing["impl"] = "my_port"
    passing["properties"][2].update(
        calls={}, looked_up=["verify_chain"], outcome="failed", failure=assertion_failure(None, [], "AssertionError")
    )
    report = doc.build_report(ledger, passing, **PASSING_SELFTESTS)
    assert report["run"]["exit_status"] == 1 and "properties: 1 property run failed" in report["run"]["reasons"]


def partial_port(passing: dict) -> dict:
    """A port of the chain kernels alone: C5's sampled property judged its verify_chain, another C5 property reached
    only the reference's residual_distribution."""
    passing["impl"] = "my_port"
    passing["implementation"] = {
        "module": "my_port",
        "defines": ["verify_chain"],
        "inherits": ["residual_distribution (from ncm_verify.reference.speculative)"],
        "missing": [],
    }
    for entry in passing["properties"]:
        entry["calls"] = {"verify_chain": {"calls": 30, "own": True, "origin": "my_port"}}
    passing["properties"].append(
        node(
            "properties/test_chain.py::test_residual",
            ["C5"],
            calls={"residual_distribution": {"calls": 3, "own": False, "origin": "ncm_verify.reference.speculative"}},
        )
    )
    return passing


def test_a_partial_port_passes_on_what_it_provides_and_is_never_shown_for_what_it_inherits(ledger, passing):
    claims_by_id(ledger)["C5"]["properties"].append("properties/test_chain.py::test_residual")
    report = doc.build_report(ledger, partial_port(passing), **PASSING_SELFTESTS, run=PASSING_RUN)
    c5 = claims_by_id(report)["C5"]
    assert c5["status"] == claim_status.PARTLY_PROVIDED, c5["reason"]
    assert "judged the module's own code (verify_chain) and passed" in c5["reason"]
    assert "residual_distribution" in c5["reason"]
    assert report["run"]["exit_status"] == 0, report["run"]["reasons"]
    assert report["judged"]["judged"]["verify_chain"]["failed"] == 0
    assert report["judged"]["inherited"] == ["residual_distribution"]
    printed = render_terminal(doc.build_document(report))
    assert "judged, the module's own code: verify_chain" in printed and "inherited, not judged (1)" in printed


@pytest.mark.parametrize(
    "required, missing",
    [
        (["C5"], "required claim C5 is partly provided, not shown"),
        (["SpeculativeKernels"], "required family SpeculativeKernels not provided: residual_distribution (inherited)"),
        (["C7"], None),
    ],
)
def test_a_required_claim_or_family_the_port_lacks_fails_the_run_naming_what_is_missing(
    required, missing, ledger, passing
):
    claims_by_id(ledger)["C5"]["properties"].append("properties/test_chain.py::test_residual")
    run = {**PASSING_RUN, "required": required}
    report = doc.build_report(ledger, partial_port(passing), **PASSING_SELFTESTS, run=run)
    reasons = report["run"]["parts"]["coverage"]["reasons"]
    if missing is None:
        assert reasons == [] and report["run"]["exit_status"] == 0
    else:
        assert len(reasons) == 1 and reasons[0].startswith(missing), reasons
        assert report["run"]["exit_status"] == 1
