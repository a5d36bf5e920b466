"""A peer whose metadata needs a newer Python than the machine has is reported, not failed (`run_mlx_peers`)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from unittest import mock

from ncm_verify import run_mlx_peers


def test_a_peer_needing_a_python_the_machine_lacks_reads_not_applicable_and_passes(tmp_path):
    peer = dataclasses.replace(run_mlx_peers.BY_NAME["yunshu"], name="no-such-env-yunshu")
    with mock.patch.object(run_mlx_peers, "interpreter", lambda _: None):
        status = run_mlx_peers.verify([peer], tmp_path)
    record = json.loads((tmp_path / "peers-mlx.json").read_text())
    records = record["runs"][0]["records"]
    assert status == 0, f"the run failed: {record['verdict']}"
    assert {r["status"] for r in records} == {"not applicable"}, records
    assert "requires Python >= 3.13" in records[0]["detail"], records[0]["detail"]


def test_the_interpreter_is_this_project_s_python_when_its_version_is_admitted():
    peer = dataclasses.replace(run_mlx_peers.BY_NAME["yunshu"], requires_python=tuple(sys.version_info[:2]))
    assert run_mlx_peers.interpreter(peer) == sys.executable


def test_no_interpreter_is_found_for_a_python_no_one_has():
    peer = dataclasses.replace(run_mlx_peers.BY_NAME["yunshu"], requires_python=(3, 99))
    with mock.patch.dict("os.environ", {"PYENV_ROOT": str(Path("/nonexistent"))}):
        assert run_mlx_peers.interpreter(peer) is None
