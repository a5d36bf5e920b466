"""The MLX speculative decoders' report decides its verdict from the property runs, and the runner its peers."""

from __future__ import annotations

import json

import pytest

from ncm_verify.peers.mlx_findings import KNOWN_PEER_FINDINGS
from ncm_verify.report import mlx_peers
from ncm_verify.run_mlx_peers import MLX_PEERS, select


def record(nodeid: str, status: str, prop=(1,), detail: str = "") -> dict:
    return {"nodeid": nodeid, "property": list(prop), "status": status, "detail": detail, "seconds": 0.1}


def run(*records) -> mlx_peers.PeerRun:
    return mlx_peers.PeerRun("pkg", "pkg==1", "nothing", 0, 1.0, list(records))


GOOD = (
    record("t.py::test_a[own]", "passed"),
    record("t.py::test_a[planted]", "planted caught"),
    record("t.py::test_b", "finding", (4, 6), "pkg x.py:1: dropped EVIDENCE: 1 != 2"),
    record("t.py::test_c", "not applicable", (3,), "not applicable: one sequence only"),
)


def test_a_peer_with_passes_findings_and_a_caught_plant_passes_the_report(tmp_path):
    assert mlx_peers.write([run(*GOOD)], tmp_path) == 0
    written = json.loads((tmp_path / "peers-mlx.json").read_text())
    assert written["verdict"].startswith("pass")
    markdown = (tmp_path / "peers-mlx.md").read_text()
    assert "finding (1)" in markdown and "not applicable: one sequence only" in markdown
    assert "EVIDENCE: 1 != 2" in markdown and (tmp_path / "peers-mlx.html").exists()


@pytest.mark.parametrize(
    "bad, reason",
    [
        (record("t.py::test_a[planted]", "xpassed"), "a planted control was not caught"),
        (record("t.py::test_d", "failed"), "t.py::test_d failed"),
        (record("t.py::test_b", "xpassed"), "t.py::test_b xpassed"),
    ],
)
def test_an_uncaught_plant_a_new_failure_or_a_vanished_finding_fails_the_report(tmp_path, bad, reason):
    records = [r for r in GOOD if r["nodeid"] != bad["nodeid"]] + [bad]
    assert mlx_peers.write([run(*records)], tmp_path) == 1
    assert reason in json.loads((tmp_path / "peers-mlx.json").read_text())["verdict"]


def test_a_peer_whose_run_gave_no_verdict_fails_the_report(tmp_path):
    assert mlx_peers.write([run()], tmp_path) == 1
    assert "no property gave a verdict" in (tmp_path / "peers-mlx.md").read_text()


def test_the_runner_selects_peers_by_name_and_refuses_unknown_ones():
    assert [p.name for p in select("all")] == [p.name for p in MLX_PEERS]
    assert [p.name for p in select("mtplx, mlx-vlm")] == ["mlx-vlm", "mtplx"]
    with pytest.raises(ValueError, match="peers"):
        select("mlx-vlm,nonesuch")


def test_every_finding_names_a_property_file_of_a_judged_peer_and_a_reproduction():
    files = {p.tests for p in MLX_PEERS}
    for nodeid, reason in KNOWN_PEER_FINDINGS.items():
        assert nodeid.split("::")[0] in files, nodeid
        assert "Repro" in reason, nodeid


def test_a_peer_without_the_python_it_requires_reads_not_applicable_with_the_reason(tmp_path, monkeypatch):
    import ncm_verify.run_mlx_peers as runner

    tests = "mlx_peer_properties/test_nonesuch_prefix_cache.py"
    peer = runner.MlxPeer("nonesuch", "nonesuch==1", (), "everything", requires_python="9.99", test_file=tests)
    monkeypatch.setattr(runner, "PEERS_DIR", tmp_path / "peers")
    assert runner.find_python("9.99") is None
    assert runner.verify([peer], tmp_path / "reports") == 0
    markdown = (tmp_path / "reports" / "peers-mlx.md").read_text()
    assert "not applicable: nonesuch needs Python 9.99: none on PATH or under pyenv" in markdown
    assert "Prefix caches as served" in markdown


def test_prefix_cache_runs_get_their_own_table_of_rules_beside_the_decoders():
    prefix = mlx_peers.PeerRun(
        "engine",
        "engine==2",
        "nothing",
        0,
        42.0,
        [
            {**record("p.py::test_x[a]", "passed", ()), "rule": [1]},
            {**record("p.py::test_y", "finding", (), "engine x.py:2: dies Repro: r.py"), "rule": [6]},
            {**record("p.py::test_planted", "planted caught", ()), "rule": [1]},
            {**record("p.py::test_z", "not applicable", (), "not applicable: no files"), "rule": [5]},
        ],
    )
    verdicts, table, findings, _ = mlx_peers.tables([run(*GOOD), prefix])
    assert [row[0] for row in verdicts.rows] == ["pkg==1"] and [row[0] for row in table.rows] == ["engine==2"]
    cells = dict(zip(table.header, table.rows[0]))
    assert cells["1. served == uncached"] == "passed (1)" and cells["6. serves after a failed request"] == "finding (1)"
    assert cells["5. persisted: restored exactly or refused"] == "not applicable: no files"
    assert cells["planted control"] == "caught by 1 of 1" and cells["seconds (2 cores)"] == "42"
    assert ("engine==2", "test_y", "engine x.py:2: dies Repro: r.py") in [tuple(r) for r in findings.rows]
