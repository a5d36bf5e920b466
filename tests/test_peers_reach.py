"""Reach: the branches of a peer's speculative code its properties executed, judged from coverage.py's table."""

from __future__ import annotations

import pytest

from ncm_verify.peers import reach
from ncm_verify.peers.reach import Reason, Scope
from ncm_verify.report import mlx_peers

SOURCE = """\
def spec(x):
    if x:
        return 1
    return 2


def metal(x):
    if x:
        return 3
    return 4


def plain(x):
    if x:
        return 5
    return 6
"""


@pytest.fixture
def site(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "engine.py").write_text(SOURCE)
    return tmp_path


def table(site, missing):
    """A `reach.dump` table for pkg/engine.py: branch lines 2, 8, 14 (two exits each), `missing` never taken."""
    file = str(site / "pkg" / "engine.py")
    return {file: {"branches": {"2": 2, "8": 2, "14": 2}, "missing": {str(k): v for k, v in missing.items()}}}


def test_only_branches_inside_the_scope_count_and_unexplained_ones_say_so(site):
    judged = reach.judge(table(site, {2: [3], 14: [15]}), site, (Scope("pkg/*.py", ("spec", "metal")),), ())
    assert (judged["runnable"], judged["reached"], judged["percent"]) == (4, 3, 75.0)
    assert judged["unreached"] == [{"branch": "pkg/engine.py:2->3", "reason": reach.UNEXPLAINED, "runnable": True}]


def test_a_not_runnable_reason_leaves_the_total_and_a_runnable_one_explains_a_gap(site):
    reasons = (Reason("pkg/engine.py", "metal", "Metal kernel"), Reason("pkg/*.py", "1-4", "server only", True))
    judged = reach.judge(table(site, {2: [3], 8: [9, 10]}), site, (Scope("pkg/*.py", ("spec", "metal")),), reasons)
    assert (judged["total"], judged["not_runnable"], judged["runnable"], judged["reached"]) == (4, 2, 2, 1)
    assert judged["unreached"][0]["reason"] == "server only"
    assert [r["branches"] for r in judged["reasons"]] == [2, 2] and judged["ran_though_not_runnable"] == []


def test_a_not_runnable_reason_whose_branch_ran_is_listed_as_stale(site):
    judged = reach.judge(table(site, {}), site, (Scope("pkg/*.py"),), (Reason("pkg/*.py", "8", "Metal kernel"),))
    assert judged["ran_though_not_runnable"] == ["pkg/engine.py:8"]


def test_a_reason_naming_neither_lines_nor_a_definition_is_refused(site):
    with pytest.raises(ValueError, match="lines"):
        reach.judge(table(site, {}), site, (Scope("pkg/*.py"),), (Reason("pkg/*.py", "nowhere", "?"),))


def test_unreached_branches_are_grouped_by_reason_in_the_report(site, tmp_path):
    judged = reach.judge(table(site, {2: [3], 14: [15, 16]}), site, (Scope("pkg/*.py"),), ())
    before = {"reached": 1, "runnable": 6, "percent": 16.7}
    run = mlx_peers.PeerRun("pkg", "pkg==1", "nothing", 0, 1.0, [], judged, before)
    summary, unreached, _ = mlx_peers.reach_tables([run])
    assert summary.rows[0][1:4] == ("3 / 6", "50.0", "1 / 6 (16.7)")
    assert unreached.rows == [("pkg==1", reach.UNEXPLAINED, "3", "pkg/engine.py: 2, 14")]


def test_a_pattern_reason_explains_the_branch_lines_whose_text_matches(site):
    judged = reach.judge(
        table(site, {2: [3], 8: [9]}), site, (Scope("pkg/*.py"),), (Reason("pkg/*.py", "re:^def metal|    if x", "x"),)
    )
    assert [u["reason"] for u in judged["unreached"]] == []
    assert judged["not_runnable"] == 6
    unmatched = reach.judge(table(site, {2: [3]}), site, (Scope("pkg/*.py"),), (Reason("pkg/*.py", "re:while", "x"),))
    assert [u["reason"] for u in unmatched["unreached"]] == [reach.UNEXPLAINED]


def test_dead_exits_leave_the_total_while_the_exits_taken_count_as_reached(site):
    reasons = (Reason("pkg/engine.py", "metal", "argument fixed by its only caller", dead=True),)
    judged = reach.judge(table(site, {8: [9], 2: [3]}), site, (Scope("pkg/*.py", ("spec", "metal")),), reasons)
    assert (judged["not_runnable"], judged["runnable"], judged["reached"]) == (1, 3, 2)
    assert judged["ran_though_not_runnable"] == []
    stale = reach.judge(table(site, {}), site, (Scope("pkg/*.py", ("metal",)),), reasons)
    assert stale["ran_though_not_runnable"] == ["pkg/engine.py:8"], "a dead exit that ran must show the reason stale"


def test_a_branch_line_deciding_nothing_speculative_leaves_the_total_taken_or_not(site):
    reasons = (Reason("pkg/engine.py", "plain", "instrumentation", speculative=False),)
    judged = reach.judge(table(site, {14: [15]}), site, (Scope("pkg/*.py"),), reasons)
    assert (judged["total"], judged["not_speculative"], judged["runnable"], judged["reached"]) == (6, 2, 4, 4)
    assert judged["ran_though_not_runnable"] == [] and judged["unreached"] == []
    run = mlx_peers.PeerRun("pkg", "pkg==1", "nothing", 0, 1.0, [], judged, None)
    summary, _, reasons_table = mlx_peers.reach_tables([run])
    assert summary.rows[0][4] == "0 + 2 not speculative"
    assert reasons_table.rows[0][3] == "not speculative"
