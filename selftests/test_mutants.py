"""Planted bugs must make the suite fail: each mutant is caught by some property failing by assertion.

An exception other than a failed check is never a catch. One raised by the mutant's own code inside a
property (say, its cache refusing a file it wrote) is listed beside the bug; an error in a fixture's
setup or teardown, an import error, a pytest exit status other than 0 or 1, or a timeout means the
suite itself is broken: the sweep fails and says so.
"""

import json
from pathlib import Path

import pytest
from planted_sweep import SWEEP, Sweep

from ncm_verify import mutants
from ncm_verify.mutants import EVIDENCE_MUTANTS, MUTANTS, Catchers, catchers_of
from ncm_verify.report import document as doc
from ncm_verify.report import status
from ncm_verify.report.ledger import read_ledger

ROOT = Path(__file__).resolve().parent.parent
LEDGER = read_ledger(ROOT / "ledger.json")[0]
FINDINGS = frozenset(prop for claim in LEDGER["claims"] if claim.get("hypothesis") for prop in claim["properties"])
"""Properties of hypothesis claims (C10): their failure is a finding about the literature, the same for every
implementation, so it never catches a planted bug (one once stopped a kernel mutant's sweep before test_greedy ran)."""
FILTERED_PROPERTIES = ["properties/test_chain.py", "properties/test_greedy.py"]
NO_VERDICT = "no verdict: a missing property file"
"""A job of the sweep whose pytest session collects nothing (exit status 4): it must break the sweep."""
BROKEN_KINDS = ("ImportError", "ModuleNotFoundError", "ImplementationError", "UsageError")
"""Exceptions that say the suite or its set-up is broken, wherever they are raised."""


def breaks_the_sweep(node: dict) -> bool:
    failure = node.get("failure") or {}
    kind = failure.get("kind") or ""
    return failure.get("phase") != "call" or any(broken in kind for broken in BROKEN_KINDS)


def properties_for(name: str) -> list[str]:
    """What the sweep runs against planted bug `name`: the property files the ledger lists for the claims it breaks
    (`ncm_verify.mutants.CATCHERS`), less those blind to it, or the files and nodes among them its row names."""
    catchers = catchers_of(name)
    listed = [prop for claim in LEDGER["claims"] if claim["id"] in catchers.claims for prop in claim["properties"]]
    files = {prop.split("::")[0] for prop in listed}
    named = {prop.split("[")[0] for prop in (*catchers.sweep, *catchers.blind, *catchers.first)}
    if not named <= files | set(listed):
        raise ValueError(
            f"name: {name}'s catchers name {sorted(named - files - set(listed))}, unlisted by {catchers.claims}"
        )
    first_files = list(dict.fromkeys(prop.split("::")[0] for prop in catchers.first))
    rest = sorted(files - set(catchers.blind) - set(first_files))
    return list(catchers.sweep) or [*first_files, *rest]


def test_each_planted_bug_is_swept_against_properties_its_claims_list_and_a_row_naming_others_is_refused(
    monkeypatch,
):
    assert all(properties_for(name) for name in MUTANTS)
    assert properties_for("tree_mass_not_reset") == ["properties/test_tree.py", "properties/test_apply_exact.py"]
    assert properties_for("tree_loop_positions_by_index") == ["properties/test_tree_loop.py"]  # the longest prefix
    cache_files = properties_for("cache_lru_ignores_hits")  # its stateful model first, then every other prefix file
    assert cache_files[0] == "properties/test_prefix_cache_model.py" and len(set(cache_files)) == len(cache_files) > 1
    monkeypatch.setitem(mutants.CATCHERS, "cache_", Catchers(("C15",), sweep=("properties/test_chain.py",)))
    with pytest.raises(ValueError, match=r"^name: cache_lru_ignores_hits's catchers name \['properties/test_chain"):
        properties_for("cache_lru_ignores_hits")
    with pytest.raises(ValueError, match="^name: 'no_such_bug'"):
        catchers_of("no_such_bug")


def sweep_jobs(scratch: Path) -> list[dict]:
    """Every planted bug against its properties (each stops at its first failure by assertion), the filtering
    mutant against the properties it thins (run to the end), and one run that must break the sweep."""

    def job(name: str, module: str, files: list[str], stop_when_caught: bool = True) -> dict:
        folder = str(scratch / name.replace(" ", "-").replace(":", ""))
        return {
            "name": name,
            "module": module,
            "files": files,
            "report_dir": folder,
            "stop_when_caught": stop_when_caught,
            "first": list(catchers_of(name).first) if name in MUTANTS else [],
        }

    return [
        *(job(name, f"ncm_verify.mutants.{name}", properties_for(name)) for name in sorted(MUTANTS)),
        *(job(name, f"ncm_verify.mutants.{name}", FILTERED_PROPERTIES, False) for name in sorted(EVIDENCE_MUTANTS)),
        job(NO_VERDICT, "ncm_verify.reference", ["properties/test_missing.py"]),
    ]


def start_planted_sweep(scratch: Path, env: dict, workers: int) -> Sweep:
    """Start the sweep's workers as soon as collection ends (selftests/conftest.py), so that the other planted-bug
    self-tests run while they work; the tests below wait for its results."""
    return Sweep(sweep_jobs(scratch), scratch, env, workers)


@pytest.fixture(scope="session")
def sweep(request) -> dict[str, tuple[dict, str | None]]:
    """Job name -> (its evidence.json, why the sweep broke on it, or None)."""
    return request.config.stash[SWEEP].results()


def sweep_verdict(name: str, module: str, evidence: dict, broken: str | None) -> dict:
    """What one planted bug did to the properties: caught only by a property failing by assertion."""
    nodes = evidence.get("properties", [])
    failed = sorted(n["nodeid"] for n in nodes if n["outcome"] == "failed" and n.get("property") not in FINDINGS)
    erred = sorted((n for n in nodes if n["outcome"] == "error"), key=lambda n: n["nodeid"])
    errors = [f"{n['nodeid']} ({(n.get('failure') or {}).get('kind')})" for n in erred]
    broken_runs = [label for label, n in zip(errors, erred) if breaks_the_sweep(n)]
    if broken is None and broken_runs:
        broken = f"{len(broken_runs)} property runs broke in set-up or import: {', '.join(broken_runs)}"
    if broken is None and not nodes:
        broken = "no property ran"
    return {
        "name": name,
        "module": module,
        "description": MUTANTS.get(name) or EVIDENCE_MUTANTS.get(name),
        "caught": bool(failed) and broken is None,
        "caught_by": failed,
        "failed": failed,
        "errors": errors,
        "passed": sorted(n["nodeid"] for n in nodes if n["outcome"] == "passed"),
        "sweep_error": broken,
    }


def keep(reports: Path, verdict: dict) -> None:
    (reports / "mutants").mkdir(exist_ok=True)
    (reports / "mutants" / f"{verdict['name']}.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_planted_bug_is_caught_by_some_property(name, sweep, reports, request):
    module = f"ncm_verify.mutants.{name}"
    evidence, broken = sweep[name]
    verdict = {**sweep_verdict(name, module, evidence, broken), **request.config.stash[SWEEP].cost(name)}
    keep(reports, verdict)
    assert verdict["sweep_error"] is None, f"the sweep against {module} broke: {verdict['sweep_error']}"
    assert verdict["caught"], f"planted bug {name} ({MUTANTS[name]}) passed every property: {verdict['passed']}"


def test_filtered_evidence_is_never_called_shown(sweep, reports):
    """Properties that pass on the few examples a kernel lets through are not evidence for their claims."""
    name = "filtered_evidence"
    module = f"ncm_verify.mutants.{name}"
    evidence, broken = sweep[name]
    assert broken is None, f"the run against {module} broke: {broken}"
    ledger, _ = read_ledger(ROOT / "ledger.json")
    ran = {node["property"] for node in evidence["properties"]}
    for claim in ledger["claims"]:  # judge the claims on these properties alone, so only filtering can fail them
        claim["properties"] = [node for node in claim["properties"] if node in ran]
    report = doc.build_report(ledger, evidence)
    touched = {claim for node in evidence["properties"] for claim in node["claims"]}
    statuses = {c["id"]: (c["status"], c["reason"]) for c in report["claims"] if c["id"] in touched}
    refused = {claim: s == status.NOT_SHOWN and "filtered" in why for claim, (s, why) in statuses.items()}
    verdict = {**sweep_verdict(name, module, evidence, None), "caught_by_verdict": statuses}
    verdict["caught"] = bool(refused) and all(refused.values()) and report["run"]["verdict"] != "passed"
    keep(reports, verdict)
    assert not verdict["failed"] and not verdict["errors"], "the filtering mutant should pass vacuously, not fail"
    assert verdict["caught"], f"vacuous passes were called evidence: claim statuses {statuses}"


def run_of(nodeid: str, outcome: str, phase: str = "call", kind: str = "assertion") -> dict:
    return {"nodeid": nodeid, "property": nodeid, "outcome": outcome, "failure": {"phase": phase, "kind": kind}}


FINDING = next(iter(sorted(FINDINGS)))


@pytest.mark.parametrize(
    "runs, caught, broken",
    [
        ([run_of("a", "failed")], True, None),
        ([run_of("a", "error", kind="TypeError")], False, None),  # the mutant raised: listed, not a catch
        ([run_of("a", "failed"), run_of("b", "error", kind="CacheFileError")], True, None),
        ([run_of("a", "failed"), run_of("b", "error", phase="setup", kind="error in setup")], False, "set-up"),
        ([run_of("a", "failed"), run_of("b", "error", kind="ModuleNotFoundError")], False, "import"),
        ([], False, "no property ran"),
        ([run_of(FINDING, "failed")], False, None),  # a refuted hypothesis fails for every module: not a catch
    ],
)
def test_only_a_failure_by_assertion_catches_a_bug_and_a_broken_set_up_breaks_the_sweep(runs, caught, broken):
    verdict = sweep_verdict("ratio_inverted", "m", {"properties": runs}, None)
    assert verdict["caught"] is caught
    assert (verdict["sweep_error"] is None) if broken is None else (broken in verdict["sweep_error"])


def test_a_pytest_exit_status_without_a_verdict_breaks_the_sweep(sweep):
    evidence, broken = sweep[NO_VERDICT]
    assert broken is not None and broken.startswith("pytest exited 4")
