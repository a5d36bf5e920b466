"""The report writers on synthetic evidence: the document, Markdown, HTML and terminal renderings."""

from __future__ import annotations

from synthetic import PASSING_RUN, PASSING_SELFTESTS, REPRODUCE, assertion_failure, chi_square_record, claims_by_id

from ncm_verify.report import document as doc
from ncm_verify.report.html import render_html
from ncm_verify.report.markdown import render_markdown
from ncm_verify.report.terminal import render_terminal


def test_a_failed_property_fails_its_claim_with_the_reproduction_line(ledger, evidence):
    report = doc.build_report(ledger, evidence)
    failure = claims_by_id(report)["C2"]["properties"][0]["failure"]
    assert failure["reproduce_failure"] == REPRODUCE
    assert failure["command"] == (
        "HYPOTHESIS_PROFILE=ci .venv/bin/python -m pytest 'properties/test_prefix.py::test_cached' -p no:xdist "
        "--impl=ncm_verify.reference --ncm-planned-tests=60"
    )
    assert report["run"]["verdict"] == "failed"
    for text in (render_markdown(doc.build_document(report)), render_html(doc.build_document(report))):
        assert REPRODUCE.replace("'", "&#x27;") in text or REPRODUCE in text
        assert "seed=3" in text


def test_html_is_self_contained(ledger, evidence):
    calibration = {
        "alpha": 0.05,
        "runs": 100,
        "rejections": 4,
        "binomial_p_value": 0.74,
        "p_values": [i / 100 for i in range(100)],
        "planted": {"name": "ratio_inverted", "runs": 20, "rejections": 20, "rejection_rate": 1.0},
    }
    page = render_html(doc.build_document(doc.build_report(ledger, evidence, calibration=calibration)))
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
    assert "SURVIVED" in render_markdown(doc.build_document(report))


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
    assert '<a href="bench.json">' in render_html(doc.build_document(report))


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
    lines = render_terminal(
        doc.build_document(doc.build_report(ledger, passing, **PASSING_SELFTESTS, run=PASSING_RUN))
    ).splitlines()
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


def test_rebuilding_the_report_imports_no_harness_no_scipy_no_hypothesis_and_no_mlx(ledger, evidence, tmp_path):
    """`ncm-verify report` reads JSON: the statistics, test machinery and kernels that wrote it stay unimported."""
    import json
    import subprocess
    import sys

    (tmp_path / "evidence.json").write_text(json.dumps(evidence))
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    script = (
        "import sys; from ncm_verify.cli import main; "
        f"main(['report', '--reports', {str(tmp_path)!r}, '--ledger', {str(tmp_path / 'ledger.json')!r}]); "
        "print('IMPORTED', *sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'hypothesis', 'mlx') or "
        "m.startswith(('ncm_verify.harness', 'ncm_verify.reference', 'ncm_verify.mutants'))))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert (tmp_path / "verify.html").exists(), "the report was rebuilt"
    assert out.splitlines()[-1] == "IMPORTED", out.splitlines()[-1]
