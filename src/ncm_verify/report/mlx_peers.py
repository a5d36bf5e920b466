"""The MLX speculative decoders' report (`make verify-peers PEERS=...`): per package and property, passed / finding
/ not applicable with its reason, each finding's evidence and reproduction, each planted control's verdict.

Decided from the JSON lines `mlx_peer_properties/conftest.py` writes per property run; written beside the main
report as peers-mlx.md, peers-mlx.html and peers-mlx.json. A finding is a strict expected failure of
`peers.mlx_findings`; the run fails when a peer's run gave no verdict, a property failed outside that table
(a new finding to look at, or a broken adapter), a finding went away (XPASS), or a planted control was not caught.
"""

from __future__ import annotations

import dataclasses
from html import escape
from pathlib import Path

from ncm_verify.report import html as html_report
from ncm_verify.report.markdown import render_table
from ncm_verify.report.model import Table
from ncm_verify.report.output import write_json

PROPERTIES = {
    1: "temperature 0 equals plain decoding",
    2: "each sampled token is the rule's output on the exact conditional; the first tokens' law fits",
    3: "batch equals rows",
    4: "sampling options act as on plain decoding",
    5: "rollback equals rebuilt",
    6: "no request parameter silently ignored",
}
"""The six properties judging MLX speculative decoders, by the number a test's ``peer_property`` marker names."""

PREFIX_RULES = {
    1: "served == uncached",
    2: "reuse as documented",
    3: "evicted never served; a reuse never changes its entry",
    4: "speculative: entries equal their keys'",
    5: "persisted: restored exactly or refused",
    6: "serves after a failed request",
}
"""The rules of `mlx_peer_properties/prefix_cache_machine.py` judging prefix caches as served, by the number a
test's ``prefix_rule`` marker names (docs/prefix-engines.md)."""


@dataclasses.dataclass(frozen=True)
class PeerRun:
    name: str
    pin: str
    left_out: str
    exit_status: int
    seconds: float
    records: list[dict]


def property_cell(records: list[dict]) -> str:
    """One cell: the worst verdict first (failed, finding, passed, not applicable), with counts and a reason."""
    own = [r for r in records if "planted" not in r["nodeid"]]
    if not own:
        return "not run"
    by_status: dict[str, list[dict]] = {}
    for record in own:
        by_status.setdefault(record["status"], []).append(record)
    parts = []
    for status in ("failed", "xpassed", "finding", "passed", "not applicable"):
        if status in by_status:
            count = len(by_status[status])
            parts.append(f"{status} ({count})")
    if set(by_status) == {"not applicable"}:
        reasons = dict.fromkeys(r["detail"].removeprefix("not applicable: ") for r in by_status["not applicable"])
        return "not applicable: " + " / ".join(reasons)
    return ", ".join(parts)


def planted_cell(records: list[dict]) -> str:
    planted = [r for r in records if "planted" in r["nodeid"]]
    caught = [r for r in planted if r["status"] == "planted caught"]
    if not planted:
        return "none"
    return f"caught by {len(caught)} of {len(planted)}" if caught else f"NOT caught ({len(planted)} runs)"


def problems(run: PeerRun) -> list[str]:
    """Why this peer's run fails the report: no verdict, an unexpected failure, a vanished finding, no teeth."""
    found = []
    if not run.records:
        found.append(f"{run.name}: no property gave a verdict (exit status {run.exit_status})")
    for record in run.records:
        if record["status"] in ("failed", "xpassed"):
            found.append(f"{run.name}: {record['nodeid']} {record['status']}")
    planted = [r for r in run.records if "planted" in r["nodeid"]]
    judged = any(r["status"] != "not applicable" for r in run.records)  # a peer that cannot run plants nothing
    if judged and (not planted or any(r["status"] != "planted caught" for r in planted)):
        found.append(f"{run.name}: a planted control was not caught")
    return found


def prefix_table(runs: list[PeerRun]) -> Table:
    """Engine x rule for the runs that judge prefix caches (records with ``rule``)."""
    judged = [run for run in runs if any(r.get("rule") for r in run.records)]
    return Table(
        "Prefix caches as served: per engine and rule",
        ("engine", *(f"{n}. {title}" for n, title in PREFIX_RULES.items()), "planted control", "seconds (2 cores)"),
        [
            (
                run.pin,
                *(property_cell([r for r in run.records if n in (r.get("rule") or [])]) for n in PREFIX_RULES),
                planted_cell([r for r in run.records if r.get("rule")]),
                f"{run.seconds:.0f}",
            )
            for run in judged
        ],
        note="Each engine served for real in its own environment (.peers/<name>/) and judged by one state machine "
        "(mlx_peer_properties/prefix_cache_machine.py); counts are property runs (node ids). A finding is a strict "
        "expected failure of ncm_verify.peers.mlx_findings.",
    )


def tables(runs: list[PeerRun]) -> tuple[Table, ...]:
    decoders = [run for run in runs if not run.records or any(r["property"] for r in run.records)]
    verdicts = Table(
        "MLX speculative decoders: per package and property",
        ("package", *(f"{n}. {title}" for n, title in PROPERTIES.items()), "planted control", "seconds (2 cores)"),
        [
            (
                run.pin,
                *(property_cell([r for r in run.records if n in (r["property"] or [])]) for n in PROPERTIES),
                planted_cell([r for r in run.records if not r.get("rule")]),
                f"{run.seconds:.0f}",
            )
            for run in decoders
        ],
        note="Each package judged on its own code in its own environment (.peers/<name>/); counts are property "
        "runs (node ids). A finding is a strict expected failure of ncm_verify.peers.mlx_findings.",
    )
    findings = Table(
        "Findings",
        ("package", "property run", "what differs, where, reproduction"),
        [
            (run.pin, r["nodeid"].split("::", 1)[1], r["detail"])
            for run in runs
            for r in run.records
            if r["status"] == "finding"
        ],
    )
    environments = Table(
        "Environments",
        ("package", "exit status", "dependencies left out"),
        [(run.pin, str(run.exit_status), run.left_out) for run in runs],
    )
    return verdicts, prefix_table(runs), findings, environments


def write(runs: list[PeerRun], reports: Path) -> int:
    """peers-mlx.{md,html,json} under `reports`; returns the exit status (1 when `problems` found any)."""
    found = [problem for run in runs for problem in problems(run)]
    verdict = "fail: " + "; ".join(found) if found else "pass: every peer judged, every planted control caught"
    parts = tables(runs)
    markdown = "\n".join(
        ["# MLX speculative decoders and prefix caches", "", f"Verdict: {verdict}", ""]
        + [render_table(t) for t in parts]
    )
    (reports / "peers-mlx.md").write_text(markdown, encoding="utf-8")
    body = "\n".join(html_report.render_table(t) for t in parts)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>MLX speculative decoders and prefix caches</title>"
        f"<h1>MLX speculative decoders and prefix caches</h1><p>Verdict: {escape(verdict)}</p>\n{body}\n"
    )
    (reports / "peers-mlx.html").write_text(page, encoding="utf-8")
    record = {"schema": "ncm-verify/peers-mlx/1", "verdict": verdict, "runs": [dataclasses.asdict(r) for r in runs]}
    write_json(record, reports / "peers-mlx.json")
    print(f"ncm-verify: MLX peers: {verdict}; {reports / 'peers-mlx.md'}")
    return 1 if found else 0
