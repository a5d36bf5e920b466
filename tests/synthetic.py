"""Synthetic evidence shared by the report, verdict, CLI and run tests: entries, self-test files, helpers."""

from __future__ import annotations

import json
from pathlib import Path

from ncm_verify.cli import main
from ncm_verify.evidence import files
from ncm_verify.evidence.chi_square import power_case_names
from ncm_verify.report import document as doc

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


def greedy_and_uncheckable_claims(claim: dict) -> list[dict]:
    """C7 (one greedy property, under `claim`'s sources and paths) and C10 (not checkable), as in each test ledger."""
    return [
        {"id": "C7", "statement": "greedy exact", **claim, "properties": ["properties/test_greedy.py::test_greedy"]},
        {
            "id": "C10",
            "statement": "a hypothesis",
            "sources": [],
            "paths": [],
            "properties": [],
            "not_checkable": "literature only",
        },
    ]


def claims_by_id(report: dict) -> dict:
    return {claim["id"]: claim for claim in report["claims"]}


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
            for name in power_case_names()
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


def verdict_through_files(ledger: dict, evidence: dict, folder: Path, **selftests) -> tuple[int, dict]:
    """Write the run's JSON (its run record among it), rebuild the report with the CLI: (exit status, verify.json)."""
    folder.mkdir()
    (folder / "evidence.json").write_text(json.dumps(evidence))
    (folder / files.RUN_FILE).write_text(json.dumps(PASSING_RUN))
    for name, data in selftests.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    (folder / "ledger.json").write_text(json.dumps(ledger))
    exit_status = main(["report", "--reports", str(folder), "--ledger", str(folder / "ledger.json")])
    return exit_status, json.loads((folder / files.VERIFY_JSON).read_text())


def assertion_failure(claims: list[str], kernels: list[str], message: str, **extra) -> dict:
    """The failure the plugin records for a property whose check failed on an example calling `kernels`."""
    return {"phase": "call", "kind": "assertion", "claims": claims, "kernels": kernels, "message": message, **extra}
