"""`make verify-peers PEERS=...` runs peers' pytest processes beside each other and keeps each peer's output whole
(`run_mlx_peers.verify`, `parts_of`, `merge_reach`); no peer environment is needed: the processes are stood in for."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from unittest import mock

from ncm_verify import run_mlx_peers


def test_a_peer_with_law_tests_and_a_prefix_cache_runs_as_three_parts():
    parts = run_mlx_peers.parts_of(run_mlx_peers.BY_NAME["mlx-vlm"])
    assert [(p.tests[0].rsplit("/", 1)[1], p.marker) for p in parts] == [
        ("test_mlx_vlm.py", "peer_law"),
        ("test_mlx_vlm.py", "not peer_law"),
        ("test_mlx_vlm_prefix_cache.py", None),
    ], parts
    assert len({p.slug for p in parts}) == 3, [p.slug for p in parts]


def test_merged_reach_counts_a_branch_reached_by_any_part():
    first = {"f.py": {"branches": {"3": 2, "7": 2}, "missing": {"3": [4], "7": [8, 9]}}}
    second = {"f.py": {"branches": {"3": 2, "7": 2}, "missing": {"7": [9]}}}
    merged = run_mlx_peers.merge_reach([first, second])
    assert merged == {"f.py": {"branches": {"3": 2, "7": 2}, "missing": {"7": [9]}}}, merged


def test_parts_run_two_at_once_and_each_peer_s_output_is_printed_whole(tmp_path, capsys):
    running, overlap, lock = [0], [0], threading.Lock()

    def fake_part(part, reports, examples, files):
        with lock:
            running[0] += 1
            overlap[0] = max(overlap[0], running[0])
        time.sleep(0.2)
        log = reports / f"peers-mlx-{part.slug}.log"
        log.write_text("".join(f"{part.slug} line {i}\n" for i in range(3)))
        record = dict(nodeid=f"{part.tests[0]}::t[{part.slug}]", property=[1], rule=[], status="passed", detail="",
                      seconds=0.1)  # fmt: skip
        results = reports / f"peers-mlx-{part.slug}.jsonl"
        results.write_text(json.dumps(record) + "\n")
        planted = dict(record, nodeid=f"{part.tests[0]}::t[planted-{part.slug}]", status="planted caught")
        with open(results, "a") as file:
            file.write(json.dumps(planted) + "\n")
        with lock:
            running[0] -= 1
        return run_mlx_peers.PartRun(part, 0, 0.2, 0.1, log, results, reports / f"peers-mlx-{part.slug}-reach.json")

    peers = [run_mlx_peers.BY_NAME["mlx-vlm"], run_mlx_peers.BY_NAME["locals"]]
    for peer in peers:
        (tmp_path / "envs" / peer.name / "bin").mkdir(parents=True)
        (tmp_path / "envs" / peer.name / "bin" / "python").touch()
    with (
        mock.patch.object(run_mlx_peers, "PEERS_DIR", tmp_path / "envs"),
        mock.patch.object(run_mlx_peers, "run_part", fake_part),
    ):
        status = run_mlx_peers.verify(peers, tmp_path / "reports", measure_reach=False, jobs=2)
    out = capsys.readouterr().out
    assert status == 0 and overlap[0] == 2, (status, overlap, out)
    lines = [line for line in out.splitlines() if " line " in line]
    vlm = [i for i, line in enumerate(lines) if line.startswith("mlx-vlm")]
    assert vlm == list(range(vlm[0], vlm[0] + 9)), f"mlx-vlm's output interleaved with another's:\n{out}"
    runs = {run["name"]: run for run in json.loads((tmp_path / "reports" / "peers-mlx.json").read_text())["runs"]}
    assert len(runs["mlx-vlm"]["parts"]) == 3 and runs["mlx-vlm"]["cpu_seconds"] == 0.3, runs["mlx-vlm"]
    assert len(runs["mlx-vlm"]["records"]) == 6, runs["mlx-vlm"]["records"]


def test_jobs_below_one_is_refused_naming_the_argument(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="jobs"):
        run_mlx_peers.verify([], Path(tmp_path), jobs=0)
