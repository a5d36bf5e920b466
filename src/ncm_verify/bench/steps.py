"""`make bench`: every bench step in turn, each a child process, with a line per step saying how far along the
whole bench is, each step's wall and CPU seconds, and at the end every kernel ratio beside its goal.

``python -m ncm_verify.bench.steps --grid quick --reports reports`` (what `make bench` runs; GRID=full: the full
grids). Each step prints its own cases as it goes; this runner adds the step lines and writes
``reports/bench-steps.json`` (each step's command, grid, wall and CPU seconds, exit status). The time left is
estimated from `EXPECTED_S` (each step's measured share of a quick run) scaled by how this run has gone so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from ncm_verify.bench.grids import GRID_NAMES
from ncm_verify.bench.ratios import format_goals, goal_rows, read_run
from ncm_verify.progress import duration, time_left


@dataclasses.dataclass(frozen=True)
class Step:
    """One `make bench` step: ``python -m module`` with its grid and its JSON under the reports folder, the
    implementation where it measures one (`impl`), and any further arguments."""

    name: str
    module: str
    out: str
    expected_s: float
    """Its wall seconds in a quick run on an idle 2-core machine (estimated from CPU seconds; docs/performance.md)."""
    impl: bool = True
    arguments: tuple[str, ...] = ()


STEPS = (
    Step("kernel ratios", "ncm_verify.bench", "bench.json", 75, arguments=("run",)),
    Step("trees", "ncm_verify.bench.trees", "bench-trees.json", 45),
    Step("blocks", "ncm_verify.bench.blocks", "bench-blocks.json", 12),
    Step("text drafting", "ncm_verify.bench.drafting", "bench-drafting.json", 30),
    Step("tree loop", "ncm_verify.bench.drafting", "bench-tree-loop.json", 70, arguments=("--tree-loop",)),
    Step("rollback", "ncm_verify.bench.rollback", "bench-rollback.json", 5, impl=False),
    Step("blas", "ncm_verify.bench.blas", "bench-blas.json", 45, impl=False),
    Step("smollm2 drafting", "ncm_verify.bench.smollm2", "bench-smollm2.json", 50),
    Step("smollm2 prefix cache", "ncm_verify.bench.prefix_cache", "bench-prefix-cache.json", 75, impl=False),
)
"""The steps in order, then `LEVEL_STEPS`. `make bench GRID=full` runs the same steps on their full grids."""
PYTEST_JSON = "bench-pytest.json"
LEVEL_EXPECTED_S = 10


def command(step: Step, impl: str, grid: str, reports: Path) -> list[str]:
    """The step's command line: the module's own options, then the shared ones."""
    shared = [*(["--impl", impl] if step.impl else []), "--grid", grid, "--out", str(reports / step.out)]
    return [sys.executable, "-m", step.module, *step.arguments, *shared]


def level_commands(grid: str, reports: Path) -> list[list[str]]:
    """The level-drafting rows (pytest-benchmark files under benchmarks/), then their table."""
    json_file = str(reports / PYTEST_JSON)
    options = ["-q", "-p", "no:xdist", "--benchmark-only", f"--bench-grid={grid}", f"--benchmark-json={json_file}"]
    return [
        [sys.executable, "-m", "pytest", "benchmarks", *options],
        [sys.executable, "-m", "ncm_verify.bench.levels", json_file],
    ]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_steps(
    impl: str,
    grid: str,
    reports: Path,
    steps: tuple[Step, ...] = STEPS,
    levels: bool = True,
    say=lambda line: print(line, flush=True),
) -> list[dict]:
    """Every step in turn (a failed step is said and the rest still run), then the level-drafting rows; a record
    per step."""
    if grid not in GRID_NAMES:
        raise ValueError(f"grid: expected one of {', '.join(GRID_NAMES)}, got {grid!r}")
    reports.mkdir(parents=True, exist_ok=True)
    planned = [(step.name, step.expected_s, command(step, impl, grid, reports)) for step in steps]
    if levels:
        first, table = level_commands(grid, reports)
        planned += [("level drafting", LEVEL_EXPECTED_S, first), ("level drafting table", 1, table)]
    began, expected_done, expected_total = time.monotonic(), 0.0, sum(expected for _, expected, _ in planned)
    records = []
    for index, (name, expected, argv) in enumerate(planned, 1):
        elapsed = time_left(expected_done, expected_total, time.monotonic() - began)
        say(f"make bench ({grid} grid): step {index} of {len(planned)}, {name} ({elapsed})")
        cpu, start = children_cpu_s(), time.monotonic()
        status = subprocess.run(argv, env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
        wall, cpu = time.monotonic() - start, children_cpu_s() - cpu
        expected_done += expected
        records.append(
            {"step": name, "command": argv[1:], "grid": grid, "wall_s": wall, "cpu_s": cpu, "exit_status": status}
        )
        say(
            f"make bench ({grid} grid): step {index} of {len(planned)} done, {name}: {duration(wall)} wall, "
            f"{duration(cpu)} CPU{'' if status == 0 else f', FAILED with exit status {status}'}; "
            + time_left(expected_done, expected_total, time.monotonic() - began)
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.steps", description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default="ncm_verify.reference")
    parser.add_argument("--grid", choices=GRID_NAMES, default="quick")
    parser.add_argument("--reports", type=Path, default=Path("reports"))
    names = [step.name for step in STEPS] + ["level drafting"]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these steps")
    arguments = parser.parse_args(argv)
    steps = tuple(step for step in STEPS if arguments.only is None or step.name in arguments.only)
    levels = arguments.only is None or "level drafting" in arguments.only
    began = time.monotonic()
    records = run_steps(arguments.impl, arguments.grid, arguments.reports, steps, levels)
    total = {"wall_s": time.monotonic() - began, "cpu_s": sum(record["cpu_s"] for record in records)}
    document = {"grid": arguments.grid, "impl": arguments.impl, "steps": records, "total": total}
    (arguments.reports / "bench-steps.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print("\nmake bench: time by step (wall; CPU of all its processes)")
    for record in records:
        print(f"  {record['step']:22} {duration(record['wall_s']):>12} wall {duration(record['cpu_s']):>12} CPU")
    print(f"  {'total':22} {duration(total['wall_s']):>12} wall {duration(total['cpu_s']):>12} CPU")
    print("\nEach kernel ratio beside its goal (src/ncm_verify/bench/ratios.py GOALS):")
    print(format_goals(goal_rows(read_run(arguments.reports))))
    failed = [record["step"] for record in records if record["exit_status"] != 0]
    if failed:
        print(f"make bench: {len(failed)} step(s) failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
