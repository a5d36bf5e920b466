"""verify.md: the report's tables as GitHub-flavoured markdown."""

from __future__ import annotations

from ncm_verify.report import document as doc


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table(table: doc.Table, level: str = "##") -> str:
    lines = [f"{level} {table.title}", ""]
    if table.note:
        lines += [table.note, ""]
    if table.rows:
        lines.append("| " + " | ".join(table.header) + " |")
        lines.append("|" + "---|" * len(table.header))
        lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in table.rows]
        lines.append("")
    return "\n".join(lines)


def render_failures(report: dict) -> str:
    failed = doc.failures(report)
    if not failed:
        return ""
    lines = ["## Failures and how to reproduce them", ""]
    for p in failed:
        failure = p["failure"]
        lines += [f"### {p['nodeid']} ({', '.join(p['claims'])})", "", "```", failure["message"].strip(), "```", ""]
        for key, label in (("falsifying_example", "example"), ("reproduce_failure", "decorator"), ("seed", "seed")):
            if failure.get(key):
                lines += [f"{label}:", "", "```", str(failure[key]), "```", ""]
        lines += ["rerun:", "", "```", failure["command"], "```", ""]
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    """The whole report; a pure function of `report`."""
    run = report["run"]
    parts = [
        "# ncm-verify report",
        "",
        f"Implementation under test: `{report['impl']}`; run verdict: **{run['verdict']}**"
        + (f" ({'; '.join(run['reasons'])})" if run["reasons"] else ""),
        "",
        render_table(doc.verdict_table(report)),
        render_table(doc.claims_table(report)),
        render_failures(report),
    ]
    for table in (
        doc.policy_table(report),
        doc.statistical_table(report),
        doc.mlx_lm_table(report),
        doc.mutants_table(report),
        doc.calibration_table(report),
    ):
        if table is not None:
            parts.append(render_table(table))
    for claim in report["claims"]:
        if claim["properties"]:
            parts.append(render_table(doc.properties_table(claim), "###"))
    if report["unclaimed"]:
        parts += ["## Runs under no claim", ""] + [f"- `{n}`" for n in report["unclaimed"]] + [""]
    for table in (
        doc.bench_table(report),
        doc.timing_table(report),
        doc.environment_table(report),
        doc.sources_table(report),
    ):
        if table is not None:
            parts.append(render_table(table))
    return "\n\n".join(part.strip() for part in parts if part.strip()) + "\n"
