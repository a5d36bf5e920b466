"""Write a run's report files (verify.json, .md, .html) and print its terminal summary."""

from __future__ import annotations

from pathlib import Path

from ncm_verify.evidence import VERIFY_HTML, VERIFY_JSON, VERIFY_MD
from ncm_verify.report import document as doc


def write_reports(reports_dir: Path, ledger_path: Path | None = None) -> dict:
    """Build the report from the JSON in `reports_dir` (the run's record among it) and write verify.json, .md
    and .html; `make verify` and `ncm-verify report` both write it here, from the same files."""
    from ncm_verify.report.html import render_html
    from ncm_verify.report.markdown import render_markdown

    report = doc.load_report(reports_dir, ledger_path)
    reports_dir.mkdir(parents=True, exist_ok=True)
    doc.write_json(report, reports_dir / VERIFY_JSON)
    (reports_dir / VERIFY_MD).write_text(render_markdown(report), encoding="utf-8")
    (reports_dir / VERIFY_HTML).write_text(render_html(report), encoding="utf-8")
    return report


def print_report(report: dict, reports_dir: Path) -> None:
    """The terminal summary and where the report files are."""
    from ncm_verify.report.terminal import render_terminal

    print(render_terminal(report))
    names = ", ".join(str(reports_dir / name) for name in (VERIFY_JSON, VERIFY_MD, VERIFY_HTML))
    print(f"  report: {names}")
