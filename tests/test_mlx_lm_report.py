"""The report's mlx-lm section: a strict xfail that fails is a known upstream bug, never a pass or a failure
of the run; a strict xfail that passes (mlx-lm fixed it) fails the run."""

from __future__ import annotations

import json
import subprocess
import textwrap

from ncm_verify.evidence import Evidence, PropertyRecord
from ncm_verify.report import markdown, mlx_lm_section
from ncm_verify.report.document import build_document, build_report

SUITE = """
import pytest

@pytest.mark.claim("C8")
@pytest.mark.xfail(strict=True, reason="mlx-lm #1 (repro: f())")
def test_known_bug():
    assert 1 == 2

@pytest.mark.claim("C8")
@pytest.mark.xfail(strict=True, reason="mlx-lm #2 fixed upstream")
def test_fixed_bug():
    assert 1 == 1

@pytest.mark.claim("C8")
def test_pass():
    assert True
"""


def run_suite(tmp_path, run_pytest) -> tuple[subprocess.CompletedProcess, dict]:
    folder = tmp_path / "properties"
    folder.mkdir()
    (folder / "test_mlx_lm_loop.py").write_text(textwrap.dedent(SUITE))
    result = run_pytest(tmp_path, "properties", f"--ncm-report-dir={tmp_path / 'reports'}")
    return result, json.loads((tmp_path / "reports" / "evidence.json").read_text())


def test_a_failing_strict_xfail_is_a_known_upstream_bug_and_a_passing_one_fails_the_run(tmp_path, run_pytest_inprocess):
    result, evidence = run_suite(tmp_path, run_pytest_inprocess)
    outcomes = {n["nodeid"].rsplit("::", 1)[1]: n["outcome"] for n in evidence["properties"]}
    assert outcomes == {"test_known_bug": "xfailed", "test_fixed_bug": "failed", "test_pass": "passed"}
    assert result.returncode == 1, result.stdout  # the XPASS(strict) alone fails the run
    section = mlx_lm_section.summarize(Evidence.from_json(evidence).properties, evidence["environment"])
    verdicts = {row["property"]: (row["verdict"], row["reason"]) for row in section["rows"]}
    assert verdicts["test_known_bug"] == ("known upstream bug", "mlx-lm #1 (repro: f())")
    assert verdicts["test_fixed_bug"][0] == "fail" and "XPASS(strict)" in verdicts["test_fixed_bug"][1]
    assert verdicts["test_pass"] == ("pass", "")
    assert section["version"] == evidence["environment"]["mlx_lm"] and section["version"]


def test_the_markdown_report_shows_the_section_with_the_version_and_each_verdict(tmp_path, run_pytest_inprocess):
    _, evidence = run_suite(tmp_path, run_pytest_inprocess)
    ledger = {"sources": [], "claims": []}
    text = markdown.render_markdown(build_document(build_report(ledger, evidence)))
    assert f"## mlx-lm {evidence['environment']['mlx_lm']} under test" in text
    assert "| test_known_bug |  | known upstream bug |" in text
    assert "1 pass, 1 known upstream bug, 1 fail" in text
    run = build_report(ledger, evidence)["run"]
    assert run["verdict"] == "failed" and run["outcomes"] == {"failed": 1, "passed": 1, "xfailed": 1}


def test_a_claim_whose_property_ran_only_as_a_known_upstream_bug_is_held_back_as_one_and_says_why():
    from ncm_verify.report.status import KNOWN_UPSTREAM_BUGS, derive_status, property_summary

    claim = {"id": "C8", "properties": ["p.py::test_a", "p.py::test_b"]}
    nodes = [
        {"nodeid": "p.py::test_a", "property": "p.py::test_a", "outcome": "passed"},
        {"nodeid": "p.py::test_b[mlx-lm]", "property": "p.py::test_b", "outcome": "xfailed"},
    ]
    status, reason = derive_status(
        claim, [property_summary(PropertyRecord.from_json(n), {"impl": "ncm_verify.reference"}, "C8") for n in nodes]
    )
    assert status == KNOWN_UPSTREAM_BUGS and reason.startswith("1 listed property ran only as known upstream bugs"), (
        reason
    )


class Item:
    """A collected node as the expected-failure hook sees it: its id and the marks added to it."""

    def __init__(self, nodeid: str):
        self.nodeid, self.marks = nodeid, []

    def add_marker(self, mark) -> None:
        self.marks.append(mark)


def test_the_table_marks_its_nodes_strict_xfails_and_names_rows_matching_no_node_of_a_collected_property():
    from ncm_verify.pytest_plugin.expected import apply_expected_failures

    table = {"p.py::test_a[x]": "bug #1", "p.py::test_a[typo]": "bug #2", "q.py::test_b[x]": "bug #3"}
    items = [Item("p.py::test_a[x]"), Item("p.py::test_a[y]")]
    unmatched = apply_expected_failures(items, table)
    assert unmatched == ["p.py::test_a[typo]"]  # q.py was not collected: its row says nothing of this run
    [mark] = items[0].marks
    assert mark.name == "xfail" and mark.kwargs == {"strict": True, "reason": "bug #1", "raises": AssertionError}
    assert not items[1].marks


def test_every_known_upstream_bug_names_a_property_of_the_ledger_and_a_bug_other_than_an_assertion_says_so():
    from ncm_verify.mlx_lm_real.known_bugs import KNOWN_UPSTREAM_BUGS, UNBOUNDED_BUDGET, expected_failure
    from ncm_verify.report.ledger import read_ledger
    from ncm_verify.run import ROOT

    listed = {prop for claim in read_ledger(ROOT / "ledger.json")[0]["claims"] for prop in claim["properties"]}
    assert {nodeid.split("[", 1)[0] for nodeid in KNOWN_UPSTREAM_BUGS} <= listed
    assert expected_failure(UNBOUNDED_BUDGET) == (AssertionError, ValueError)
