"""verify.md: the report's document as GitHub-flavoured markdown."""

from __future__ import annotations

from ncm_verify.report.model import FINDINGS_TITLE, Document, Table


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table(table: Table, level: str = "##") -> str:
    lines = [f"{level} {table.title}", ""]
    if table.note:
        lines += [table.note, ""]
    if table.rows:
        lines.append("| " + " | ".join(table.header) + " |")
        lines.append("|" + "---|" * len(table.header))
        lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in table.rows]
        lines.append("")
    return "\n".join(lines)


def render_suite_checks(document: Document) -> str:
    """The properties that never call the module, apart from the verdict on it (counted only on the reference)."""
    if not document.suite_checks:
        return ""
    lines = ["## The suite's own checks", "", document.suite_checks_note, ""]
    lines += [f"- `{nodeid}`: {outcome}" for nodeid, outcome in document.suite_checks]
    return "\n".join(lines) + "\n"


def render_failures(document: Document, findings: bool = False) -> str:
    """The failures, or with `findings` the refuted hypotheses (results, not failures), each with its rerun."""
    shown = document.findings if findings else document.failures
    if not shown:
        return ""
    title = FINDINGS_TITLE if findings else "Failures and how to reproduce them"
    lines = [f"## {title}", ""]
    for f in shown:
        lines += [f"### {f.nodeid} ({', '.join(f.claims)})", "", "```", f.message.strip(), "```", ""]
        for value, label in ((f.falsifying_example, "example"), (f.reproduce_failure, "decorator"), (f.seed, "seed")):
            if value:
                lines += [f"{label}:", "", "```", str(value), "```", ""]
        lines += ["rerun:", "", "```", f.command, "```", ""]
    return "\n".join(lines)


def render_markdown(document: Document) -> str:
    """The whole report; a pure function of `document`."""
    verdict, tables = document.verdict, document.tables
    parts = [
        "# ncm-verify report",
        "",
        f"Implementation under test: `{document.impl}`; run verdict: **{verdict.verdict}**"
        + (f" ({'; '.join(verdict.reasons)})" if verdict.reasons else ""),
        "",
        render_table(verdict.parts),
        render_table(tables.judged) if tables.judged is not None and tables.judged.rows else "",
        render_table(tables.claims),
        render_failures(document),
        render_failures(document, findings=True),
        render_suite_checks(document),
    ]
    for table in (tables.policy, tables.statistical, tables.mlx_lm, tables.mutants, tables.calibration):
        if table is not None:
            parts.append(render_table(table))
    for claim in document.claims:
        if claim.properties is not None:
            parts.append(render_table(claim.properties, "###"))
    if document.unclaimed:
        parts += ["## Runs under no claim", ""] + [f"- `{n}`" for n in document.unclaimed] + [""]
    for table in (tables.bench, tables.timing, tables.environment, tables.sources):
        if table is not None:
            parts.append(render_table(table))
    return "\n\n".join(part.strip() for part in parts if part.strip()) + "\n"
