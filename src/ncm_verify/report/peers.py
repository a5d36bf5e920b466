"""The peers comparison (`make verify-peers`): per peer and property pass / fail / not applicable with evidence,
each peer's sample sizes and the deviation they detect, its edge cases with reproductions, mlx-lm as judged by
the main run, and the run's own verdict.

Decided here from the JSON `run_peers` leaves (one folder per peer: peer.json, evidence.json, edge_cases.json);
rendered by the report's markdown writer. A failure in a real peer is a finding, not a failure of the run; the
run fails when the planted peer is not caught, or when a peer's run broke (no verdict, no evidence).
"""

from __future__ import annotations

from pathlib import Path

from ncm_verify.evidence import EVIDENCE_FILE, Evidence, Outcome, PropertyRecord, read_json
from ncm_verify.report import mlx_lm_section
from ncm_verify.report import status as claim_status
from ncm_verify.report.markdown import render_table
from ncm_verify.report.model import Table, number
from ncm_verify.report.output import write_json

PEERS_DIR = "peers"
PEER_FILE = "peer.json"
EDGE_CASES_FILE = "edge_cases.json"
COMPARISON_JSON = "peers.json"
COMPARISON_MD = "peers.md"
SCHEMA = "ncm-verify/peers/1"
VERDICTS = {
    Outcome.PASSED: "pass",
    Outcome.FAILED: "fail",
    Outcome.ERROR: "fail (error)",
    Outcome.NOT_APPLICABLE: "not applicable",
    Outcome.NOT_PROVIDED: "not provided",
    Outcome.SKIPPED: "skipped",
    Outcome.XFAILED: "known upstream bug",
}
ACCEPTANCE_PROPERTY = "test_accepted_counts_and_emitted_tokens_follow_their_exact_joint_law"
"""The property whose law is the acceptance law: (drafts, accepted count, emitted token), exact by enumeration."""


def first_lines(text: str | None, count: int = 3) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " / ".join(lines[:count])


def evidence_cell(node: PropertyRecord) -> str:
    """What a property run rests on: samples and p-value, the exact mismatch, or the reason it did not apply."""
    failure = node.failure
    summary = claim_status.stats_summary(node.stats)
    parts = []
    if summary:
        parts.append(
            f"{summary['tests']} chi-square tests, n {summary['n_min']}-{summary['n_max']}, "
            f"min p {number(summary['p_min'])} (alpha {number(summary['alpha'])}), "
            f"detects TV {number(summary['min_detectable_tv'])}"
        )
        if summary["impossible_count"]:
            parts.append(f"{summary['impossible_count']} samples on impossible outcomes")
    if failure:
        parts.append(first_lines(failure.message))
    elif node.skip_reason:
        parts.append(node.skip_reason.removeprefix("Skipped: "))
    elif not summary:
        examples = node.hypothesis.examples if node.hypothesis else None
        parts.append(f"{examples} examples, exact checks" if examples is not None else "one fixed case")
    return "; ".join(parts)


def property_rows(evidence: Evidence | None) -> list[dict]:
    """One row per property run of a peer."""
    rows = []
    for node in evidence.properties if evidence else []:
        rows.append(
            {
                "property": node.nodeid,
                "verdict": VERDICTS.get(node.outcome, node.outcome.value),
                "evidence": evidence_cell(node),
                "reproduce": node.failure.reproduce_failure if node.failure else None,
                "example": node.failure.falsifying_example if node.failure else None,
            }
        )
    return rows


def sample_sizes(evidence: Evidence | None) -> dict | None:
    """The peer's chi-square tests: how many, their n, alpha and the weakest detectable deviation (TV, power 0.99)."""
    records = [r for node in (evidence.properties if evidence else []) for r in node.stats]
    summary = claim_status.stats_summary(records)
    if summary is None:
        return None
    return {
        "tests": summary["tests"],
        "n_min": summary["n_min"],
        "n_max": summary["n_max"],
        "alpha": summary["alpha"],
        "min_detectable_tv": summary["min_detectable_tv"],
        "raw_detectable_tv": summary["raw_detectable_tv"],
    }


def acceptance(evidence: Evidence | None) -> dict | None:
    """The acceptance law's property: verdict and evidence (its law is exact, from the declared rule)."""
    for node in evidence.properties if evidence else []:
        if node.property.endswith(ACCEPTANCE_PROPERTY):
            return {"verdict": VERDICTS.get(node.outcome, node.outcome.value), "evidence": evidence_cell(node)}
    return None


def peer_summary(folder: Path) -> dict:
    """One peer as the comparison shows it, from its folder."""
    facts = read_json(folder / PEER_FILE) or {"name": folder.name, "problem": "no peer.json: it did not run"}
    evidence = Evidence.from_json(read_json(folder / EVIDENCE_FILE))
    rows = property_rows(evidence)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    findings = [row for row in rows if row["verdict"].startswith("fail")]
    problems = [facts["problem"]] if facts.get("problem") else []
    if facts.get("exit_status") not in (None, 0, 1):
        problems.append(f"its pytest run exited {facts['exit_status']}: no verdict")
    if evidence is None and not facts.get("problem"):
        problems.append(f"no {EVIDENCE_FILE}")
    if facts.get("planted") and not problems:
        caught = any(row["verdict"] == "fail" for row in rows)  # by assertion: an error is no catch
        if not caught:
            problems.append(f"the planted bug ({facts['planted']}) was not caught: no property failed by assertion")
    return {
        **facts,
        "counts": counts,
        "findings": len(findings),
        "sample_sizes": sample_sizes(evidence),
        "acceptance": acceptance(evidence),
        "properties": rows,
        "edge_cases": read_json(folder / EDGE_CASES_FILE) or [],
        "problems": problems,
    }


def mlx_lm_rows(main_evidence: Evidence | None) -> dict | None:
    """mlx-lm's loop as the main run (`make verify`) judged it, when its evidence is at hand."""
    if main_evidence is None:
        return None
    return mlx_lm_section.summarize(main_evidence.properties, main_evidence.environment)


def make_comparison(reports: Path) -> dict:
    """The comparison document from `reports`/peers/*/ and the main run's evidence in `reports`."""
    root = Path(reports) / PEERS_DIR
    peers = (
        [peer_summary(folder) for folder in sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []
    )
    reasons = [f"{peer['name']}: {problem}" for peer in peers for problem in peer["problems"]]
    if not any(peer.get("planted") for peer in peers):
        reasons.append("no planted peer ran: the comparison's teeth are not shown")
    return {
        "schema": SCHEMA,
        "verdict": "passed" if not reasons else "failed",
        "exit_status": 0 if not reasons else 1,
        "reasons": reasons,
        "peers": peers,
        "mlx_lm": mlx_lm_rows(Evidence.from_json(read_json(Path(reports) / EVIDENCE_FILE))),
    }


# --- rendering ---


def overview_table(comparison: dict) -> Table:
    rows = []
    for peer in comparison["peers"]:
        sizes = peer["sample_sizes"] or {}
        counts = ", ".join(f"{n} {verdict}" for verdict, n in sorted(peer["counts"].items()))
        role = f"planted: {peer['planted']}" if peer.get("planted") else peer.get("acceptance_rule", "-")
        state = "; ".join(peer["problems"]) or ("caught" if peer.get("planted") else f"{peer['findings']} findings")
        rows.append(
            (
                peer["name"],
                peer.get("versions", "-"),
                role,
                counts or "-",
                f"{sizes.get('n_min', '-')}-{sizes.get('n_max', '-')}" if sizes else "-",
                number(sizes.get("min_detectable_tv")) if sizes else "-",
                f"{peer.get('seconds', '-')} s",
                state,
            )
        )
    drawn = sorted({f"profile {p.get('profile')}, seed {p.get('seed')}" for p in comparison["peers"] if "seed" in p})
    note = (
        f"Examples drawn under {'; '.join(drawn) or 'an unrecorded profile'}. n: samples per chi-square test; "
        "detects TV: the smallest total-variation deviation of the binned law each test detects with power 0.99 "
        "at its alpha (the weakest over the peer's tests). A failure of a real peer is a finding; the planted "
        "peer must fail."
    )
    header = ("peer", "version", "rule", "properties", "n", "detects TV", "wall", "state")
    return Table("Peers", header, rows, note)


def properties_table(peer: dict) -> Table:
    rows = [
        (row["property"].removeprefix("properties/"), row["verdict"], row["evidence"]) for row in peer["properties"]
    ]
    return Table(f"{peer['name']}: properties", ("property", "verdict", "evidence"), rows)


def acceptance_table(comparison: dict) -> Table:
    rows = [
        (peer["name"], peer.get("acceptance_rule", "-"), peer["acceptance"]["verdict"], peer["acceptance"]["evidence"])
        for peer in comparison["peers"]
        if peer.get("acceptance")
    ]
    note = (
        "The acceptance law: per sequence (drafts, accepted count, emitted token) against its exact law under the rule."
    )
    return Table("Acceptance against the declared rule's law", ("peer", "rule", "verdict", "evidence"), rows, note)


def edge_table(peer: dict) -> Table:
    rows = [(case["case"], case["verdict"], case["happened"], case["expected"]) for case in peer["edge_cases"]]
    note = f"Peer version: {peer.get('versions', '-')}. Each reproduction below is the program that gave the verdict."
    return Table(f"{peer['name']}: edge cases", ("case", "verdict", "what happened", "expected"), rows, note)


def mlx_lm_table(mlx_lm: dict) -> Table:
    rows = [(row["property"], row["case"], row["verdict"], first_lines(row["reason"], 1)) for row in mlx_lm["rows"]]
    note = f"mlx-lm {mlx_lm.get('version') or '?'} as the main run (`make verify`, reports/evidence.json) judged it."
    return Table("mlx-lm (main run)", ("property", "case", "verdict", "reason"), rows, note)


def render_markdown(comparison: dict) -> str:
    verdict = comparison["verdict"]
    reasons = f" ({'; '.join(comparison['reasons'])})" if comparison["reasons"] else ""
    parts = ["# ncm-verify: peers compared", "", f"Run verdict: **{verdict}**{reasons}", ""]
    parts.append(render_table(overview_table(comparison)))
    parts.append(render_table(acceptance_table(comparison)))
    if comparison["mlx_lm"]:
        parts.append(render_table(mlx_lm_table(comparison["mlx_lm"])))
    else:
        parts.append("## mlx-lm (main run)\n\nNo evidence of a main run in this folder: run `make verify` first.\n")
    for peer in comparison["peers"]:
        parts.append(render_table(properties_table(peer), "###"))
        if peer["edge_cases"]:
            parts.append(render_table(edge_table(peer), "###"))
            for case in peer["edge_cases"]:
                heading = f"#### {peer['name']}: {case['case']} ({case['verdict']})"
                parts.append(f"{heading}\n\n```python\n{case['reproduction']}\n```\n")
    return "\n\n".join(part.strip() for part in parts if part.strip()) + "\n"


def write_comparison(reports: Path) -> dict:
    """Decide the comparison from `reports` and write peers.json and peers.md there."""
    comparison = make_comparison(reports)
    write_json(comparison, Path(reports) / COMPARISON_JSON)
    (Path(reports) / COMPARISON_MD).write_text(render_markdown(comparison), encoding="utf-8")
    return comparison
