"""Write a run's report files (verify.json, .md, .html) and print its terminal summary."""

from __future__ import annotations

import json
from pathlib import Path

from ncm_verify.evidence import VERIFY_HTML, VERIFY_JSON, VERIFY_LOG, VERIFY_MD
from ncm_verify.report import document as doc
from ncm_verify.report.model import Document


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8")


def write_reports(reports_dir: Path, ledger_path: Path | None = None) -> Document:
    """Build the report from the JSON in `reports_dir` (the run's record among it) and write verify.json, .md
    and .html; `make verify` and `ncm-verify report` both write it here, from the same files."""
    from ncm_verify.report.html import render_html
    from ncm_verify.report.markdown import render_markdown

    document = doc.build_document(doc.load_report(reports_dir, ledger_path))
    reports_dir.mkdir(parents=True, exist_ok=True)
    write_json(document.to_json(), reports_dir / VERIFY_JSON)
    (reports_dir / VERIFY_MD).write_text(render_markdown(document), encoding="utf-8")
    (reports_dir / VERIFY_HTML).write_text(render_html(document), encoding="utf-8")
    return document


def print_report(document: Document, reports_dir: Path) -> None:
    """The terminal summary and where the report files are."""
    from ncm_verify.report.terminal import render_terminal

    print(render_terminal(document))
    names = ", ".join(str(reports_dir / name) for name in (VERIFY_JSON, VERIFY_MD, VERIFY_HTML))
    print(f"  report: {names}")
    if (reports_dir / VERIFY_LOG).is_file():
        print(f"  log: {reports_dir / VERIFY_LOG} (each test's line, every phase's full output)")
