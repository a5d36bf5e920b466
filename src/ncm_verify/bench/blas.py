"""MLX's CPU matmuls with the BLAS it bundles beside a preloaded OpenBLAS, side by side in one run.

`python -m ncm_verify.bench.blas` runs the same measurements in two child processes, one without LD_PRELOAD and one
preloading the OpenBLAS the Makefile found (`--blas`), and prints them beside each other: a float32 matmul the size
of a SmolLM2 projection, and SmolLM2-135M's one-token step and 8-token verify pass in both forms. Each child reports
the library `cblas_sgemm` resolved to (environment.mlx_cpu_blas), so a preload that did not take shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.progress import Progress

PROMPT_TOKENS = 16
PASS_TOKENS = 8
GRIDS = {"quick": {"repeats": 3}, "full": {"repeats": 5}}
"""Calls per median (the matmul: 5x as many): both BLAS and every form in both grids."""


def median_ms(function, repeats: int) -> float:
    from ncm_verify.bench.drafting import median_seconds

    return 1e3 * median_seconds(function, repeats)


def model_pass(model, tokens: int):
    """A forward of `tokens` tokens after a cached 16-token prompt, then the cache trimmed back (mx.eval inside)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.arange(100, 100 + PROMPT_TOKENS)[None], cache=cache))
    inputs = mx.arange(200, 200 + tokens)[None]

    def run():
        mx.eval(model(inputs, cache=cache))
        for layer in cache:
            layer.trim(tokens)

    return run


def measure(repeats: int) -> dict:
    """This process's figures: the matmul, and each form's step and pass, in ms (medians)."""
    import mlx.core as mx

    from ncm_verify.environment import describe_environment
    from ncm_verify.mlx_lm_real.smollm2 import FORMS, load_smollm2

    a, b = mx.random.normal((64, 576)), mx.random.normal((576, 1536))
    mx.eval(a, b)
    figures = {"matmul_64x576x1536_ms": median_ms(lambda: mx.eval(a @ b), 5 * repeats)}
    for form in FORMS:
        model = load_smollm2(form=form).model
        figures[f"{form}_step_ms"] = median_ms(model_pass(model, 1), repeats)
        figures[f"{form}_pass{PASS_TOKENS}_ms"] = median_ms(model_pass(model, PASS_TOKENS), repeats)
    environment = describe_environment()
    figures["mlx_cpu_blas"] = environment["mlx_cpu_blas"]
    figures["device"] = environment["mlx_default_device"]
    return figures


def side_by_side(blas: str, repeats: int, threads: str) -> dict:
    """Both settings measured by children of this process, one after the other."""
    results = {}
    tracker = Progress("bench.blas", 2)
    for name, preload in (("bundled", ""), ("openblas", blas)):
        tracker.start(f"{name} BLAS: a matmul, then each SmolLM2 form's step and {PASS_TOKENS}-token pass")
        environment = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OPENBLAS_NUM_THREADS")}
        if preload:
            environment.update(LD_PRELOAD=preload, OPENBLAS_NUM_THREADS=threads)
        command = [sys.executable, "-m", "ncm_verify.bench.blas", "--child", "--repeats", str(repeats)]
        output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(output.strip().splitlines()[-1])
        tracker.done(f"{name} BLAS")
    return results


def format_rows(results: dict) -> str:
    names = list(results)
    keys = [k for k in results[names[0]] if k.endswith("_ms")]
    lines = [f"{'':28s}" + "".join(f"{name:>12s}" for name in names) + f"{'ratio':>8s}"]
    for key in keys:
        values = [results[name][key] for name in names]
        lines.append(f"{key:28s}" + "".join(f"{v:12.1f}" for v in values) + f"{values[0] / values[-1]:8.1f}")
    for key in ("mlx_cpu_blas", "device"):
        lines.extend(f"{key} ({name}): {results[name][key]}" for name in names)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--blas", default=os.environ.get("LD_PRELOAD", "").split(" ")[0], help="library to preload")
    parser.add_argument("--threads", default=os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    add_grid_argument(parser)
    parser.add_argument("--repeats", type=int, help="calls per median (the grid's: 3 quick, 5 full)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    apply_grid(args, GRIDS[args.grid])
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return 0
    if not args.blas:
        print("bench.blas: no OpenBLAS to preload (Debian libopenblas0-pthread); only the bundled BLAS measured")
        results = {"bundled": measure(args.repeats)}
    else:
        results = side_by_side(args.blas, args.repeats, args.threads)
    print(format_rows(results))
    if args.out:
        args.out.write_text(json.dumps({**results, "grid": args.grid, "repeats": args.repeats}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
