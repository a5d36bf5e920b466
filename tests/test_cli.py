"""`ncm-verify report` (cli.py): rebuilding the report from a run's JSON, its files and exit status."""

from __future__ import annotations

import json

from ncm_verify.cli import main
from ncm_verify.evidence import files


def test_same_evidence_gives_identical_report_bytes(ledger, evidence, tmp_path):
    outputs = []
    for run in ("a", "b"):
        folder = tmp_path / run
        folder.mkdir()
        (folder / "evidence.json").write_text(json.dumps(evidence))
        (tmp_path / "ledger.json").write_text(json.dumps(ledger))
        assert main(["report", "--reports", str(folder), "--ledger", str(tmp_path / "ledger.json")]) == 1
        outputs.append(
            [(folder / name).read_bytes() for name in (files.VERIFY_JSON, files.VERIFY_MD, files.VERIFY_HTML)]
        )
    assert outputs[0] == outputs[1]
    assert b"Device(gpu, 0)" in outputs[0][2]  # every figure names the MLX device


def test_one_property_run_by_pytest_alone_rebuilds_as_failed_and_says_what_was_not_run(ledger, passing, tmp_path):
    """README's "One property, still with a report": evidence only, no self-tests and no run record."""
    folder = tmp_path / "quick"
    folder.mkdir()
    (folder / files.EVIDENCE_FILE).write_text(json.dumps(passing))
    (folder / "ledger.json").write_text(json.dumps(ledger))
    assert main(["report", "--reports", str(folder), "--ledger", str(folder / "ledger.json")]) == 1
    parts = json.loads((folder / files.VERIFY_JSON).read_text())["run"]["parts"]
    failed = {name: part["reasons"] for name, part in parts.items() if not part["passed"]}
    assert sorted(failed) == ["calibration", "phases", "planted bugs"], failed
    assert failed["planted bugs"] == ["not run: no mutants.json"] and "no run record" in failed["phases"][0]
