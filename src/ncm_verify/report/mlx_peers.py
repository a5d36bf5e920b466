"""The MLX speculative decoders' report (`make verify-peers PEERS=...`): per package and property, passed / finding
/ not applicable with its reason, each finding's evidence and reproduction, each planted control's verdict.

Decided from the JSON lines `mlx_peer_properties/conftest.py` writes per property run; written beside the main
report as peers-mlx.md, peers-mlx.html and peers-mlx.json. A finding is a strict expected failure of
`peers.mlx_findings`; the run fails when a peer's run gave no verdict, a property failed outside that table
(a new finding to look at, or a broken adapter), a finding went away (XPASS), or a planted control was not caught.
"""

from __future__ import annotations

import dataclasses
import re
from html import escape
from pathlib import Path

from ncm_verify.peers.reach import UNEXPLAINED, compact
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
WHERE_CHARS = 160
"""A finding's head longer than this is prose, not a place: its whole text reads under 'what differs'."""

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
    reach: dict | None = None
    """`peers.reach.judge`'s verdict on the package's speculative branches, when measured."""
    before: dict | None = None
    """The reach the properties had before the reach work (``reached``, ``runnable``, ``percent``, ``commit``)."""
    cpu_seconds: float | None = None
    """User + system seconds of its pytest processes and what they waited for (servers), beside `seconds` (wall)."""
    parts: list[dict] = dataclasses.field(default_factory=list)
    """Its pytest processes (``tests``, ``marker``, ``seconds``, ``cpu_seconds``): `seconds` is their sum."""

    def timing(self, prefix: bool | None = None) -> str:
        """'wall s / CPU s' of the parts running prefix-cache files (`prefix` True), the others (False) or all."""
        parts = [p for p in self.parts if prefix is None or p["tests"][0].endswith("_prefix_cache.py") == prefix]
        if not parts:
            return f"{self.seconds:.0f}" + (f" / {self.cpu_seconds:.0f} CPU" if self.cpu_seconds is not None else "")
        wall, cpu = sum(p["seconds"] for p in parts), sum(p["cpu_seconds"] for p in parts)
        return f"{wall:.0f} / {cpu:.0f} CPU"


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
    judged = any(r["status"] != "not applicable" for r in run.records)  # a peer that cannot run here has no plant
    if judged and (not planted or any(r["status"] != "planted caught" for r in planted)):
        found.append(f"{run.name}: a planted control was not caught")
    return found


@dataclasses.dataclass(frozen=True)
class Finding:
    """One finding of `peers.mlx_findings` in one package, with every property run (node id) that showed it."""

    package: str
    what: str
    where: str
    reproduction: str
    evidence: str
    nodeids: tuple[str, ...]
    evidence_by_node: tuple[str, ...]


def top_level_colon(text: str) -> int:
    """Where the first ': ' outside parentheses is in `text` (-1: none)."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith(": ", i):
            return i
    return -1


def split_reason(reason: str, pin: str) -> tuple[str, str, str]:
    """A `peers.mlx_findings` reason as (what differs, where, reproduction): it reads 'package version where: what.
    Repro: command'; `where` only when that head names a source line (file.py:N) in a few words."""
    body, _, reproduction = reason.partition(" Repro: ")
    name, _, version = pin.partition("==")
    body = body.removeprefix(f"{name} {version} ") if version else body
    colon = top_level_colon(body)
    head = body[:colon] if colon > 0 else ""
    if re.search(r"\.py:\d", head) and len(head) <= WHERE_CHARS:
        return body[colon + 2 :], head, reproduction
    return body, "", reproduction


def findings_of(runs: list[PeerRun]) -> list[Finding]:
    """The findings, one per package and reason: the property runs showing the same reason are one finding."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        for record in run.records:
            if record["status"] == "finding":
                reason = record["detail"].partition(" EVIDENCE: ")[0]
                grouped.setdefault((run.pin, reason), []).append(record)
    found = []
    for (pin, reason), records in grouped.items():
        what, where, reproduction = split_reason(reason, pin)
        evidence = [record["detail"].partition(" EVIDENCE: ")[2] for record in records]
        found.append(
            Finding(
                pin,
                what,
                where,
                reproduction,
                next((e for e in evidence if e), ""),
                tuple(record["nodeid"] for record in records),
                tuple(evidence),
            )
        )
    return found


def reach_tables(runs: list[PeerRun]) -> tuple[Table, Table, Table]:
    """Per package: reach (runnable branches reached / runnable, before and now); every unreached branch grouped
    by its reason (NO REASON where none is given); and each reason's file, lines and branch count."""
    measured = [(run, run.reach) for run in runs if run.reach]
    summary = Table(
        "Reach: branches of each package's speculative code the properties executed",
        ("package", "reached / runnable", "percent", "before", "not runnable here", "unreached: explained",
         "unreached: NO REASON", "reasons that ran anyway"),
        [
            (
                run.pin,
                f"{judged['reached']} / {judged['runnable']}",
                f"{judged['percent']}",
                f"{run.before['reached']} / {run.before['runnable']} ({run.before['percent']})" if run.before else "-",
                str(judged["not_runnable"])
                + (f" + {judged['not_speculative']} not speculative" if judged.get("not_speculative") else ""),
                str(len([u for u in judged["unreached"] if u["reason"] != UNEXPLAINED])),
                str(len([u for u in judged["unreached"] if u["reason"] == UNEXPLAINED])),
                compact(judged["ran_though_not_runnable"]) or "none",
            )
            for run, judged in measured
        ],
        note="coverage.py branch coverage (a branch: one exit of a line with several), measured in the package's own "
        "environment while its properties ran; scopes and reasons in ncm_verify.peers.mlx_reach. 'Not runnable here' "
        "branches (macOS-only, Metal, ...) leave the runnable total, as do 'not speculative' ones (branch lines "
        "deciding only instrumentation or the server's prefix snapshots, taken or not); 'before' is the properties "
        "before the reach work.",
    )  # fmt: skip
    grouped = []
    for run, judged in measured:
        by_reason: dict[str, list[str]] = {}
        for entry in judged["unreached"]:
            by_reason.setdefault(entry["reason"], []).append(entry["branch"])
        for why, branches in sorted(by_reason.items(), key=lambda item: item[0] != UNEXPLAINED):
            grouped.append((run.pin, why, str(len(branches)), compact(branches)))
    unreached = Table(
        "Unreached runnable branches, by reason",
        ("package", "reason", "branches", "branch lines (file: lines)"),
        grouped,
        note="Every runnable branch the properties did not take; the JSON report lists each as file:line->destination.",
    )
    reasons = Table(
        "Reasons, per package: file and lines",
        ("package", "file", "lines", "runnable", "branches", "reason"),
        [
            (
                run.pin,
                r["path"],
                r["lines"],
                "yes" if r["runnable"] else "no" if r.get("speculative", True) else "not speculative",
                str(r["branches"]),
                r["reason"],
            )
            for run, judged in measured
            for r in judged["reasons"]
        ],
    )
    return summary, unreached, reasons


def prefix_table(runs: list[PeerRun]) -> Table:
    """Engine x rule for the runs that judge prefix caches (records with ``rule``)."""
    judged = [run for run in runs if any(r.get("rule") for r in run.records)]
    return Table(
        "Prefix caches as served: per engine and rule",
        (
            "engine",
            *(f"{n}. {title}" for n, title in PREFIX_RULES.items()),
            "planted control",
            "seconds: wall / CPU (2 cores)",
        ),
        [
            (
                run.pin,
                *(property_cell([r for r in run.records if n in (r.get("rule") or [])]) for n in PREFIX_RULES),
                planted_cell([r for r in run.records if r.get("rule")]),
                run.timing(prefix=True),
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
        (
            "package",
            *(f"{n}. {title}" for n, title in PROPERTIES.items()),
            "planted control",
            "seconds: wall / CPU (2 cores)",
        ),
        [
            (
                run.pin,
                *(property_cell([r for r in run.records if n in (r["property"] or [])]) for n in PROPERTIES),
                planted_cell([r for r in run.records if not r.get("rule")]),
                run.timing(prefix=False),
            )
            for run in decoders
        ],
        note="Each package judged on its own code in its own environment (.peers/<name>/); counts are property "
        "runs (node ids). A finding is a strict expected failure of ncm_verify.peers.mlx_findings.",
    )
    findings = Table(
        "Findings",
        ("package", "what differs", "where", "reproduction", "evidence", "property runs"),
        [
            (f.package, f.what, f.where or "-", f.reproduction or "-", f.evidence or "-", ", ".join(f.nodeids))
            for f in findings_of(runs)
        ],
        note="One row per finding; its property runs (node ids) are those that showed it.",
    )
    environments = Table(
        "Environments",
        ("package", "exit status", "dependencies left out"),
        [(run.pin, str(run.exit_status), run.left_out) for run in runs],
    )
    return verdicts, prefix_table(runs), findings, environments


def verdict_table(runs: list[PeerRun], found: list[str]) -> Table:
    """The verdict first: passed or failed, and each reason it failed (a peer with no verdict, a new failure, a
    vanished finding, a planted control not caught)."""
    judged = f"{len(runs)} packages judged, {len(findings_of(runs))} findings"
    rows = [("failed", problem) for problem in found] or [
        ("passed", f"{judged}; every peer judged, every planted control caught")
    ]
    return Table("Verdict", ("verdict", "why"), rows)


def findings_html(findings: list[Finding]) -> str:
    """The findings table with each finding's property runs folded under it, each with its own evidence."""
    header = "".join(f"<th>{escape(h)}</th>" for h in ("package", "what differs", "where", "reproduction", "evidence"))
    rows = []
    for f in findings:
        nodes = "".join(
            f"<li><code>{html_report.breakable(node)}</code>{': ' + html_report.breakable(e) if e else ''}</li>"
            for node, e in zip(f.nodeids, f.evidence_by_node)
        )
        counted = f"{len(f.nodeids)} property run{'' if len(f.nodeids) == 1 else 's'}"
        runs = f"<details><summary>{counted}</summary><ul>{nodes}</ul></details>"
        cells = [f.package, f.what, f.where or "see what differs", f.reproduction or "-"]
        rows.append(
            "<tr>"
            + "".join(f"<td>{html_report.breakable(cell)}</td>" for cell in cells)
            + f"<td>{html_report.breakable(f.evidence)}{runs}</td></tr>"
        )
    note = "<p class='note'>One row per finding; the property runs (node ids) that showed it are folded under it.</p>"
    table = f"<table><tr>{header}</tr>{''.join(rows)}</table>" if rows else "<p>None.</p>"
    return f"<h2>Findings</h2>{note}{table}"


def render_page(
    verdict: Table, verdicts: Table, prefix: Table, findings: list[Finding], environments: Table, *more: Table
) -> str:
    """peers-mlx.html, styled as verify.html (its CSS): the verdict first, then each package's properties, the
    findings one row each, the environments, then `more` (reach)."""
    body = "\n".join(
        [
            html_report.render_table(verdict),
            html_report.render_table(verdicts),
            html_report.render_table(prefix),
            findings_html(findings),
            html_report.render_table(environments),
            *(html_report.render_table(table) for table in more),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>MLX speculative decoders and prefix caches</title><style>{html_report.CSS}</style></head><body>\n"
        f"<h1>MLX speculative decoders and prefix caches</h1>\n{body}\n</body></html>\n"
    )


def write(runs: list[PeerRun], reports: Path) -> int:
    """peers-mlx.{md,html,json} under `reports`; returns the exit status (1 when `problems` found any)."""
    found = [problem for run in runs for problem in problems(run)]
    verdict = "fail: " + "; ".join(found) if found else "pass: every peer judged, every planted control caught"
    verdicts, prefix, findings, environments = tables(runs)
    reach = reach_tables(runs)
    parts = (verdicts, prefix, findings, environments, *reach)
    markdown = "\n".join(
        ["# MLX speculative decoders and prefix caches", "", f"Verdict: {verdict}", ""]
        + [render_table(t) for t in parts]
    )
    (reports / "peers-mlx.md").write_text(markdown, encoding="utf-8")
    page = render_page(verdict_table(runs, found), verdicts, prefix, findings_of(runs), environments, *reach)
    (reports / "peers-mlx.html").write_text(page, encoding="utf-8")
    record = {"schema": "ncm-verify/peers-mlx/1", "verdict": verdict, "runs": [dataclasses.asdict(r) for r in runs]}
    write_json(record, reports / "peers-mlx.json")
    print(f"ncm-verify: MLX peers: {verdict}; {reports / 'peers-mlx.md'}")
    return 1 if found else 0
