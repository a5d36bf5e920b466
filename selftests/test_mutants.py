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

from ncm_verify.mutants import (
    BLOCK_MUTANTS,
    CONCEPT_MUTANTS,
    EVIDENCE_MUTANTS,
    EXACT_STEP_MUTANTS,
    LEVEL_DRAFTING_MUTANTS,
    MUTANTS,
    ONE_FILE_MUTANTS,
    PREFIX_CACHE_MUTANTS,
    TEXT_DRAFTING_MUTANTS,
    TREE_LOOP_MUTANTS,
    TREE_MUTANTS,
    TREE_WALK_MUTANTS,
)
from ncm_verify.report import document as doc
from ncm_verify.report import status
from ncm_verify.report.ledger import read_ledger

ROOT = Path(__file__).resolve().parent.parent
PROPERTY_FILES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "properties").glob("test_*.py"))
PREFIX_PROPERTIES = [path for path in PROPERTY_FILES if "test_prefix" in path]
LEVEL_DRAFTING_PROPERTIES = ["properties/test_level_drafting.py"]
EXACT_STEP_PROPERTIES = ["properties/test_apply_exact.py"]
TREE_PROPERTIES = ["properties/test_tree.py", *EXACT_STEP_PROPERTIES]
"""A tree mutant meets the tree's own properties and the exact steps (the tree's is among them, from the registry)."""
CONCEPT_PROPERTIES = ["properties/test_concept_model.py"]
TEXT_DRAFTING_PROPERTIES = ["properties/test_text_drafting.py"]
TREE_LOOP_PROPERTIES = ["properties/test_tree_loop.py"]
BLOCK_PROPERTIES = [
    "properties/test_apply_exact.py::test_apply_block_takes_the_float64_steps_decisions_on_drawn_uniforms",
    "properties/test_block.py",
]
"""A block mutant meets its exact step first (cheap), then the block's own properties."""
TREE_WALK_PROPERTIES = [
    "properties/test_tree.py::test_half_precision_walks_decide_as_their_float32_values",
    "properties/test_tree.py::test_a_batch_of_walks_decides_as_each_walk_alone",
    *(
        f"properties/test_tree.py::test_walks_below_rejected_siblings_take_the_float64_walks_decisions_at_every_level[{mode}]"
        for mode in ("without_replacement", "with_replacement", "top_k")
    ),
]
"""The walk properties, cheapest catch first: each walk mutant is caught by two of them (issue 28's sweep)."""
FINDINGS = frozenset(
    prop
    for claim in read_ledger(ROOT / "ledger.json")[0]["claims"]
    if claim.get("hypothesis")
    for prop in claim["properties"]
)
"""Properties of hypothesis claims (C10): their failure is a finding about the literature, the same for every
implementation, so it never catches a planted bug (one once stopped a kernel mutant's sweep before test_greedy ran)."""
FINDING_FILES = {prop.split("::")[0] for prop in FINDINGS}
# test_mlx_lm_loop.py judges mlx-lm's code and the exact verifier, never --impl: a mutant cannot change it
KERNEL_PROPERTIES = [
    path
    for path in PROPERTY_FILES
    if "test_prefix" not in path
    and "test_mlx_lm_loop" not in path
    and path not in LEVEL_DRAFTING_PROPERTIES
    and path != "properties/test_tree.py"
    and path != "properties/test_block.py"
    and path not in TEXT_DRAFTING_PROPERTIES
    and path not in CONCEPT_PROPERTIES
    and path not in TREE_LOOP_PROPERTIES
    and path not in FINDING_FILES
]
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
    """The property files the sweep runs against planted bug `name`, by the registry's routing sets."""
    if name in PREFIX_CACHE_MUTANTS:
        return PREFIX_PROPERTIES
    if name in LEVEL_DRAFTING_MUTANTS:
        return LEVEL_DRAFTING_PROPERTIES
    if name in EXACT_STEP_MUTANTS:
        return EXACT_STEP_PROPERTIES
    if name in TREE_LOOP_MUTANTS:
        return TREE_LOOP_PROPERTIES
    if name in TREE_WALK_MUTANTS:
        return TREE_WALK_PROPERTIES
    if name in TREE_MUTANTS:
        return TREE_PROPERTIES
    if name in BLOCK_MUTANTS:
        return BLOCK_PROPERTIES
    if name in TEXT_DRAFTING_MUTANTS:
        return TEXT_DRAFTING_PROPERTIES
    if name in CONCEPT_MUTANTS:
        return CONCEPT_PROPERTIES
    if name in ONE_FILE_MUTANTS:
        return [ONE_FILE_MUTANTS[name]]
    return KERNEL_PROPERTIES


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
