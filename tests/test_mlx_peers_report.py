"""The MLX speculative decoders' report decides its verdict from the property runs, and the runner its peers."""

from __future__ import annotations

import json

import pytest
from test_report_html import WIDTHS, measure_overflow

from ncm_verify.peers.mlx_findings import KNOWN_PEER_FINDINGS
from ncm_verify.report import html as html_report
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
    assert "| pkg==1 | dropped | pkg x.py:1 | - | 1 != 2 | t.py::test_b |" in markdown
    assert (tmp_path / "peers-mlx.html").exists()


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
    files = {name for p in MLX_PEERS for name in p.tests}
    for nodeid, reason in KNOWN_PEER_FINDINGS.items():
        assert nodeid.split("::")[0] in files, nodeid
        assert "Repro" in reason, nodeid


SPREAD = "pkg 1 pkg/gen.py:318-328 (its loop: :12): processors dropped after the first token. Repro: python r.py"
"""One finding many property runs show, as mlx-vlm's dropped processors fill twenty."""


def spread_run() -> mlx_peers.PeerRun:
    shown = [
        record(f"t.py::test_p[case{i}]", "finding", (4,), f"{SPREAD} EVIDENCE: token {i} differs") for i in range(20)
    ]
    return mlx_peers.PeerRun("pkg", "pkg==1", "nothing", 0, 1.0, [*GOOD[:2], *shown])


def test_a_finding_many_property_runs_show_is_one_row_with_its_place_reproduction_and_runs_folded_under_it(tmp_path):
    assert mlx_peers.write([spread_run()], tmp_path) == 0
    (finding,) = mlx_peers.findings_of([spread_run()])
    assert finding.where == "pkg/gen.py:318-328 (its loop: :12)" and finding.reproduction == "python r.py"
    assert finding.what == "processors dropped after the first token." and len(finding.nodeids) == 20
    page = (tmp_path / "peers-mlx.html").read_text()
    assert page.count("<details>") == 1 and "20 property runs" in page and "token 19 differs" in page
    assert html_report.CSS in page, "styled as verify.html"
    assert page.index("<h2>Verdict</h2>") < page.index("per package and property") < page.index("<h2>Findings</h2>")
    markdown = (tmp_path / "peers-mlx.md").read_text()
    assert markdown.count("processors dropped after the first token") == 1


def test_a_failing_peers_report_puts_each_reason_in_its_verdict_table_first(tmp_path):
    assert mlx_peers.write([run(record("t.py::test_d", "failed"))], tmp_path) == 1
    page = (tmp_path / "peers-mlx.html").read_text()
    verdict = page[page.index("<h2>Verdict</h2>") : page.index("<h2>MLX speculative")]
    assert 'class="status failed"' in verdict and "t.py::test_d failed" in verdict and "planted control" in verdict


def known_findings_runs() -> list[mlx_peers.PeerRun]:
    """Every peer with every finding `peers.mlx_findings` lists (their real texts), a pass and a caught plant each."""
    runs = []
    for peer in MLX_PEERS:
        shown = [
            record(nodeid, "finding", (2, 6), f"{reason} EVIDENCE: logits differ at position 3: 0.0412 nats")
            for nodeid, reason in KNOWN_PEER_FINDINGS.items()
            if nodeid.split("::")[0] in peer.tests
        ]
        plain = [
            record(f"{peer.tests[0]}::test_plain[own]", "passed"),
            record(f"{peer.tests[0]}::x[planted]", "planted caught"),
        ]
        runs.append(mlx_peers.PeerRun(peer.name, peer.pin, peer.left_out, 0, 42.0, [*plain, *shown]))
    return runs


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_in_the_peers_report_overflows_horizontally_in_chromium(tmp_path, width):
    assert mlx_peers.write([spread_run(), *known_findings_runs()], tmp_path) == 0
    page = tmp_path / "peers-mlx.html"
    measured = measure_overflow(page.read_text(), width, tmp_path)
    assert measured["innerWidth"] == width and measured["count"] == 0, (
        f"at {width} px the peers' report is {measured['scrollWidth']} px wide; the first that overflow:\n  "
        + "\n  ".join(measured["wide"])
        + f"\n  reproduce: .venv/bin/python -m pytest tests/test_mlx_peers_report.py -p no:xdist -k {width}"
    )


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
    assert cells["planted control"] == "caught by 1 of 1" and cells["seconds: wall / CPU (2 cores)"] == "42"
    assert ("engine==2", "dies", "engine x.py:2", "r.py", "-", "p.py::test_y") in [tuple(r) for r in findings.rows]
