"""Long work (make bench, make train, make verify-peers) says a line per case with the time elapsed and left."""

import pytest

from ncm_verify.progress import Progress, duration, time_left


def test_a_duration_reads_in_the_largest_units_that_keep_it_short():
    assert [duration(s) for s in (0, 42.4, 185, 3720)] == ["0 s", "42 s", "3 min 05 s", "1 h 02 min"]


def test_each_finished_case_says_how_many_are_done_the_time_elapsed_and_the_time_left_at_the_average_pace():
    now = [0.0]
    said: list[str] = []
    progress = Progress("bench", 4, clock=lambda: now[0], say=said.append)
    progress.start("case a")
    now[0] = 30.0
    progress.done("case a")
    now[0] = 90.0
    progress.done("case b")
    assert said == [
        "bench: 1 of 4, case a (elapsed 0 s)",
        "bench: 1 of 4 done, case a: elapsed 30 s, about 1 min 30 s left",
        "bench: 2 of 4 done, case b: elapsed 1 min 30 s, about 1 min 30 s left",
    ]
    now[0] = 200.0
    progress.done("c")
    progress.done("d")
    assert said[-1] == "bench: 4 of 4 done, d: elapsed 3 min 20 s", "nothing left: no estimate"


def test_no_estimate_is_made_before_anything_is_done_and_a_negative_total_is_refused():
    assert time_left(0, 10, 5.0) == "elapsed 5 s"
    with pytest.raises(ValueError, match="total"):
        Progress("x", -1)


def test_make_bench_runs_the_smollm2_quick_grid_and_leaves_the_whole_table_to_grid_full():
    from ncm_verify.bench import smollm2 as bench

    quick, full = bench.GRIDS["quick"], bench.GRIDS["full"]
    assert bench.case_count(quick["forms"], quick["ks"], quick["prompts"]) == 2
    assert bench.case_count(full["forms"], full["ks"], full["prompts"]) == 12, "every form, prompt and k"
    assert full["drafters"] is None and full["prompts"] is None
