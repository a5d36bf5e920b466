"""Planted bugs must make the suite fail: each mutant is caught by some property failing by assertion.

An error, an import or collection error, a pytest exit status other than 0 or 1, or a timeout
is not a catch: it breaks the sweep itself, and the sweep says so.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ncm_verify.mutants import EVIDENCE_MUTANTS, MUTANTS, PREFIX_CACHE_MUTANTS
from ncm_verify.report import document as doc
from ncm_verify.report import status
from ncm_verify.report.ledger import read_ledger

pytestmark = pytest.mark.teeth

ROOT = Path(__file__).resolve().parent.parent
PROPERTY_FILES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "properties").glob("test_*.py"))
PREFIX_PROPERTIES = [path for path in PROPERTY_FILES if "test_prefix" in path]
KERNEL_PROPERTIES = [path for path in PROPERTY_FILES if "test_prefix" not in path]
FILTERED_PROPERTIES = ["properties/test_chain.py", "properties/test_greedy.py"]
SWEEP_TIMEOUT = 600
VERDICT_EXITS = {0: "every property passed", 1: "some property failed"}


def run_properties(module: str, files: list[str], scratch: Path, env: dict) -> tuple[dict, str | None]:
    """Run the properties in `files` against `module`: (evidence.json, why the sweep broke or None)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *files, f"--impl={module}", "-q", "-p", "no:xdist",
             f"--ncm-report-dir={scratch}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=SWEEP_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {SWEEP_TIMEOUT} s"
    evidence = doc.read_json(scratch / doc.EVIDENCE_FILE) or {}
    if done.returncode not in VERDICT_EXITS:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        return evidence, f"pytest exited {done.returncode} (not a verdict): {' | '.join(tail)}"
    return evidence, None


def sweep_verdict(name: str, module: str, evidence: dict, broken: str | None) -> dict:
    """What one planted bug did to the properties: caught only by a property failing by assertion."""
    nodes = evidence.get("properties", [])
    failed = sorted(n["nodeid"] for n in nodes if n["outcome"] == "failed")
    errors = sorted(f"{n['nodeid']} ({(n.get('failure') or {}).get('kind')})" for n in nodes if n["outcome"] == "error")
    if broken is None and errors:
        broken = f"{len(errors)} property runs errored instead of failing: {', '.join(errors)}"
    if broken is None and not nodes:
        broken = "no property ran"
    return {
        "name": name, "module": module, "description": MUTANTS.get(name) or EVIDENCE_MUTANTS.get(name),
        "caught": bool(failed) and broken is None, "caught_by": failed, "failed": failed, "errors": errors,
        "passed": sorted(n["nodeid"] for n in nodes if n["outcome"] == "passed"), "sweep_error": broken,
    }


def keep(reports: Path, verdict: dict) -> None:
    (reports / "mutants").mkdir(exist_ok=True)
    (reports / "mutants" / f"{verdict['name']}.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_planted_bug_is_caught_by_some_property(name, tmp_path, reports, nested_environment):
    module = f"ncm_verify.mutants.{name}"
    files = PREFIX_PROPERTIES if name in PREFIX_CACHE_MUTANTS else KERNEL_PROPERTIES
    evidence, broken = run_properties(module, files, tmp_path, nested_environment("selftest"))
    verdict = sweep_verdict(name, module, evidence, broken)
    keep(reports, verdict)
    assert verdict["sweep_error"] is None, f"the sweep against {module} broke: {verdict['sweep_error']}"
    assert verdict["caught"], f"planted bug {name} ({MUTANTS[name]}) passed every property: {verdict['passed']}"


def test_filtered_evidence_is_never_called_shown(tmp_path, reports, nested_environment):
    """Properties that pass on the few examples a kernel lets through are not evidence for their claims."""
    name = "filtered_evidence"
    module = f"ncm_verify.mutants.{name}"
    evidence, broken = run_properties(module, FILTERED_PROPERTIES, tmp_path, nested_environment("selftest"))
    assert broken is None, f"the run against {module} broke: {broken}"
    ledger, problems = read_ledger(ROOT / "ledger.json")
    report = doc.build_report(ledger, evidence, ledger_problems=problems)
    touched = {claim for node in evidence["properties"] for claim in node["claims"]}
    statuses = {c["id"]: c["status"] for c in report["claims"] if c["id"] in touched}
    verdict = {**sweep_verdict(name, module, evidence, None), "caught_by_verdict": statuses}
    verdict["caught"] = not any(s == status.SHOWN for s in statuses.values()) and report["run"]["verdict"] != "passed"
    keep(reports, verdict)
    assert statuses, f"no claim was touched by {FILTERED_PROPERTIES}"
    assert verdict["caught"], f"vacuous passes were called evidence: claim statuses {statuses}"
