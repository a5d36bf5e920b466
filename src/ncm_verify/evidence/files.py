"""The report folder's file names, and the one reader of its JSON files."""

from __future__ import annotations

import json
from pathlib import Path

EVIDENCE_FILE = "evidence.json"
"""What the properties phase leaves: an `Evidence` document (also each peer's and planted bug's run)."""
RECORDS_FILE = "stats.jsonl"
"""File under the report folder each chi-square result is appended to, one JSON line each."""
MUTANTS_FILE = "mutants.json"
CALIBRATION_FILE = "calibration.json"
BENCH_FILE = "bench.json"
RUN_FILE = "run.json"
"""What `ncm-verify verify` knew of its run (phases, run id, self-test cache, reuse), kept for the rebuild."""
REUSE_FILE = "reuse.json"
"""The reference evidence a port's run carries (`--ncm-reuse`), written beside the report."""
VERIFY_JSON = "verify.json"
VERIFY_MD = "verify.md"
VERIFY_HTML = "verify.html"
VERIFY_LOG = "verify.log"
"""Every phase's full output (each test's line, tracebacks): the terminal shows a summary of it."""


def read_json(path: Path) -> dict | None:
    """The JSON at `path`, or None when the file is absent."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
