"""C12's level-drafting table from a pytest-benchmark JSON (`make bench` writes reports/bench-pytest.json).

``python -m ncm_verify.bench.levels reports/bench-pytest.json`` prints, per draft, accepted levels per target
pass measured beside the exact prediction (the acceptance probabilities of the levels the run verified),
target passes per generation, and wall time against level-by-level generation timed alternately with it in
the same run (batch 8 and 1), the draft's code law's overlap with the target's (as coded and under its best
relabelling, trained rows only), with the MLX device each figure was taken on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HEADER = (
    f"{'draft':24} {'target':24} {'lvl/pass':>8} {'pred':>6} {'acc/lvl':>7} {'pred':>6} {'passes':>6} "
    f"{'spec ms b8':>10} {'lbl ms b8':>9} {'ratio b8':>8} {'ratio b1':>8} {'codes':>5} {'best':>5}  device"
)


def level_rows(benchmarks: list[dict]) -> list[str]:
    """One line per level-drafting benchmark that measured counts (the drafting rows, not level-by-level)."""
    lines = [HEADER]
    for bench in benchmarks:
        e = bench.get("extra_info", {})
        if "accepted_levels_per_pass" not in e or "accepted_levels_per_pass_predicted_at_visited" not in e:
            continue
        suffix = "_batch8" if "drafting_ms_batch8" in e else ""
        lines.append(
            f"{e['draft']:24} {e['target']:24} {e['accepted_levels_per_pass']:8.3f} "
            f"{e['accepted_levels_per_pass_predicted_at_visited']:6.3f} {e['acceptance_per_drafted_level']:7.3f} "
            f"{e['acceptance_per_drafted_level_at_visited']:6.3f} {e['target_passes_per_generation']:6.2f} "
            f"{e['drafting_ms' + suffix]:10.2f} {e['level_by_level_ms' + suffix]:9.2f} "
            f"{e['wall_ratio_vs_level_by_level' + suffix]:8.2f} "
            f"{e.get('wall_ratio_vs_level_by_level_batch1', float('nan')):8.2f} "
            f"{e.get('code_overlap', float('nan')):5.2f} {e.get('code_overlap_best_relabelling', float('nan')):5.2f}  "
            f"{e.get('device', '?')}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.levels", description=__doc__.split("\n")[0])
    parser.add_argument("json", type=Path, nargs="?", default=Path("reports/bench-pytest.json"))
    args = parser.parse_args(argv)
    if not args.json.is_file():
        raise ValueError(f"json: {args.json} is missing; `make bench` writes it")
    print("\n".join(level_rows(json.loads(args.json.read_text())["benchmarks"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
