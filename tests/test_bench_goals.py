"""The bench's goals, baseline bands and comparison, fed synthetic JSON (no measurement), and its step runner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ncm_verify.bench import measure, steps
from ncm_verify.bench import ratios as bench_ratios

ROOT = Path(__file__).resolve().parents[1]


def kernel_case(step: str, batch: int, floor: float, unvalidated: float, floor_minima: float | None = None) -> dict:
    """A bench.json kernel case whose eager step is `floor` x the MLX floor and whose default call costs
    `unvalidated` x the step (the same from minima unless `floor_minima` says otherwise)."""

    def ratios(floor_multiple: float) -> dict:
        return {
            "eager": {bench_ratios.MLX_FLOOR: bench_ratios.ratio(floor_multiple, "lower", "")},
            "validated": {bench_ratios.UNVALIDATED: bench_ratios.ratio(unvalidated, "lower", "")},
            "compiled": {"vs eager": bench_ratios.ratio(1.1, "higher", "")},
        }

    medians, minima = ratios(floor), ratios(floor if floor_minima is None else floor_minima)
    return {
        "case": f"{step} V=128256 G=4 B={batch} float32",
        "step": step,
        "batch": batch,
        "contenders": {
            name: {"median_s": 1e-3, "ratios": medians[name], "ratios_of_minima": minima[name]} for name in medians
        },
    }


def tree_row(batch: int, floor: float, walk: float) -> dict:
    figures = {
        bench_ratios.MLX_FLOOR: bench_ratios.ratio(floor, "lower", ""),
        bench_ratios.NUMPY_WALK: bench_ratios.ratio(walk, "lower", ""),
        bench_ratios.UNVALIDATED: bench_ratios.ratio(1.1, "lower", ""),
    }
    return {
        "case": f"eagle top-4 (16 nodes, depth 4) V=49152 B={batch} top_k",
        "batch": batch,
        "contenders": {"verify_tree": {"median_s": 1e-3, "ratios": figures, "ratios_of_minima": figures}},
    }


def run_documents(chain_floor: float = 2.5, unvalidated: float = 1.2, tree_walk: float = 0.8, **kw) -> dict:
    chain = kernel_case("chain", 1, chain_floor, unvalidated, **kw)
    return {
        "bench.json": {"commit": "abc", "grid": "quick", "kernels": [chain]},
        "bench-trees.json": {"latency": [tree_row(8, 1.5, tree_walk)]},
    }


def test_a_ratio_regressed_past_its_band_fails_and_one_inside_it_passes():
    baseline = bench_ratios.record_baseline([run_documents()])
    assert all(entry["band"] == bench_ratios.MIN_BAND for entry in baseline["ratios"]), "no spread, least band"
    inside = bench_ratios.compare_to_baseline(baseline, run_documents(chain_floor=2.5 * 1.2, tree_walk=0.8 * 1.2))
    assert inside["regressions"] == [] and len(inside["within"]) == len(baseline["ratios"])
    past = bench_ratios.compare_to_baseline(baseline, run_documents(chain_floor=2.5 * 1.3))
    assert len(past["regressions"]) == 1 and "eager :: x mlx reduction floor" in past["regressions"][0]
    tree = bench_ratios.compare_to_baseline(baseline, run_documents(tree_walk=0.8 * 1.3))
    assert len(tree["regressions"]) == 1 and "verify_tree :: x numpy walk" in tree["regressions"][0]
    better = bench_ratios.compare_to_baseline(baseline, run_documents(chain_floor=1.0, unvalidated=1.0))
    assert better["regressions"] == [], "a faster kernel read as a regression"


def test_a_higher_is_better_ratio_regresses_when_it_falls():
    baseline = bench_ratios.record_baseline([run_documents()])
    slower = run_documents()
    for statistic in ("ratios", "ratios_of_minima"):
        slower["bench.json"]["kernels"][0]["contenders"]["compiled"][statistic]["vs eager"]["value"] = 1.1 / 1.3
    regressions = bench_ratios.compare_to_baseline(baseline, slower)["regressions"]
    assert len(regressions) == 1 and "compiled :: vs eager" in regressions[0]


def test_a_ratio_whose_median_alone_moved_is_noise_not_a_regression():
    baseline = bench_ratios.record_baseline([run_documents()])
    preempted = bench_ratios.compare_to_baseline(baseline, run_documents(chain_floor=4.0, floor_minima=2.5))
    assert preempted["regressions"] == [], "a median moved by preemption, its minimum unmoved, read as a regression"
    slower = bench_ratios.compare_to_baseline(baseline, run_documents(chain_floor=4.0, floor_minima=4.0))
    assert len(slower["regressions"]) == 1


def test_a_band_widens_with_the_spread_of_the_baselines_measurements():
    noisy = bench_ratios.record_baseline([run_documents(chain_floor=2.0), run_documents(chain_floor=3.0)])
    chain = next(e for e in noisy["ratios"] if e["ratio"] == bench_ratios.MLX_FLOOR and e["contender"] == "eager")
    assert chain["value"] == pytest.approx(6**0.5) and chain["spread"] == pytest.approx(1.5)
    assert chain["band"] == pytest.approx(1.5**2 * bench_ratios.SPREAD_MARGIN)
    minima = bench_ratios.record_baseline([run_documents(2.0, floor_minima=2.0), run_documents(2.0, floor_minima=2.6)])
    spread = next(e for e in minima["ratios"] if e["ratio"] == bench_ratios.MLX_FLOOR)["spread"]
    assert spread == pytest.approx(1.3), "the ratio of minima's spread over the runs was not counted"
    within = bench_ratios.compare_to_baseline(noisy, run_documents(chain_floor=6**0.5 * 2.7))
    assert within["regressions"] == [], "a ratio inside its own (wider) band failed"
    past = bench_ratios.compare_to_baseline(noisy, run_documents(chain_floor=6**0.5 * 2.9))
    assert len(past["regressions"]) == 1, "a ratio past its own band passed"


def test_the_baseline_refuses_no_runs_and_a_comparison_refuses_an_old_baseline():
    with pytest.raises(ValueError, match="^runs"):
        bench_ratios.record_baseline([])
    with pytest.raises(ValueError, match="^baseline"):
        bench_ratios.compare_to_baseline({"schema": "ncm-verify/bench/1"}, run_documents())


def test_bench_compare_exits_1_on_a_regression_and_0_inside_the_bands(tmp_path, capsys):
    baseline_file, run = tmp_path / "baseline.json", tmp_path / "reports"
    baseline_file.write_text(json.dumps(bench_ratios.record_baseline([run_documents()])))
    run.mkdir()

    def compare(documents: dict) -> int:
        for name, document in documents.items():
            (run / name).write_text(json.dumps(document))
        return measure.main(["compare", str(baseline_file), str(run)])

    assert compare(run_documents(chain_floor=2.6)) == 0
    assert compare(run_documents(chain_floor=4.0)) == 1
    assert "REGRESSION bench.json :: chain V=128256 G=4 B=1 float32 :: eager" in capsys.readouterr().out
    (run / "bench.json").unlink()
    (run / "bench-trees.json").unlink()
    assert measure.main(["compare", str(baseline_file), str(run)]) == 1, "a run that measured nothing passed"


def test_each_ratio_stands_beside_its_goal_by_kernel_and_batch():
    documents = {
        "bench.json": {
            "kernels": [kernel_case("chain", 1, 2.5, 1.4), kernel_case("chain", 8, 2.5, 1.2)],
        },
        "bench-trees.json": {"latency": [tree_row(1, 2.5, 0.9)]},
    }
    rows = {(r["kernel"], r["case"].split()[3], r["ratio"]): r for r in bench_ratios.goal_rows(documents)}
    assert rows[("chain", "B=1", bench_ratios.MLX_FLOOR)]["met"], "2.5x the floor is within B = 1's 3x"
    assert not rows[("chain", "B=8", bench_ratios.MLX_FLOOR)]["met"], "2.5x the floor is past B >= 8's 2x"
    assert not rows[("chain", "B=1", bench_ratios.UNVALIDATED)]["met"]
    assert rows[("chain", "B=8", bench_ratios.UNVALIDATED)]["met"]
    tree = {r["ratio"]: r for r in bench_ratios.goal_rows(documents) if r["kernel"] == "tree"}
    assert not tree[bench_ratios.MLX_FLOOR]["met"] and tree[bench_ratios.NUMPY_WALK]["met"]
    assert tree[bench_ratios.MLX_FLOOR]["goal"] == 2.0
    table = bench_ratios.format_goals(bench_ratios.goal_rows(documents))
    assert "NOT MET" in table and table.endswith("goals: 4 of 7 ratios met")
    markdown = bench_ratios.format_goals(bench_ratios.goal_rows(documents), markdown=True).splitlines()
    assert markdown[0] == "| kernel | case | ratio | B = 1 | B = 8 |" and len(markdown) == 2 + 5 + 2
    floor = next(line for line in markdown if "chain V=128256 G=4 float32 | eager x mlx reduction floor" in line)
    assert floor.endswith("| 2.50 of <= 3 | 2.50 of <= 2 (not met) |")


def test_every_goal_of_the_kernels_is_in_performance_md_as_the_code_states_it():
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert bench_ratios.goals_markdown() in text, "docs/performance.md's goals table differs from ratios.GOALS"


def test_the_quick_kernel_grid_covers_every_goal_kernel_at_b_1_8_32_on_random_and_smollm2_rows():
    grid = measure.make_grid("quick")
    for step in measure.GOAL_STEPS:
        for rows in (None, "quantized"):
            batches = {case.batch for case in grid if case.step == step and case.smollm2 == rows}
            assert batches == {1, 8, 32}, f"{step} on {rows or 'random'} rows at B = {sorted(batches)}"
    assert any(case.dtype == "bfloat16" for case in grid), "the quick grid lost its half-precision case"


def test_every_step_runs_on_the_grid_asked_for_and_says_how_far_along_the_bench_is(tmp_path):
    for step in steps.STEPS:
        line = steps.command(step, "ncm_verify.reference", "full", tmp_path)
        assert line[line.index("--grid") + 1] == "full" and line[-1] == str(tmp_path / step.out)
    assert "--bench-grid=full" in steps.level_commands("full", tmp_path)[0]
    said: list[str] = []
    tiny = (steps.Step("no work", "ncm_verify.bench.grids", "nothing.json", 1.0, impl=False),) * 2
    records = steps.run_steps("ncm_verify.reference", "quick", tmp_path, tiny, levels=False, say=said.append)
    assert [r["exit_status"] for r in records] == [0, 0] and all(r["grid"] == "quick" for r in records)
    assert said[0].startswith("make bench (quick grid): step 1 of 2, no work (elapsed")
    assert re.match(r"make bench \(quick grid\): step 1 of 2 done, no work: \d+ s wall, \d+ s CPU; .*left$", said[1])
    with pytest.raises(ValueError, match="^grid"):
        steps.run_steps("ncm_verify.reference", "smollm2", tmp_path, tiny, levels=False, say=said.append)


def test_the_recorded_baseline_has_a_band_beside_every_ratio():
    baseline = json.loads((ROOT / "benchmarks" / "baseline.json").read_text(encoding="utf-8"))
    assert baseline["schema"] == bench_ratios.BASELINE_SCHEMA
    assert {entry["file"] for entry in baseline["ratios"]} == set(bench_ratios.RATIO_FILES)
    assert all(entry["band"] >= bench_ratios.MIN_BAND for entry in baseline["ratios"])
