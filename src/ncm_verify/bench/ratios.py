"""The bench's ratios, goals, table, baseline and comparison, and the report's C9 line: pure functions of the
bench's JSON.

No MLX here, so that the report can read a bench without measuring anything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

BENCH_SCHEMA = "ncm-verify/bench/1"
BENCH_CLAIM = "C9"
RATIO_KEYS = {"median": "ratios", "min": "ratios_of_minima"}
"""Where each statistic's ratios are kept in a contender's row."""


def ratio(value: float, better: str, note: str) -> dict:
    """A ratio and which way is better, so that a comparison can tell a regression."""
    return {"value": value, "better": better, "note": note}


# --- the table -------------------------------------------------------------------------


def milliseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g} ms"


def multiple(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_kernel_rows(kernels: list[dict]) -> str:
    """One line per (case, contender): median, speedups over the peers, multiples of the floors."""
    header = (
        "case",
        "contender",
        "median",
        "vs numpy",
        "vs transformers",
        "x copy floor",
        "x MLX floor",
        "vs eager",
        "x unvalidated",
    )
    lines = []
    for case in kernels:
        for name, row in case["contenders"].items():
            ratios = {k: v["value"] for k, v in row.get("ratios", {}).items()}
            lines.append(
                (
                    case["case"],
                    name,
                    milliseconds(row["median_s"]),
                    multiple(ratios.get("vs numpy")),
                    multiple(ratios.get("vs transformers")),
                    multiple(ratios.get("x numpy copy floor")),
                    multiple(ratios.get("x mlx reduction floor")),
                    multiple(ratios.get("vs eager")),
                    multiple(ratios.get(UNVALIDATED)),
                )
            )
    return render_columns(header, lines)


def format_cache_rows(generations: list[dict]) -> str:
    """One line per (case, path), then per case the split of uncached and warm calls into layers and a fixed cost."""
    header = (
        "case",
        "path",
        "median [q1, q3]",
        "speedup",
        "predicted",
        "of predicted",
        "pairs predicted",
        "peak MLX memory",
    )
    lines = []
    for case in generations:
        for name, row in case["contenders"].items():
            ratios = {k: v["value"] for k, v in row.get("ratios", {}).items()}
            peak = row.get("peak_bytes")
            lines.append(
                (
                    case["case"],
                    name,
                    f"{milliseconds(row['median_s'])} [{row['q1_s'] * 1e3:.3g}, {row['q3_s'] * 1e3:.3g}]",
                    multiple(ratios.get("vs uncached")),
                    multiple(row.get("predicted_speedup")),
                    "-" if "of predicted" not in ratios else f"{ratios['of predicted']:.0%}",
                    multiple(row.get("predicted_speedup_pairs")),
                    "-" if peak is None else f"{peak / 2**20:.1f} MiB",
                )
            )
    splits = [format_layer_split(case) for case in generations if "layers" in case["contenders"]["cached warm"]]
    note = (
        "predicted: C4's positions per layer, uncached / cached; pairs predicted: attention pairs (query x key) "
        "per layer, the same way. Were a layer's cost a sum of costs per position and per pair, its speedup "
        "would lie between the two. Fixed per call: the rest of a call (embedding, heads, sampling, keys, look-ups), "
        "from its time at 1 layer. Cold may beat both: the prefix's last-layer attention and MLP feed nothing, "
        "and MLX's lazy graph never computes them."
    )
    return "\n".join([render_columns(header, lines), *splits, note])


def format_layer_split(case: dict) -> str:
    """The uncached and warm medians split into a cost per layer and a fixed cost per call (timed at 1 layer)."""
    split = case["contenders"]["cached warm"]["layers"]["median"]
    per_layer, fixed = (
        f"uncached {milliseconds(split[f'uncached {part}'])}, warm {milliseconds(split[f'cached warm {part}'])}"
        for part in ("layer_s", "fixed_s")
    )
    return (
        f"{case['case']}: per layer {per_layer}; fixed per call {fixed}; layers' speedup "
        f"{split['layers speedup']:.2f}x = {split['layers of predicted']:.0%} of predicted, "
        f"{split['layers of pairs predicted']:.0%} of pairs predicted"
    )


def render_columns(header: tuple, lines: list[tuple]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)) for line in [header, *lines]
    )


def format_bench(bench: dict) -> str:
    """The whole table of a run, with what it was measured on."""
    head = (
        f"make bench: {bench['impl']} at {bench['commit']} on {bench['device']}, MLX {bench['mlx']}, "
        f"grid {bench['grid']} ({bench['datetime']}); peers: {bench['peers']['transformers']}"
    )
    notes = (
        "speedups = peer's median / ours (higher is better); x floor = ours / the floor's median "
        "(the step's least bytes; validated: every input byte)"
    )
    tables = [format_kernel_rows(bench["kernels"])] + (
        [format_cache_rows(bench["generation"])] if bench["generation"] else []
    )
    return "\n\n".join([head, *tables, notes])


# --- goals: each ratio the kernels aim at, stated once -------------------------------------------


@dataclasses.dataclass(frozen=True)
class Goal:
    """A ratio a kernel aims at: `contender`'s `ratio` (lower is better) at most `limit`, on every case of one of
    `kernels` whose batch `batches` admits ("any", "1" or ">=8").

    Read by the bench's printout and JSON (`goal_rows`) and by docs/performance.md's table (`goals_markdown`)."""

    kernels: tuple[str, ...]
    contender: str
    ratio: str
    limit: float
    batches: str
    says: str

    def applies(self, kernel: str, batch: int) -> bool:
        if kernel not in self.kernels:
            return False
        return {"any": True, "1": batch == 1, ">=8": batch >= 8}[self.batches]


UNVALIDATED = "x unvalidated"
"""The default (validated) call's median over the same call with ``validate=False``, side by side."""
MLX_FLOOR = "x mlx reduction floor"
"""A contender's median over the MLX floor's (the fastest MLX reduction over the bytes it must read)."""
NUMPY_WALK = "x numpy walk"
"""verify_tree's median over the float64 NumPy walk's on the same rows."""
STEP_KERNELS = ("chain", "factorized", "block")
GOALS = (
    Goal(("chain", "greedy", "factorized", "block"), "validated", UNVALIDATED, 1.3, "any", "validation costs <= 0.3x"),
    Goal(("tree",), "verify_tree", UNVALIDATED, 1.3, "any", "validation costs <= 0.3x"),
    Goal(("tree",), "verify_tree", MLX_FLOOR, 2.0, "any", "the default call within 2x the floor of its rows"),
    Goal(("tree",), "verify_tree", NUMPY_WALK, 1.0, "any", "faster than the float64 NumPy walk"),
    Goal(("greedy",), "eager", MLX_FLOOR, 1.5, "any", "the step within 1.5x the floor of the rows it reads"),
    Goal(STEP_KERNELS, "eager", MLX_FLOOR, 3.0, "1", "the step within 3x the floor of its least read at B = 1"),
    Goal(STEP_KERNELS, "eager", MLX_FLOOR, 2.0, ">=8", "the step within 2x the floor of its least read at B >= 8"),
)
"""The kernels' goals (a ratio measured side by side in one run, never a time). "eager" is the step called with
``validate=False``; "validated" and "verify_tree" are the default call a user makes."""


def goal_rows(documents: dict[str, dict]) -> list[dict]:
    """Every measured ratio that a goal covers, beside the goal, from a run's JSON documents by file name."""
    rows = []
    for entry in ratio_entries(documents, "median"):
        for goal in GOALS:
            if (
                goal.contender == entry["contender"]
                and goal.ratio == entry["ratio"]
                and goal.applies(entry["kernel"], entry["batch"])
            ):
                value = entry["value"]
                rows.append(
                    {
                        "kernel": entry["kernel"],
                        "case": entry["case"],
                        "contender": entry["contender"],
                        "ratio": entry["ratio"],
                        "value": value,
                        "goal": goal.limit,
                        "met": value <= goal.limit,
                        "says": goal.says,
                    }
                )
    return rows


def format_goals(rows: list[dict], markdown: bool = False) -> str:
    """One line per ratio beside its goal, then how many are met; as columns, or as a Markdown table."""
    if not rows:
        return "goals: no ratio measured that a goal covers"
    header = ("kernel", "case", "contender", "ratio", "measured", "goal", "met")
    lines = [
        (
            row["kernel"],
            row["case"],
            row["contender"],
            row["ratio"],
            f"{row['value']:.2f}",
            f"<= {row['goal']:g}",
            "met" if row["met"] else "NOT MET",
        )
        for row in rows
    ]
    met = f"goals: {sum(row['met'] for row in rows)} of {len(rows)} ratios met"
    if markdown:
        return goals_by_batch_markdown(rows)
    return f"{render_columns(header, lines)}\n{met}"


def goals_by_batch_markdown(rows: list[dict]) -> str:
    """The goal rows as a Markdown table with one line per case shape and ratio, a column per batch: each cell the
    ratio measured beside its goal (docs/performance.md)."""
    batches = sorted({int(match[1]) for row in rows if (match := re.search(r"\bB=(\d+)\b", row["case"]))})
    lines: dict[tuple, dict[int, dict]] = {}
    for row in rows:
        batch = re.search(r"\bB=(\d+)\b", row["case"])
        shape = re.sub(r"\s*\bB=\d+\b", "", row["case"])
        lines.setdefault((row["kernel"], shape, row["contender"], row["ratio"]), {})[int(batch[1]) if batch else 0] = (
            row
        )
    header = ["kernel", "case", "ratio", *(f"B = {b}" for b in batches)]
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (kernel, shape, contender, name), cells in lines.items():
        shown = [
            "-"
            if b not in cells
            else f"{cells[b]['value']:.2f} of <= {cells[b]['goal']:g}" + ("" if cells[b]["met"] else " (not met)")
            for b in batches
        ]
        table.append(f"| {kernel} | {shape} | {contender} {name} | " + " | ".join(shown) + " |")
    met = sum(row["met"] for row in rows)
    return "\n".join(table) + f"\n\n{met} of {len(rows)} ratios met."


def goals_markdown() -> str:
    """The goals as a Markdown table (docs/performance.md shows it; tests/test_bench_goals.py keeps them equal)."""
    lines = ["| kernels | contender | ratio | goal | batches |", "|---|---|---|---|---|"]
    for goal in GOALS:
        batches = {"any": "every", "1": "B = 1", ">=8": "B >= 8"}[goal.batches]
        lines.append(f"| {', '.join(goal.kernels)} | {goal.contender} | {goal.ratio} | <= {goal.limit:g} | {batches} |")
    return "\n".join(lines)


# --- every ratio of a run, the baseline, and the comparison ------------------------------------

BASELINE_SCHEMA = "ncm-verify/bench-baseline/2"
RATIO_FILES = ("bench.json", "bench-trees.json")
"""The run's JSON documents whose ratios the baseline records and `make bench-compare` checks."""
MIN_BAND = 1.25
"""The least band a ratio gets: a ratio worse than its baseline by more than 1.25x (or its measured spread,
whichever is wider) is a regression."""
SPREAD_MARGIN = 1.25
"""A ratio's band is this times the square of its spread over the baseline's runs (largest / smallest): the range
of a few runs spans about 1-2 standard deviations (in logs), its square 2-4, so that noise alone seldom leaves the
band; under load 11-16 on 2 cores single ratios moved by 1.3-3x between two runs."""


def ratio_entries(documents: dict[str, dict], statistic: str = "median") -> list[dict]:
    """Every ratio of a run, flat: file, kernel (a step, "tree" or "generation"), case, batch, contender, ratio
    name, value and which way is better; from the kernel and cache cases of bench.json and the latency rows of
    bench-trees.json."""
    if statistic not in RATIO_KEYS:
        raise ValueError(f"statistic: expected one of {', '.join(RATIO_KEYS)}, got {statistic!r}")
    entries = []
    for file, document in documents.items():
        cases = [
            (case.get("step", "generation"), case)
            for case in document.get("kernels", []) + document.get("generation", [])
        ]
        cases += [("tree", case) for case in document.get("latency", [])] if file == "bench-trees.json" else []
        for kernel, case in cases:
            for contender, row in case["contenders"].items():
                for key, value in row.get(RATIO_KEYS[statistic], {}).items():
                    entries.append(
                        {
                            "file": file,
                            "kernel": kernel,
                            "case": case["case"],
                            "batch": case.get("batch", 0),
                            "contender": contender,
                            "ratio": key,
                            "value": value["value"],
                            "better": value["better"],
                        }
                    )
    return entries


def entry_key(entry: dict) -> tuple[str, str, str, str]:
    return entry["file"], entry["case"], entry["contender"], entry["ratio"]


def worse_by(before: float, now: float, better: str) -> float:
    """How many times worse `now` is than `before` (below 1: better)."""
    return before / now if better == "higher" else now / before


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def record_baseline(runs: list[dict[str, dict]], *, min_band: float = MIN_BAND, margin: float = SPREAD_MARGIN) -> dict:
    """The baseline from one or more runs (each: documents by file name): per ratio, the geometric means over the
    runs of its ratio of medians (`value`) and of minima (`value_of_minima`), and its band: `margin` x the square
    of its spread over the runs (largest / smallest, the wider of the two statistics'), at least `min_band` (all a
    single run can give)."""
    if not runs:
        raise ValueError("runs: expected at least one run's documents")
    if min_band <= 1 or margin < 1:
        raise ValueError(f"min_band, margin: expected min_band > 1 and margin >= 1, got {min_band}, {margin}")
    found: dict[tuple, dict[str, list[dict]]] = {}
    for documents in runs:
        for statistic in RATIO_KEYS:
            for entry in ratio_entries(documents, statistic):
                if entry["value"] > 0 and math.isfinite(entry["value"]):
                    found.setdefault(entry_key(entry), {}).setdefault(statistic, []).append(entry)
    ratios = []
    for by_statistic in found.values():
        if set(by_statistic) != set(RATIO_KEYS):
            continue
        medians, minima = ([e["value"] for e in by_statistic[statistic]] for statistic in RATIO_KEYS)
        spread = max(max(values) / min(values) for values in (medians, minima))
        ratios.append(
            {
                **{k: v for k, v in by_statistic["median"][0].items() if k != "value"},
                "value": geometric_mean(medians),
                "value_of_minima": geometric_mean(minima),
                "runs": len(medians),
                "spread": spread,
                "band": max(min_band, margin * spread**2),
            }
        )
    first = runs[0]["bench.json"] if "bench.json" in runs[0] else next(iter(runs[0].values()))
    return {
        "schema": BASELINE_SCHEMA,
        "recorded": {
            key: first.get(key) for key in ("datetime", "impl", "commit", "grid", "device", "mlx", "machine_info")
        },
        "runs": len(runs),
        "min_band": min_band,
        "margin": margin,
        "ratios": ratios,
    }


def compare_to_baseline(baseline: dict, documents: dict[str, dict]) -> dict[str, list[str]]:
    """Each baseline ratio against the run's: "regressions" (its ratio of medians and its ratio of minima each
    worse than the baseline's by more than the band: a slower kernel moves both, a preempted call mostly the
    median), "within" (the rest), "missing" (not measured by this run, e.g. another grid): one line each."""
    if baseline.get("schema") != BASELINE_SCHEMA:
        raise ValueError(
            f"baseline: expected schema {BASELINE_SCHEMA}, got {baseline.get('schema')!r}; record one with "
            "`make bench-baseline`"
        )
    now = {statistic: {entry_key(e): e for e in ratio_entries(documents, statistic)} for statistic in RATIO_KEYS}
    result: dict[str, list[str]] = {"regressions": [], "within": [], "missing": []}
    for old in baseline["ratios"]:
        where = " :: ".join(entry_key(old))
        if entry_key(old) not in now["median"] or entry_key(old) not in now["min"]:
            result["missing"].append(where)
            continue
        value = now["median"][entry_key(old)]["value"]
        factor = worse_by(old["value"], value, old["better"])
        of_minima = worse_by(old["value_of_minima"], now["min"][entry_key(old)]["value"], old["better"])
        line = (
            f"{where}: {value:.3g} (baseline {old['value']:.3g}, {old['better']} is better; worse by {factor:.2f}x, "
            f"from minima {of_minima:.2f}x; band {old['band']:.2f}x)"
        )
        result["regressions" if min(factor, of_minima) > old["band"] else "within"].append(line)
    return result


def read_run(directory: Path) -> dict[str, dict]:
    """The run's documents of `RATIO_FILES` found in `directory`, by file name."""
    return {
        name: json.loads((directory / name).read_text(encoding="utf-8"))
        for name in RATIO_FILES
        if (directory / name).is_file()
    }


# --- the report's C9 row ----------------------------------------------------------------------


def flat_ratios(bench: dict, statistic: str = "median") -> dict[tuple[str, str, str], dict]:
    """Every ratio of a bench by (case, contender, ratio name), from medians or minima."""
    return {
        (entry["case"], entry["contender"], entry["ratio"]): {"value": entry["value"], "better": entry["better"]}
        for entry in ratio_entries({"bench.json": bench}, statistic)
    }


def case_kind(case: str) -> str:
    """A case's kind from its name: chain, greedy, factorized or generation, "on SmolLM2" where its rows are
    SmolLM2's (measure.BenchCase.name), so that a grid with real rows keeps the random rows' means comparable."""
    words = case.split()
    return words[0] + (" on SmolLM2" if "SmolLM2" in words else "")


def grouped_ratios(bench: dict, statistic: str = "median") -> dict[tuple[str, str, str], dict]:
    """Each ratio's geometric mean over the grid's cases, by (kind of case, contender, ratio name)."""
    logs: dict[tuple[str, str, str], list] = {}
    better = {}
    for (case, name, key), value in flat_ratios(bench, statistic).items():
        group = (case_kind(case), name, key)
        logs.setdefault(group, []).append(math.log(value["value"]))
        better[group] = value["better"]
    return {
        group: {"value": math.exp(sum(values) / len(values)), "better": better[group], "cases": len(values)}
        for group, values in logs.items()
    }


def c9_summary(bench: dict | None, impl: str | None, commit: str | None) -> str:
    """The report's C9 line: the last bench's headline ratios when it measured this implementation
    at this commit, else why there are none."""
    if bench is None or bench.get("schema") != BENCH_SCHEMA:
        return "no make bench was run for this report"
    if bench.get("impl") != impl or bench.get("commit") != commit:
        return (
            f"the last make bench measured {bench.get('impl')} at {bench.get('commit')}, "
            f"not {impl} at {commit}: no figure for this run"
        )
    parts = []
    for case in bench["kernels"]:
        if case["step"] == "chain" and case["vocab"] == 128_256 and case["drafts"] == 4 and case["dtype"] == "float32":
            for name in [n for n in ("eager", "compiled", "validated") if n in case["contenders"]]:
                ratios = {k: v["value"] for k, v in case["contenders"][name]["ratios"].items()}
                shown = ", ".join(f"{key} {value:.2f}" for key, value in ratios.items())
                parts.append(f"B={case['batch']} {name}: {shown}")
    for case in bench["generation"]:
        warm = case["contenders"]["cached warm"]
        layers = warm.get("layers", {}).get("median")
        split = (
            ""
            if layers is None
            else f"; its layers {layers['layers speedup']:.2f}x, {layers['layers of predicted']:.0%} of predicted, "
            f"{layers['layers of pairs predicted']:.0%} of the attention pairs' prediction"
        )
        parts.append(
            f"{case['case']}: cached warm {warm['ratios']['vs uncached']['value']:.2f}x "
            f"({warm['ratios']['of predicted']['value']:.0%} of predicted{split})"
        )
    return f"measured by make bench ({bench['datetime']}, {bench['device']}), not asserted: " + "; ".join(parts)
