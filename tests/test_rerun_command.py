"""The line a report gives to rerun a failed property works from any folder: absolute root and interpreter."""

from __future__ import annotations

import shlex
import sys
from types import SimpleNamespace

from ncm_verify.evidence.records import RunRecord
from ncm_verify.report.status import reproduce_command

NODE = SimpleNamespace(nodeid="properties/test_prefix.py::test_cached")


def test_the_rerun_line_changes_to_the_suite_root_and_names_the_interpreter_by_its_absolute_path():
    run = {
        "profile": "ci",
        "impl": "ncm_verify.reference",
        "rerun_from": {"root": "/w/my suite", "python": sys.executable},
    }
    line = reproduce_command(NODE, run)
    assert line.startswith(f"cd '/w/my suite' && HYPOTHESIS_PROFILE=ci {shlex.quote(sys.executable)} -m pytest ")
    assert "'properties/test_prefix.py::test_cached'" in line


def test_a_run_record_written_before_the_rename_still_gives_its_root():
    record = RunRecord.from_json({"installed": {"root": "/srv/suite", "python": "/srv/venv/bin/python"}})
    assert record.rerun_from == {"root": "/srv/suite", "python": "/srv/venv/bin/python"}
    assert record.to_json()["rerun_from"] == record.rerun_from
