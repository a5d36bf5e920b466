"""The cost of undoing a speculative round on hybrid and sliding-window mlx-lm models (measured, never asserted).

Per model kind (mlx-lm's own classes, seeded, `hidden` wide), after a prompt
of `prompt` tokens, one round of G drafts of which `accepted` stand. Side by
side, in one run, each call evaluated (`mx.eval`) inside the timing:

- *verify pass*: the target's pass over the last token and the G drafts (from restored caches, as in a loop);
- *snapshot*: copying every cache's state before the pass (`rollback.snapshot_caches`);
- *restore + replay*: the rollback the exact verifier does (`rollback.roll_back`: the accepted tokens again);
- *re-forward*: the other exact rollback, fresh caches fed the whole history (prompt and accepted tokens);
- *restore*: the restore alone, which every contender but re-forward includes.

``python -m ncm_verify.bench.rollback`` prints the table; ``make bench`` writes ``reports/bench-rollback.json``
with the machine and MLX's default device.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.bench.measure import summarise, time_side_by_side
from ncm_verify.environment import describe_environment
from ncm_verify.mlx_lm_real import rollback
from ncm_verify.mlx_lm_real.hybrid_models import HybridSpec, make_hybrid_cache, make_hybrid_model

__all__ = ["KINDS", "rollback_row", "rollback_rows", "format_rows", "main"]

KINDS = (
    HybridSpec("qwen3_next", "RARA"),
    HybridSpec("lfm2", "RRA"),
    HybridSpec("mamba2", "RR"),
    HybridSpec("falcon_h1", "HH"),
    HybridSpec("gemma4_text", "SAS", window=16),
    HybridSpec("llama", "AS", window=16, keep=4),
)
"""One model per kind: recurrent (ArraysCache) layers, sliding-window rings (a keep prefix in the llama's)."""
GRIDS = {"quick": {"rounds": 10, "budget": 1.5}, "full": {"rounds": 20, "budget": 3.0}}
"""Rounds and seconds per model: every kind in both grids, quick with fewer rounds."""


def rollback_row(spec: HybridSpec, *, prompt: int, drafts: int, accepted: int, rounds: int, budget_s: float) -> dict:
    """Median seconds of each contender on `spec` and their ratios to the verify pass."""
    model = make_hybrid_model(spec)
    rng = np.random.default_rng(spec.seed)
    history = mx.array(rng.integers(0, spec.vocab_size, (1, prompt)), dtype=mx.uint32)
    block = mx.array(rng.integers(0, spec.vocab_size, (1, drafts + 1)), dtype=mx.uint32)
    caches = make_hybrid_cache(model, spec)
    model(history, cache=caches)
    before = rollback.snapshot_caches(caches)
    kept = block[:, : accepted + 1]

    def evaluated(function: Callable[[], object]) -> Callable[[], None]:
        def call():
            function()
            mx.eval([cache.state for cache in caches])

        return call

    def verify():
        rollback.restore_caches(caches, before)
        mx.eval(model(block, cache=caches))

    def re_forward():
        fresh = make_hybrid_cache(model, spec)
        model(mx.concatenate([history, kept], axis=1), cache=fresh)
        mx.eval([cache.state for cache in fresh])

    contenders = {
        "verify pass": verify,
        "snapshot": lambda: rollback.snapshot_caches(caches),
        "restore + replay": evaluated(lambda: rollback.roll_back(model, caches, before, kept)),
        "re-forward": re_forward,
        "restore": evaluated(lambda: rollback.restore_caches(caches, before)),
    }
    summary = {name: summarise(samples) for name, samples in time_side_by_side(contenders, rounds, budget_s).items()}
    base = summary["verify pass"]["median_s"]
    for figures in summary.values():
        figures["x verify pass"] = figures["median_s"] / base
    return {
        "model": f"{spec.kind} {spec.layers}"
        + (f" window {spec.window} keep {spec.keep}" if "S" in spec.layers else ""),
        "spec": repr(spec),
        "prompt": prompt,
        "drafts": drafts,
        "accepted": accepted,
        "contenders": summary,
    }


def rollback_rows(
    *, hidden: int, prompt: int, drafts: int, accepted: int, rounds: int, budget_s: float, progress: Callable = print
) -> list[dict]:
    rows = []
    for spec in KINDS:
        spec = HybridSpec(**{**spec.__dict__, "hidden_size": hidden})
        rows.append(
            rollback_row(spec, prompt=prompt, drafts=drafts, accepted=accepted, rounds=rounds, budget_s=budget_s)
        )
        progress(format_rows(rows[-1:], header=len(rows) == 1))
    return rows


def format_rows(rows: list[dict], header: bool = True) -> str:
    names = ("verify pass", "snapshot", "restore + replay", "re-forward", "restore")
    lines = [f"{'model':34}" + "".join(f"{name:>24}" for name in names)] if header else []
    for row in rows:
        cells = "".join(
            f"{row['contenders'][n]['median_s'] * 1e3:12.3f} ms {row['contenders'][n]['x verify pass']:5.2f}x   "
            for n in names
        )
        lines.append(f"{row['model']:34}{cells}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.rollback", description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of every model")
    parser.add_argument("--prompt", type=int, default=128, help="tokens before the round")
    parser.add_argument("--drafts", type=int, default=4)
    parser.add_argument("--accepted", type=int, default=1)
    add_grid_argument(parser)
    parser.add_argument("--rounds", type=int, help="interleaved rounds per model (the grid's: 10 quick, 20 full)")
    parser.add_argument("--budget", type=float, help="seconds per model before stopping (1.5 quick, 3 full)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    arguments = parser.parse_args(argv)
    apply_grid(arguments, GRIDS[arguments.grid])
    if not 0 <= arguments.accepted < arguments.drafts:
        parser.error("--accepted: a rollback needs a rejected draft, so 0 <= accepted < drafts")
    environment = describe_environment()
    figures = {
        "grid": arguments.grid,
        "rounds": arguments.rounds,
        "budget_s": arguments.budget,
        "environment": environment,
        "rows": rollback_rows(
            hidden=arguments.hidden,
            prompt=arguments.prompt,
            drafts=arguments.drafts,
            accepted=arguments.accepted,
            rounds=arguments.rounds,
            budget_s=arguments.budget,
        ),
    }
    print(f"device: {environment['mlx_default_device']}")
    if arguments.out is not None:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(figures, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"written to {arguments.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
