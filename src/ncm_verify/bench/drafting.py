"""Text drafting measured (C12: reported, never asserted): per drafter and draft length k, tokens per target
pass (predicted from the rows each round was handed, and measured), wall time against the target decoding
alone with mlx-lm's `generate_step`, and the speedup Leviathan et al.'s formula predicts,
(1 - a^(k+1)) / ((1 - a)(k c + 1)), from the measured acceptance a and the measured cost ratio c.

Drafters come as a list (`BenchDrafter`): `default_drafters` builds the tiny seeded test drafters, untrained,
so their acceptance means nothing beyond this machine's cost structure; trained drafters plug in the same
way. Where the time goes is split per call: a target step (one token), a target verification pass (k + 1
tokens), a proposal of k tokens, `verify_chain`, and an MLX round trip. ``python -m ncm_verify.bench.drafting``
prints the tables and writes ``reports/bench-drafting.json``; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import make_sampler

from ncm_verify.bench.measure import summarise, time_side_by_side
from ncm_verify.environment import describe_environment
from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model
from ncm_verify.mlx_lm_real.text_drafters import RecordingKernels, make_drafter
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, load_implementation

__all__ = ["BenchDrafter", "default_drafters", "leviathan_speedup", "measure", "main"]

PROMPT = [1, 2, 3, 4]
DRAFT_LENGTHS = tuple(range(1, 9))
TARGET_SPEC = TinySpec(vocab_size=31, seed=0, num_layers=4, hidden_size=64, num_heads=4)
SIZE_SWEEP = (64, 256, 1024)
"""Target hidden sizes whose step cost is measured, to place where the prediction crosses 1."""


@dataclasses.dataclass(frozen=True)
class BenchDrafter:
    """A drafter to measure, with how the report names it and what it is (trained or not, its size)."""

    name: str
    drafter: Any
    note: str


def default_drafters(target_spec: TinySpec = TARGET_SPEC) -> list[BenchDrafter]:
    """The test drafters, untrained: two autoregressive ones (the target's weights under a scaled head,
    close; other weights, far) and the NCM-style block drafters (random weights)."""
    small = dataclasses.replace(target_spec, num_layers=1, hidden_size=16, num_heads=2)
    return [
        BenchDrafter(
            "AR: target weights, head x1.5",
            make_drafter("autoregressive", target_spec, 0, logit_scale=1.5 * target_spec.logit_scale),
            "the target itself, sharper: c ~ 1, high acceptance (untrained)",
        ),
        BenchDrafter(
            "AR: small, random", make_drafter("autoregressive", small, 1), "1 layer, hidden 16, random (untrained)"
        ),
        BenchDrafter(
            "block: random",
            make_drafter("block", target_spec, 2, max_block=max(DRAFT_LENGTHS)),
            "1 layer, hidden 16, random (untrained)",
        ),
        BenchDrafter(
            "block + features: random",
            make_drafter("block reading features", target_spec, 3, max_block=max(DRAFT_LENGTHS)),
            "1 layer, hidden 16, reads the target's state, random (untrained)",
        ),
    ]


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Expected wall-time speedup (Leviathan et al. 2023, eq. in section 3.5): (1 - a^(k+1)) / ((1 - a)(k c + 1))."""
    tokens = (k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + 1)


def median_seconds(function: Callable[[], object], repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        function()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def target_step(target, tokens: int) -> Callable[[], None]:
    """One cached target pass over `tokens` new tokens after the prompt, evaluated."""
    cache = make_prompt_cache(target)
    target(mx.array([PROMPT]), cache=cache)
    mx.eval([c.state for c in cache])
    inputs = mx.array([[5] * tokens])

    def step():
        mx.eval(target(inputs, cache=cache))
        trim_prompt_cache(cache, tokens)

    return step


def proposal(drafter, k: int, features) -> Callable[[], None]:
    """One proposal of k tokens after the prompt, evaluated."""
    cache = drafter.make_cache()
    drafter.propose(cache, mx.array([PROMPT]), 1, mx.random.key(0), features=features)
    trim_prompt_cache(cache, cache[0].offset - len(PROMPT) + 1)
    new = mx.array([[5]])

    def propose():
        block = drafter.propose(cache, new, k, mx.random.key(1), features=features)
        mx.eval(block.tokens, block.probs)
        trim_prompt_cache(cache, cache[0].offset - len(PROMPT) + 1)

    return propose


def verification(impl, k: int, vocab: int) -> Callable[[], None]:
    """One `verify_chain` call on random rows of a block of k, evaluated."""
    p = mx.softmax(mx.random.normal((1, k + 1, vocab)), axis=-1)
    q = mx.softmax(mx.random.normal((1, k, vocab)), axis=-1)
    drafts = mx.zeros((1, k), dtype=mx.int32)
    return lambda: mx.eval(impl.verify_chain(p, q, drafts, key=mx.random.key(0)).tokens)


def drafted_generation(impl, target, drafter, tokens: int, k: int, passes: list) -> Callable[[], None]:
    """One drafted generation of `tokens` tokens per call (a fresh key each), its target passes kept in `passes`."""
    seeds = iter(range(1, 1 << 30))

    def generate() -> None:
        generation = impl.generate_drafted(
            target, drafter, PROMPT, tokens, num_draft=k, key=mx.random.key(next(seeds)), kernels=impl
        )
        passes.append(generation.target_passes)

    return generate


def acceptance(impl, target, drafter, k: int, tokens: int, seed: int) -> dict:
    """Per-position acceptance sum min(p, q) of the rows each round was handed, and the tokens per pass
    they predict (1 + sum_i prod_{j <= i} a_j per round), from one recorded generation."""
    calls: list = []
    generation = impl.generate_drafted(
        target,
        drafter,
        PROMPT,
        tokens,
        num_draft=k,
        key=mx.random.key(seed),
        kernels=RecordingKernels(impl, calls),
    )
    per_position, predicted = [], []
    for _, record in calls:
        p, q = np.array(record["p"][0], dtype=np.float64), np.array(record["q"][0], dtype=np.float64)
        stand = np.minimum(p[:-1], q).sum(axis=-1)
        per_position += stand.tolist()
        predicted.append(1 + float(np.cumprod(stand).sum()))
    return {
        "alpha": float(np.mean(per_position)),
        "predicted_tokens_per_pass": float(np.mean(predicted)),
        "recorded_tokens_per_pass": len(generation.tokens) / generation.target_passes,
    }


def measure(impl, target, drafters: list[BenchDrafter], *, tokens: int, rounds: int, ks=DRAFT_LENGTHS) -> dict:
    """Every drafter at every k beside the target alone, interleaved per k; see the module docstring."""
    sampler = make_sampler(temp=1.0)
    prompt = mx.array(PROMPT)

    def target_alone():
        for _ in generate_step(prompt, target, max_tokens=tokens, sampler=sampler):
            pass

    round_trip = median_seconds(lambda: mx.eval(mx.array(1.0) + 1), 50)
    features = mx.zeros((1, target.args.hidden_size))
    rows = []
    for k in ks:
        # every per-call cost of this k timed interleaved, so that the machine's noise hits them alike
        parts: dict[str, Callable[[], object]] = {
            "target step (1 token)": target_step(target, 1),
            f"target pass ({k + 1} tokens)": target_step(target, k + 1),
            "verify_chain": verification(impl, k, target.args.vocab_size),
        }
        for entry in drafters:
            parts[f"proposal ({k} tokens): {entry.name}"] = proposal(
                entry.drafter, k, features if entry.drafter.reads_features else None
            )
        part_times = {name: statistics.median(t) for name, t in time_side_by_side(parts, 15, budget_s=20.0).items()}
        step_1 = part_times["target step (1 token)"]
        contenders: dict[str, Callable[[], object]] = {"target alone": target_alone}
        counters: dict[str, list] = {entry.name: [] for entry in drafters}
        for entry in drafters:
            contenders[entry.name] = drafted_generation(impl, target, entry.drafter, tokens, k, counters[entry.name])
        times = time_side_by_side(contenders, rounds, budget_s=60.0, burst=1)
        alone = statistics.median(times["target alone"])
        for entry in drafters:
            seen = acceptance(impl, target, entry.drafter, k, tokens, seed=1000 + k)
            propose = part_times[f"proposal ({k} tokens): {entry.name}"]
            c = propose / (k * step_1)
            loop = statistics.median(times[entry.name])
            rows.append(
                {
                    "drafter": entry.name,
                    "k": k,
                    "alpha": seen["alpha"],
                    "tokens_per_pass_predicted": seen["predicted_tokens_per_pass"],
                    "tokens_per_pass_leviathan": leviathan_speedup(seen["alpha"], k, 0.0),
                    "tokens_per_pass_measured": tokens / statistics.mean(counters[entry.name]),
                    "c": c,
                    "speedup_predicted": leviathan_speedup(seen["alpha"], k, c),
                    "speedup_measured": alone / loop,
                    "c_for_speedup_1": (leviathan_speedup(seen["alpha"], k, 0.0) - 1) / k,
                    "seconds": {
                        "target alone": summarise(times["target alone"]),
                        "drafted": summarise(times[entry.name]),
                    },
                    "per_call_s": {
                        "target step (1 token)": step_1,
                        f"target pass ({k + 1} tokens)": part_times[f"target pass ({k + 1} tokens)"],
                        f"proposal ({k} tokens)": propose,
                        "verify_chain": part_times["verify_chain"],
                        "mlx round trip": round_trip,
                    },
                }
            )
    return {"rows": rows, "tokens": tokens, "round_trip_s": round_trip}


def size_sweep(sizes=SIZE_SWEEP, repeats: int = 10) -> list[dict]:
    """A target step's cost by hidden size (layers as the bench's target): where c falls as the target grows."""
    out = []
    for hidden in sizes:
        spec = dataclasses.replace(TARGET_SPEC, hidden_size=hidden, num_heads=max(2, hidden // 32))
        out.append(
            {"hidden_size": hidden, "target_step_s": median_seconds(target_step(make_tiny_model(spec), 1), repeats)}
        )
    return out


def crossing_rows(result: dict) -> list[dict]:
    """Leviathan's prediction per drafter and k were the target as slow as each swept size (acceptance and
    proposal cost as measured): where a drafter's prediction crosses 1 as the target grows. Meaningless for
    a drafter that is the target itself (its cost grows with it)."""
    out = []
    for row in result["rows"]:
        propose = next(v for name, v in row["per_call_s"].items() if name.startswith("proposal"))
        predicted = {
            size["hidden_size"]: leviathan_speedup(row["alpha"], row["k"], propose / (row["k"] * size["target_step_s"]))
            for size in result["size_sweep"]
        }
        out.append({"drafter": row["drafter"], "k": row["k"], "speedup_predicted_by_target_hidden_size": predicted})
    return out


def format_crossing(rows: list[dict]) -> str:
    sizes = list(rows[0]["speedup_predicted_by_target_hidden_size"]) if rows else []
    lines = [f"{'predicted speedup, target hidden size':37} " + " ".join(f"{size:>7}" for size in sizes)]
    for row in rows:
        figures = row["speedup_predicted_by_target_hidden_size"]
        lines.append(f"{row['drafter']:32} k={row['k']:<2} " + " ".join(f"{figures[s]:7.2f}" for s in sizes))
    return "\n".join(lines)


def format_rows(result: dict) -> str:
    lines = [
        f"{'drafter':28} {'k':>2} {'alpha':>6} {'tok/pass pred':>13} {'measured':>9} {'c':>6} "
        f"{'speedup pred':>12} {'measured':>9} {'c for 1':>8} {'propose ms':>10} {'pass ms':>8} {'step ms':>8}"
    ]
    for row in result["rows"]:
        calls = row["per_call_s"]
        propose = next(v for name, v in calls.items() if name.startswith("proposal"))
        verify_pass = next(v for name, v in calls.items() if name.startswith("target pass"))
        lines.append(
            f"{row['drafter']:28} {row['k']:>2} {row['alpha']:6.3f} {row['tokens_per_pass_predicted']:13.2f} "
            f"{row['tokens_per_pass_measured']:9.2f} {row['c']:6.2f} {row['speedup_predicted']:12.2f} "
            f"{row['speedup_measured']:9.2f} {row['c_for_speedup_1']:8.3f} {propose * 1e3:10.2f} "
            f"{verify_pass * 1e3:8.2f} {calls['target step (1 token)'] * 1e3:8.2f}"
        )
    return "\n".join(lines)


TREE_LOOP_PAIRS = {
    "tiny llama V=8 (seeds 1/2)": (TinySpec(vocab_size=8, seed=1), TinySpec(vocab_size=8, seed=2)),
    "tiny llama V=8 (tempered)": (TinySpec(vocab_size=8, seed=1), TinySpec(vocab_size=8, seed=1, logit_scale=1.5)),
}
"""The tiny target/draft pairs of `bench.trees` (there as tables, here as models in the tree-decoding loop)."""


def tree_loop_rows(
    impl, *, generations: int = 100, tokens: int = 16, first_rounds: int = 400, seed: int = 0
) -> list[dict]:
    """Tokens per target pass in `generate_tree_drafted`, chain vs trees of `bench.trees.BUDGET` nodes, per mode.

    Per row: the mean of accepted + 1 over every round drafted at full depth in `generations` generations of
    `tokens` tokens (a generation's last round may be cut shorter), and over `first_rounds` one-round
    generations beside the exact first-round figure `bench.trees` enumerates from the same pair's rows after the
    same prompt (a z-score: the loop against the kernel's law). Each row draws its own keys (`row_seed`).
    """
    from ncm_verify.bench.trees import BUDGET_SHAPES, MODEL_PROMPT, exact_tokens_per_pass, model_fixture, row_seed

    rows = []
    for p, (pair, (target_spec, draft_spec)) in enumerate(TREE_LOOP_PAIRS.items()):
        target, draft = make_tiny_model(target_spec), make_tiny_model(draft_spec)
        fixture = model_fixture(target_spec, draft_spec)
        for m, mode in enumerate(("with_replacement", "without_replacement", "top_k")):
            for s, (name, shape) in enumerate(BUDGET_SHAPES.items()):
                key = mx.random.key(row_seed(seed, p, m, s))
                loop_keys, first_keys = mx.random.split(key)
                full: list[int] = []
                started = time.perf_counter()
                for generation_key in mx.random.split(loop_keys, generations):
                    generation = impl.generate_tree_drafted(
                        target, draft, list(MODEL_PROMPT), tokens, branching=shape, mode=mode, key=generation_key
                    )
                    wanted = tokens
                    for accepted in generation.accepted:
                        if wanted > len(shape):  # drafted at full depth
                            full.append(accepted + 1)
                        wanted -= accepted + 1
                seconds = time.perf_counter() - started
                first = [
                    impl.generate_tree_drafted(
                        target, draft, list(MODEL_PROMPT), len(shape) + 1, branching=shape, mode=mode, key=first_key
                    ).accepted[0]
                    + 1
                    for first_key in mx.random.split(first_keys, first_rounds)
                ]
                exact = exact_tokens_per_pass(fixture, shape, mode)
                first_mean = float(np.mean(first))
                first_error = float(np.std(first, ddof=1) / np.sqrt(len(first)))
                rows.append(
                    {
                        "pair": pair,
                        "mode": mode,
                        "tree": name,
                        "nodes": sum(int(np.prod(shape[: d + 1])) for d in range(len(shape))),
                        "tokens_per_pass": float(np.mean(full)),
                        "stderr": float(np.std(full, ddof=1) / np.sqrt(len(full))),
                        "passes": len(full),
                        "first_round": first_mean,
                        "first_round_exact": exact,
                        "first_round_z": (first_mean - exact) / first_error if first_error > 0 else float("nan"),
                        "first_rounds": first_rounds,
                        "seconds": seconds,
                    }
                )
                print(format_tree_loop_rows(rows[-1:], header=len(rows) == 1), flush=True)
    return rows


def format_tree_loop_rows(rows: list[dict], header: bool = True) -> str:
    lines = []
    if header:
        lines.append(
            f"{'pair':28s} {'mode':20s} {'tree':15s} {'nodes':>5s} {'tok/pass':>9s} {'+-':>6s} {'passes':>6s} "
            f"{'1st round':>9s} {'exact':>7s} {'z':>6s} {'s':>6s}"
        )
    for r in rows:
        lines.append(
            f"{r['pair']:28s} {r['mode']:20s} {r['tree']:15s} {r['nodes']:5d} {r['tokens_per_pass']:9.4f} "
            f"{r['stderr']:6.4f} {r['passes']:6d} {r['first_round']:9.4f} {r['first_round_exact']:7.4f} "
            f"{r['first_round_z']:6.2f} {r['seconds']:6.1f}"
        )
    return "\n".join(lines)


def tree_loop_main(args) -> int:
    """``--tree-loop``: the tree-decoding loop's tokens per target pass alone, into ``--out``."""
    impl = load_implementation(args.impl)
    environment = describe_environment()
    print(
        f"tree decoding loop on {environment.get('mlx_default_device')}: {args.generations} generations of "
        f"{args.tokens} tokens and {args.first_rounds} first rounds per row"
    )
    rows = tree_loop_rows(impl, generations=args.generations, tokens=args.tokens, first_rounds=args.first_rounds)
    out = args.out if args.out != Path("reports/bench-drafting.json") else Path("reports/bench-tree-loop.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows, "environment": environment}, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.drafting", description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    parser.add_argument("--out", type=Path, default=Path("reports/bench-drafting.json"))
    parser.add_argument("--tokens", type=int, default=32, help="tokens per generation")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per k")
    parser.add_argument("--ks", type=int, nargs="+", default=list(DRAFT_LENGTHS))
    parser.add_argument("--tree-loop", action="store_true", help="only the tree-decoding loop's tokens per pass")
    parser.add_argument("--generations", type=int, default=100, help="--tree-loop: generations per row")
    parser.add_argument("--first-rounds", type=int, default=400, help="--tree-loop: one-round generations per row")
    args = parser.parse_args(argv)
    if args.tree_loop:
        return tree_loop_main(args)
    impl = load_implementation(args.impl)
    target = make_tiny_model(TARGET_SPEC)
    environment = describe_environment()
    print(f"C12 text drafting on {environment.get('mlx_default_device')}: target {TARGET_SPEC}, {args.tokens} tokens")
    drafters = default_drafters()
    print("drafters (tiny, untrained; trained ones plug into the same list): " + "; ".join(d.name for d in drafters))
    result = measure(impl, target, drafters, tokens=args.tokens, rounds=args.rounds, ks=args.ks)
    result["size_sweep"] = size_sweep()
    result["crossing"] = crossing_rows(result)
    result["environment"] = environment
    result["drafters"] = {entry.name: entry.note for entry in drafters}
    result["target"] = dataclasses.asdict(TARGET_SPEC)
    print(format_rows(result))
    print(
        f"per call: MLX round trip "
        f"{result['round_trip_s'] * 1e3:.3f} ms; target step by hidden size: "
        + ", ".join(f"{s['hidden_size']}: {s['target_step_s'] * 1e3:.2f} ms" for s in result["size_sweep"])
    )
    print(format_crossing(result["crossing"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
