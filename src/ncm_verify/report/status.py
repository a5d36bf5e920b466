"""Claim status derived from evidence, never written by hand.

A claim is *shown* when every property the ledger lists for it ran and passed,
*failed* when any of its property runs failed, *not checkable* when the ledger
says why nothing can check it, and *not run* otherwise (no evidence, any run
skipped, even one parametrisation of a property whose siblings passed, or some
listed property missing from the run).
"""

from __future__ import annotations

import math

SHOWN = "shown"
FAILED = "failed"
NOT_CHECKABLE = "not checkable"
NOT_RUN = "not run"
STATUSES = (SHOWN, FAILED, NOT_CHECKABLE, NOT_RUN)

FAILING_OUTCOMES = ("failed", "error")


def count(number: int, noun: str, plural: str | None = None) -> str:
    """'1 property', '3 properties'."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def reproduce_command(node: dict, impl: str, profile: str) -> str:
    """The shell line that reruns one property exactly as the run did."""
    return f"HYPOTHESIS_PROFILE={profile} .venv/bin/python -m pytest '{node['nodeid']}' --impl={impl}"


def stats_summary(records: list[dict]) -> dict | None:
    """What a property's chi-square tests establish: sizes, worst p-value, detectable deviation."""
    if not records:
        return None
    worst = min(records, key=lambda r: (r["passed"], r["p_value"]))
    return {
        "tests": len(records),
        "failed_tests": sum(not r["passed"] for r in records),
        "n_min": min(r["n"] for r in records),
        "n_max": max(r["n"] for r in records),
        "df_max": max(r["df"] for r in records),
        "p_min": min(r["p_value"] for r in records),
        "alpha": min(r["alpha"] for r in records),
        # the weakest guarantee among its tests: every test detects at least this deviation
        "min_detectable_tv": max(r["min_detectable_tv"] for r in records),
        "pooled_mass_max": max(r["pooled_mass"] for r in records),
        "impossible_count": sum(r["impossible_count"] for r in records),
        "worst": {
            key: worst[key]
            for key in ("name", "n", "df", "statistic", "p_value", "alpha", "expected", "observed",
                        "impossible_count", "context", "passed")
            if key in worst
        },
    }


def largest_difference(differences: list[dict]) -> dict | None:
    """The check that came closest to its tolerance (exact checks count mismatches)."""
    if not differences:
        return None

    def closeness(d):
        if d["tolerance"] > 0:
            return d["difference"] / d["tolerance"]
        return math.inf if d["difference"] > 0 else 0.0

    worst = max(differences, key=lambda d: (closeness(d), d["check"]))
    ratio = closeness(worst)
    return {**worst, "ratio": None if math.isinf(ratio) else ratio}


def property_summary(node: dict, impl: str, profile: str) -> dict:
    """One property run as the report shows it."""
    hypothesis = node.get("hypothesis") or {}
    failure = node.get("failure")
    summary = {
        "nodeid": node["nodeid"],
        "property": node["property"],
        "claims": node.get("claims", []),
        "outcome": node["outcome"],
        "duration_s": node.get("duration_s"),
        "examples": hypothesis.get("examples"),
        "invalid_examples": hypothesis.get("invalid_examples"),
        "stopped_because": hypothesis.get("stopped_because"),
        "statistics": stats_summary(node.get("stats", [])),
        "largest_difference": largest_difference(node.get("differences", [])),
        "skip_reason": node.get("skip_reason"),
        "failure": None,
    }
    if failure:
        summary["failure"] = {**failure, "command": reproduce_command(node, impl, profile)}
    return summary


def claim_nodes(claim: dict, nodes: list[dict]) -> list[dict]:
    """Evidence entries behind a claim: listed by the ledger or marked with the claim id."""
    listed = set(claim["properties"])
    return [n for n in nodes if n["property"] in listed or claim["id"] in n.get("claims", [])]


def derive_status(claim: dict, nodes: list[dict]) -> tuple[str, str]:
    """(status, one-line reason) of a claim given the evidence entries behind it."""
    if claim.get("not_checkable"):
        return NOT_CHECKABLE, claim["not_checkable"]
    failing = [n["nodeid"] for n in nodes if n["outcome"] in FAILING_OUTCOMES]
    if failing:
        return FAILED, f"{len(failing)} of {count(len(nodes), 'property run')} failed: {', '.join(failing)}"
    skipped = [n["nodeid"] for n in nodes if n["outcome"] == "skipped"]
    # a property ran only if it passed and none of its runs (parametrisations) was skipped
    partly_skipped = {n["property"] for n in nodes if n["outcome"] == "skipped"}
    ran = {n["property"] for n in nodes if n["outcome"] == "passed"} - partly_skipped
    missing = [p for p in claim["properties"] if p not in ran]
    if not claim["properties"] and not nodes:
        return NOT_RUN, "the ledger lists no property for it and gives no reason"
    if not nodes:
        return NOT_RUN, f"no evidence: none of its {len(claim['properties'])} properties ran"
    if len(skipped) == len(nodes):
        return NOT_RUN, "every property run was skipped"
    if skipped:
        return NOT_RUN, f"{len(skipped)} of {count(len(nodes), 'property run')} skipped: {', '.join(skipped)}"
    known = [p for p in missing if p in {n["property"] for n in nodes if n["outcome"] == "xfailed"}]
    if known and len(known) == len(missing):  # an xfail is a known upstream bug: neither a pass nor a failure
        listed = count(len(known), "listed property", "listed properties")
        return NOT_RUN, f"{listed} ran only as known upstream bugs (strict xfail): {', '.join(known)}"
    if missing:
        listed = count(len(claim["properties"]), "listed property", "listed properties")
        return NOT_RUN, f"{len(missing)} of {listed} did not pass a run: {', '.join(missing)}"
    examples = sum((n.get("hypothesis") or {}).get("examples") or 0 for n in nodes)
    properties = count(len(ran), "property", "properties")
    return SHOWN, f"{properties} passed in {count(len(nodes), 'run')}, {count(examples, 'example')}"
