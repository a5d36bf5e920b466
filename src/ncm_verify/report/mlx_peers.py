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
    1: "served equals uncached",
    2: "reuse as documented, hits seen",
    3: "eviction; an entry unchanged by reuse",
    4: "draft model beside the cache",
    5: "persisted files restore exactly or are refused",
    6: "serves on after a failure; a batch beside cached rows",
}
"""The prefix-cache machine's rules (`mlx_peer_properties/prefix_cache_machine.py`), by ``peer_property`` number, for
the peers whose `kind` is "prefix"."""


@dataclasses.dataclass(frozen=True)
class PeerRun:
    name: str
    pin: str
    left_out: str
    exit_status: int
    seconds: float
    records: list[dict]
    kind: str = "speculative"


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


def verdict_table(runs: list[PeerRun], title: str, columns: dict[int, str]) -> Table:
    def row(run: PeerRun) -> tuple[str, ...]:
        if run.records and all(r["status"] == "not applicable" and not r["property"] for r in run.records):
            reason = "not applicable: " + run.records[0]["detail"]  # the package cannot be driven at all here
            return (run.pin, *(reason for _ in columns), "none", f"{run.seconds:.0f}")
        cells = (property_cell([r for r in run.records if n in (r["property"] or [])]) for n in columns)
        return (run.pin, *cells, planted_cell(run.records), f"{run.seconds:.0f}")

    return Table(
        title,
        ("package", *(f"{n}. {name}" for n, name in columns.items()), "planted control", "seconds (2 cores)"),
        [row(run) for run in runs],
        note="Each package judged on its own code in its own environment (.peers/<name>/); counts are property "
        "runs (node ids). A finding is a strict expected failure of ncm_verify.peers.mlx_findings.",
    )


def tables(runs: list[PeerRun]) -> tuple[Table, ...]:
    speculative = [run for run in runs if run.kind != "prefix"]
    prefix = [run for run in runs if run.kind == "prefix"]
    verdicts = []
    if speculative or not prefix:
        verdicts.append(verdict_table(speculative, "MLX speculative decoders: per package and property", PROPERTIES))
    if prefix:
        verdicts.append(verdict_table(prefix, "MLX prefix caches: per engine and rule", PREFIX_RULES))
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
    return (*verdicts, findings, environments)


def write(runs: list[PeerRun], reports: Path) -> int:
    """peers-mlx.{md,html,json} under `reports`; returns the exit status (1 when `problems` found any)."""
    found = [problem for run in runs for problem in problems(run)]
    verdict = "fail: " + "; ".join(found) if found else "pass: every peer judged, every planted control caught"
    parts = tables(runs)
    markdown = "\n".join(
        ["# MLX speculative decoders", "", f"Verdict: {verdict}", ""] + [render_table(t) for t in parts]
    )
    (reports / "peers-mlx.md").write_text(markdown, encoding="utf-8")
    body = "\n".join(html_report.render_table(t) for t in parts)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>MLX speculative decoders</title>"
        f"<h1>MLX speculative decoders</h1><p>Verdict: {escape(verdict)}</p>\n{body}\n"
    )
    (reports / "peers-mlx.html").write_text(page, encoding="utf-8")
    record = {"schema": "ncm-verify/peers-mlx/1", "verdict": verdict, "runs": [dataclasses.asdict(r) for r in runs]}
    write_json(record, reports / "peers-mlx.json")
    print(f"ncm-verify: MLX peers: {verdict}; {reports / 'peers-mlx.md'}")
    return 1 if found else 0
