"""The bench's ratios, table, baseline comparison and the report's C9 line: pure functions of bench.json.

No MLX here, so that the report can read a bench without measuring anything.
"""

from __future__ import annotations

import math

BENCH_SCHEMA = "ncm-verify/bench/1"
BENCH_CLAIM = "C9"
RATIO_KEYS = {"median": "ratios", "min": "ratios_of_minima"}
"""Where each statistic's ratios are kept in a contender's row."""
COMPARE_THRESHOLD = 0.6
"""A grouped ratio worse than the baseline's by a factor above 1 + this is a regression: two runs of one
commit under load 14 on 2 cores moved grouped ratios by at most 1.5x; a quiet machine moves them less."""
COMPARE_STATISTIC = "median"
"""The statistic whose ratios are compared; minima moved as much as medians once grouped."""


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
    header = ("case", "contender", "median", "vs numpy", "vs transformers", "x copy floor", "x MLX floor", "vs eager")
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


# --- comparison and the report's C9 row ---------------------------------------------------


def flat_ratios(bench: dict, statistic: str = "median") -> dict[tuple[str, str, str], dict]:
    """Every ratio of a bench by (case, contender, ratio name), from medians or minima."""
    if statistic not in RATIO_KEYS:
        raise ValueError(f"statistic: expected one of {', '.join(RATIO_KEYS)}, got {statistic!r}")
    return {
        (case["case"], name, key): value
        for case in bench.get("kernels", []) + bench.get("generation", [])
        for name, row in case["contenders"].items()
        for key, value in row.get(RATIO_KEYS[statistic], {}).items()
    }


def case_kind(case: str) -> str:
    """A case's kind from its name: chain, greedy, factorized or generation, "on SmolLM2" where its rows are
    SmolLM2's (measure.BenchCase.name), so that a grid with real rows keeps the random rows' means comparable."""
    words = case.split()
    return words[0] + (" on SmolLM2" if "SmolLM2" in words else "")


def grouped_ratios(bench: dict, statistic: str = "median") -> dict[tuple[str, str, str], dict]:
    """Each ratio's geometric mean over the grid's cases, by (kind of case, contender, ratio name).

    One case's ratio moves by up to 2.7x between two runs of the same code on a loaded
    machine; the mean over a kind of case moved by at most 1.5x (measured under load 14).
    """
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


def compare_benches(
    baseline: dict, current: dict, threshold: float = COMPARE_THRESHOLD, statistic: str = COMPARE_STATISTIC
) -> list[str]:
    """Grouped ratios worse than the baseline's by more than a factor 1 + `threshold`, one line each."""
    if not 0 < threshold <= 10:
        raise ValueError(f"threshold: expected a fraction in (0, 10], got {threshold}")
    regressions = []
    old = grouped_ratios(baseline, statistic)
    for where, now in grouped_ratios(current, statistic).items():
        if where not in old:
            continue
        before = old[where]["value"]
        factor = before / now["value"] if now["better"] == "higher" else now["value"] / before
        if factor > 1 + threshold:
            regressions.append(
                f"{' :: '.join(where)}: {now['value']:.3g} (baseline {before:.3g}, "
                f"{now['better']} is better; worse by {factor:.2f}x > {1 + threshold:.2f}x)"
            )
    return regressions


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
