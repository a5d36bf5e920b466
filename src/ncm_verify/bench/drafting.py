"""Text drafting measured (C12: reported, never asserted): per drafter and draft length k, tokens per target
pass (predicted from the rows each round was handed, and measured), wall time against the target decoding
alone with mlx-lm's `generate_step`, and the speedup Leviathan et al.'s formula predicts,
(1 - a^(k+1)) / ((1 - a)(k c + 1)), from the measured acceptance a and the measured cost ratio c.

By default it measures the models `make train` ships (`trained_drafters`, `measure_trained`): on held-out
prompts, tokens per pass exact (`oracles.exact_acceptance` on those very prompts) beside the loop's, and every
figure (generations and per-call costs) interleaved in one run. `default_drafters` (``--drafters untrained``)
builds the tiny seeded test drafters, untrained, whose acceptance means nothing beyond this machine's cost
structure. Where the time goes is split per call: a target step (one token), a target verification pass (k + 1
tokens), a proposal of k tokens, `verify_chain`, the rest of the loop, and an MLX round trip; each model's
calls are fitted as a cost per call plus one per token. ``python -m ncm_verify.bench.drafting`` prints the
tables and writes ``reports/bench-drafting.json``; `make bench` runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
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

from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.bench.measure import summarise, time_side_by_side
from ncm_verify.environment import describe_environment
from ncm_verify.harness import drafting_acceptance
from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model
from ncm_verify.mlx_lm_real.text_drafters import RecordingKernels, make_drafter
from ncm_verify.oracles.exact_acceptance import BlockAcceptance
from ncm_verify.progress import Progress
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, load_implementation
from ncm_verify.reference.drafting.models import llama_args, make_llama
from ncm_verify.reference.drafting.trained import load_drafter, load_record, load_trained

__all__ = [
    "BenchDrafter",
    "default_drafters",
    "exact_tokens_per_pass",
    "iid_acceptance",
    "leviathan_speedup",
    "main",
    "measure",
    "measure_trained",
    "trained_drafters",
]

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


def target_step(target, tokens: int, prompt=PROMPT) -> Callable[[], None]:
    """One cached target pass over `tokens` new tokens after the prompt, evaluated."""
    cache = make_prompt_cache(target)
    target(mx.array([prompt]), cache=cache)
    mx.eval([c.state for c in cache])
    inputs = mx.array([[5] * tokens])

    def step():
        mx.eval(target(inputs, cache=cache))
        trim_prompt_cache(cache, tokens)

    return step


def proposal(drafter, k: int, features, prompt=PROMPT) -> Callable[[], None]:
    """One proposal of k tokens after the prompt, evaluated."""
    cache = drafter.make_cache()
    drafter.propose(cache, mx.array([prompt]), 1, mx.random.key(0), features=features)
    trim_prompt_cache(cache, cache[0].offset - len(prompt) + 1)
    new = mx.array([[5]])

    def propose():
        block = drafter.propose(cache, new, k, mx.random.key(1), features=features)
        mx.eval(block.tokens, block.probs)
        trim_prompt_cache(cache, cache[0].offset - len(prompt) + 1)

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


def tiny_target_of_size(hidden: int):
    """The bench's tiny target at another hidden size (random weights: only its cost is read)."""
    return make_tiny_model(dataclasses.replace(TARGET_SPEC, hidden_size=hidden, num_heads=max(2, hidden // 32)))


def size_sweep(
    sizes=SIZE_SWEEP, repeats: int = 10, make_target=tiny_target_of_size, prompt=PROMPT, pass_lengths=()
) -> list[dict]:
    """A target step's cost by hidden size (layers as the bench's target): where c falls as the target grows;
    with `pass_lengths`, also its verification passes of that many tokens, every size and length interleaved
    in one run, so that their ratios share the machine's load."""
    if not pass_lengths:
        return [
            {"hidden_size": h, "target_step_s": median_seconds(target_step(make_target(h), 1, prompt), repeats)}
            for h in sizes
        ]
    lengths = sorted(set(pass_lengths) | {1})
    calls: dict[str, Callable[[], object]] = {}
    for hidden in sizes:
        target = make_target(hidden)
        calls.update({f"{hidden} {n}": target_step(target, n, prompt) for n in lengths})
    times = time_side_by_side(calls, repeats, math.inf, burst=1)
    out = []
    for hidden in sizes:
        medians = {str(n): statistics.median(times[f"{hidden} {n}"]) for n in lengths}
        out.append({"hidden_size": hidden, "target_step_s": medians["1"], "target_pass_s": medians})
    return out


def crossing_rows(result: dict, reference_hidden: int | None = None) -> list[dict]:
    """Leviathan's prediction per drafter and k were the target as slow as each swept size (acceptance and
    proposal cost as measured): where a drafter's prediction crosses 1 as the target grows. Meaningless for
    a drafter that is the target itself (its cost grows with it). Where the sweep timed verification passes
    and the row has measured tokens per pass, also the prediction from the round's parts at that size:
    tokens per pass x step / (proposal + pass of k + 1 tokens + verify_chain). With `reference_hidden` (the
    measured target's size, in the sweep), the sweep's times are scaled by the row's step over the sweep's
    step at that size: only the sweep's ratios are used, each measured side by side, never two clocks mixed."""
    sweep = result["size_sweep"]
    out = []
    for row in result["rows"]:
        propose = next(v for name, v in row["per_call_s"].items() if name.startswith("proposal"))
        scale = 1.0
        if reference_hidden is not None:
            reference = next(size for size in sweep if size["hidden_size"] == reference_hidden)
            scale = row["per_call_s"]["target step (1 token)"] / reference["target_step_s"]
        predicted = {
            size["hidden_size"]: leviathan_speedup(
                row["alpha"], row["k"], propose / (row["k"] * scale * size["target_step_s"])
            )
            for size in sweep
        }
        entry = {"drafter": row["drafter"], "k": row["k"], "speedup_predicted_by_target_hidden_size": predicted}
        measured = row.get("tokens_per_pass_measured")
        if isinstance(measured, dict) and all("target_pass_s" in size for size in sweep):
            verify = row["per_call_s"]["verify_chain"]
            entry["speedup_from_parts_by_target_hidden_size"] = {
                size["hidden_size"]: measured["mean"]
                * scale
                * size["target_step_s"]
                / (propose + scale * size["target_pass_s"][str(row["k"] + 1)] + verify)
                for size in sweep
            }
        out.append(entry)
    return out


def linear_cost(lengths: list[int], seconds: list[float]) -> dict:
    """Least-squares seconds = per_call + per_token x length: a call's fixed cost apart from its cost per token."""
    if len(set(lengths)) < 2:
        raise ValueError(f"lengths: a fit needs two distinct lengths, got {lengths}")
    slope, intercept = np.polyfit(np.asarray(lengths, dtype=np.float64), np.asarray(seconds, dtype=np.float64), 1)
    return {"per_call_s": float(intercept), "per_token_s": float(slope)}


def cost_split(result: dict) -> dict:
    """Each model's measured calls split into a fixed cost per call and a cost per token: the target's passes
    by tokens scored (the step and every k + 1), each drafter's proposals by tokens drafted."""
    rows = result["rows"]
    lengths, seconds = [1], [statistics.median(row["per_call_s"]["target step (1 token)"] for row in rows)]
    for k in sorted({row["k"] for row in rows}):
        row = next(r for r in rows if r["k"] == k)
        lengths.append(k + 1)
        seconds.append(row["per_call_s"][f"target pass ({k + 1} tokens)"])
    split = {"target": linear_cost(lengths, seconds)} if len(set(lengths)) > 1 else {}
    for name in dict.fromkeys(row["drafter"] for row in rows):
        mine = [row for row in rows if row["drafter"] == name]
        if len({row["k"] for row in mine}) > 1:
            split[name] = linear_cost(
                [row["k"] for row in mine], [row["per_call_s"][f"proposal ({row['k']} tokens)"] for row in mine]
            )
    return split


# --- the trained models (`make train`): C12 on the shipped target and drafters ----------------------------

TRAINED_KS = (1, 2, 4, 8)
"""Draft lengths of a run with no grid."""
TRAINED_PROMPTS = 8
"""Held-out prompts of a run with no grid; each is generated from `TRAINED_REPEATS` times."""
TRAINED_REPEATS = 2
TRAINED_TOKENS = 64
"""Tokens per generation: enough rounds that a generation's prefill is a small part of its time."""
GRIDS: dict[str, dict[str, Any]] = {
    "quick": {"trained_ks": [1, 4], "prompts": 4, "repeats": 2, "tokens": 32, "generations": 12, "first_rounds": 60},
    "full": {
        "trained_ks": list(DRAFT_LENGTHS),
        "prompts": 32,
        "repeats": TRAINED_REPEATS,
        "tokens": TRAINED_TOKENS,
        "generations": 100,
        "first_rounds": 400,
    },
}
"""`--grid`'s defaults (an option given on the command line wins). quick (`make bench`): k = 1 and 4 on 4
held-out prompts of 32 tokens; the tree loop's rows over 12 generations and 60 first rounds (the loop is the quick
bench's largest CPU cost). full (`GRID=full`, or ``--full``): k = 1..8 on 32 prompts of 64 tokens (about 15
minutes); 100 generations and 400 first rounds."""
EXACT_FLOOR = 1e-4
"""`expected_accepted_length`'s floor: at k = 8 it brackets E[accepted] within ~0.2 tokens in seconds."""
TRAINED_SIZES = (64, 256, 512, 1024)
"""Hidden sizes of a target shaped like the trained one (random weights) whose step cost is measured
(``--full`` adds 2048: its 9-token pass alone takes over a second here)."""


def trained_drafters(names=drafting_acceptance.DRAFTERS) -> list[BenchDrafter]:
    """The shipped drafters as the loop runs them, each noted with its size and held-out loss."""
    record = load_record()["models"]
    return [
        BenchDrafter(
            name,
            load_drafter(name),
            f"{record[name]['parameters']} parameters, held-out loss {record[name]['held_out_loss']:.4f} nats "
            f"({record[name]['data']})",
        )
        for name in names
    ]


def iid_acceptance(tokens_per_pass: float, k: int) -> float:
    """The per-token acceptance a whose Leviathan tokens per pass, (1 - a^(k+1)) / (1 - a), equals
    `tokens_per_pass` (in [1, k + 1]; bisection, the map being increasing in a)."""
    if k < 1 or not 1 <= tokens_per_pass <= k + 1:
        raise ValueError(f"tokens_per_pass: {tokens_per_pass} is outside [1, {k + 1}] for k = {k}")
    if tokens_per_pass in (1, k + 1):
        return float(tokens_per_pass > 1)
    low, high = 0.0, 1.0
    for _ in range(60):  # the sum 1 + a + ... + a^k, not the quotient, which cancels near a = 1
        middle = (low + high) / 2
        low, high = (middle, high) if sum(middle**i for i in range(k + 1)) < tokens_per_pass else (low, middle)
    return (low + high) / 2


def exact_tokens_per_pass(acceptance: BlockAcceptance, k: int) -> tuple[float, float]:
    """1 + E[accepted] of a k-token block, averaged over the contexts: (lower, upper) from the exact oracle."""
    block = acceptance.first(k)
    return 1 + float(block.lower.mean()), 1 + float(block.upper.mean())


def mean_and_error(samples: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample deviation / sqrt n; nan for one sample)."""
    mean = statistics.fmean(samples)
    return mean, statistics.stdev(samples) / math.sqrt(len(samples)) if len(samples) > 1 else math.nan


PART_CALLS = 5
"""Calls of one part (a target step, a proposal, ...) per interleaved round: each is a few ms."""


def repeated(function: Callable[[], object], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            function()

    return run


def cycling(prompts: list[list[int]], run: Callable[[list[int]], object]) -> Callable[[], None]:
    """A contender that runs the next prompt each call, round robin, so that contenders see the same prompts."""
    calls = itertools.count()
    return lambda: (run(prompts[next(calls) % len(prompts)]), None)[1]


def trained_row(name: str, k: int, tokens: int, exact: tuple[float, float], generations: list, times, parts) -> dict:
    """One drafter's C12 row at draft length k from its generations, their times and the per-call costs."""
    first, first_error = mean_and_error([g.accepted[0] + 1.0 for g in generations])
    # rounds that drafted all k (the last round of a generation may draft fewer): each generation's mean
    full = [[a + 1.0 for a, n in zip(g.accepted, g.drafted) if n == k] for g in generations]
    per_pass, per_pass_error = mean_and_error([statistics.fmean(rounds) for rounds in full if rounds])
    a = iid_acceptance(per_pass, k)
    step, verify_pass, verify = (
        parts["target step (1 token)"],
        parts[f"target pass ({k + 1} tokens)"],
        parts["verify_chain"],
    )
    propose = parts[f"proposal ({k} tokens): {name}"]
    c = propose / (k * step)
    alone, drafted = statistics.median(times["target alone"]), statistics.median(times[name])
    round_s = drafted / statistics.fmean(g.target_passes for g in generations)
    return {
        "drafter": name,
        "k": k,
        "generations": len(generations),
        "tokens_per_pass_exact": {"lower": exact[0], "upper": exact[1]},
        "tokens_per_pass_first_round": {"mean": first, "standard_error": first_error},
        "tokens_per_pass_measured": {"mean": per_pass, "standard_error": per_pass_error},
        "alpha": a,
        "c": c,
        "speedup_predicted": leviathan_speedup(a, k, c),
        "speedup_predicted_from_parts": per_pass * (alone / tokens) / (propose + verify_pass + verify),
        "speedup_measured": alone / drafted,
        "c_for_speedup_1": (leviathan_speedup(a, k, 0.0) - 1) / k,
        "ms_per_token": {"drafted": drafted / tokens * 1e3, "target alone": alone / tokens * 1e3},
        "round_ms": {
            "proposal": propose * 1e3,
            "target pass": verify_pass * 1e3,
            "verify_chain": verify * 1e3,
            "rest of the loop": (round_s - propose - verify_pass - verify) * 1e3,
            "round": round_s * 1e3,
        },
        "seconds": {"target alone": summarise(times["target alone"]), "drafted": summarise(times[name])},
        "per_call_s": {
            "target step (1 token)": step,
            f"target pass ({k + 1} tokens)": verify_pass,
            f"proposal ({k} tokens)": propose,
            "verify_chain": verify,
        },
    }


def measure_trained(
    impl,
    target,
    drafters: list[BenchDrafter],
    contexts: np.ndarray,
    *,
    tokens: int = TRAINED_TOKENS,
    repeats: int = TRAINED_REPEATS,
    ks=TRAINED_KS,
    floor: float = EXACT_FLOOR,
) -> dict:
    """Every trained drafter at every k beside mlx-lm's `generate_step` on the target alone, all on the
    held-out `contexts` as prompts, interleaved per k: exact tokens per pass on those contexts
    (`oracles.exact_acceptance`, once at the longest k), measured ones, per-call costs and speedups."""
    if tokens < max(ks):
        raise ValueError(f"tokens: {tokens} is fewer than the longest draft {max(ks)}: its first round is cut")
    names = [entry.name for entry in drafters]
    table = drafting_acceptance.drafter_table(contexts, max(ks), floor, names)
    acceptance = {row.name: row.acceptance for row in table}
    prompts = [[int(t) for t in context] for context in contexts]
    sampler = make_sampler(temp=1.0)
    features = mx.zeros((1, target.args.hidden_size))
    round_trip = median_seconds(lambda: mx.eval(mx.array(1.0) + 1), 50)
    seeds = itertools.count(1)

    def alone(prompt: list[int]) -> None:
        for _ in generate_step(mx.array(prompt), target, max_tokens=tokens, sampler=sampler):
            pass

    def drafted(drafter, kept: list, k: int) -> Callable[[list[int]], None]:
        def run(prompt: list[int]) -> None:
            key = mx.random.key(next(seeds))
            kept.append(impl.generate_drafted(target, drafter, prompt, tokens, num_draft=k, key=key, kernels=impl))

        return run

    rows = []
    tracker = Progress("bench.drafting trained", len(ks))
    for k in ks:
        tracker.start(f"k = {k}: {', '.join(names)} beside the target alone")
        parts: dict[str, Callable[[], object]] = {
            "target step (1 token)": target_step(target, 1, prompts[0]),
            f"target pass ({k + 1} tokens)": target_step(target, k + 1, prompts[0]),
            "verify_chain": verification(impl, k, target.args.vocab_size),
        }
        for entry in drafters:
            parts[f"proposal ({k} tokens): {entry.name}"] = proposal(
                entry.drafter, k, features if entry.drafter.reads_features else None, prompts[0]
            )
        kept: dict[str, list] = {name: [] for name in names}
        contenders: dict[str, Callable[[], object]] = {"target alone": cycling(prompts, alone)}
        for entry in drafters:
            contenders[entry.name] = cycling(prompts, drafted(entry.drafter, kept[entry.name], k))
        # the calls interleaved with the generations, so that c and the speedups share the machine's load
        contenders.update({f"part: {name}": repeated(call, PART_CALLS) for name, call in parts.items()})
        # every prompt `repeats` times, none cut short by a budget; the warm-up call's generation is dropped
        times = time_side_by_side(contenders, len(prompts) * repeats, budget_s=math.inf, burst=1)
        part_times = {name: statistics.median(times[f"part: {name}"]) / PART_CALLS for name in parts}
        for name in names:
            exact = exact_tokens_per_pass(acceptance[name], k)
            rows.append(trained_row(name, k, tokens, exact, kept[name][1:], times, part_times))
        tracker.done(f"k = {k}")
    return {
        "rows": rows,
        "tokens": tokens,
        "prompts": len(prompts),
        "repeats": repeats,
        "prompt_length": contexts.shape[1],
        "exact_floor": floor,
        "round_trip_s": round_trip,
        "exact_acceptance_per_position": {
            name: [round(float(x), 4) for x in acceptance[name].per_position()] for name in names
        },
    }


def trained_target_of_size(hidden: int):
    """A target shaped like the shipped one (layers, vocabulary, MLP ratio) at hidden size `hidden`, random
    weights: only its step cost is read."""
    config = load_record()["models"]["target"]["config"]
    ratio = config["intermediate_size"] // config["hidden_size"]
    layers, vocab = config["num_hidden_layers"], config["vocab_size"]
    heads = max(config["num_attention_heads"], hidden // 64)
    return make_llama(llama_args(vocab, hidden, layers, ratio * hidden, heads))


def format_trained(result: dict) -> str:
    lines = [
        f"{'drafter':14} {'k':>2} {'tok/pass exact':>14} {'1st round':>11} {'all rounds':>11} {'a':>5} {'c':>5} "
        f"{'speedup pred':>12} {'measured':>8} {'meas/pred':>9} {'ms/tok':>6} {'alone':>6}"
    ]
    for row in result["rows"]:
        exact, first, every = (
            row["tokens_per_pass_exact"],
            row["tokens_per_pass_first_round"],
            row["tokens_per_pass_measured"],
        )
        lines.append(
            f"{row['drafter']:14} {row['k']:>2} {exact['lower']:6.3f}..{exact['upper']:<6.3f} "
            f"{first['mean']:5.2f}+-{first['standard_error']:<4.2f} "
            f"{every['mean']:5.2f}+-{every['standard_error']:<4.2f} "
            f"{row['alpha']:5.3f} {row['c']:5.2f} {row['speedup_predicted']:12.2f} {row['speedup_measured']:8.2f} "
            f"{row['speedup_measured'] / row['speedup_predicted']:9.2f} {row['ms_per_token']['drafted']:6.2f} "
            f"{row['ms_per_token']['target alone']:6.2f}"
        )
    return "\n".join(lines)


def format_round_times(result: dict) -> str:
    """Where a drafted round's time goes, beside the target's own step and mlx-lm's time per token."""
    lines = [
        f"{'drafter':14} {'k':>2} {'proposal':>8} {'target pass':>11} {'verify_chain':>12} {'rest':>6} "
        f"{'round':>6} {'step (1 tok)':>12} {'alone/tok':>9} {'pred from parts':>15}   (ms)"
    ]
    for row in result["rows"]:
        spent = row["round_ms"]
        lines.append(
            f"{row['drafter']:14} {row['k']:>2} {spent['proposal']:8.2f} {spent['target pass']:11.2f} "
            f"{spent['verify_chain']:12.2f} {spent['rest of the loop']:6.2f} {spent['round']:6.2f} "
            f"{row['per_call_s']['target step (1 token)'] * 1e3:12.2f} {row['ms_per_token']['target alone']:9.2f} "
            f"{row['speedup_predicted_from_parts']:15.2f}"
        )
    return "\n".join(lines)


def run_trained(args, impl, environment: dict) -> dict:
    target = load_trained("target")
    contexts = drafting_acceptance.held_out_contexts(
        args.prompts, drafting_acceptance.CONTEXT_LENGTH, drafting_acceptance.SEED
    )
    drafters = trained_drafters()
    print(
        f"C12 on the trained models (make train), MLX default device {environment.get('mlx_default_device')}: "
        f"target {load_record()['models']['target']['parameters']} parameters; {args.prompts} held-out prompts of "
        f"{contexts.shape[1]} characters x {args.repeats}, {args.tokens} tokens each, temperature 1, batch 1"
    )
    for entry in drafters:
        print(f"  {entry.name}: {entry.note}")
    result = measure_trained(
        impl, target, drafters, contexts, tokens=args.tokens, repeats=args.repeats, ks=args.trained_ks, floor=args.floor
    )
    result["size_sweep"] = size_sweep(
        TRAINED_SIZES + ((2048,) if args.grid == "full" else ()),
        repeats=7,
        make_target=trained_target_of_size,
        prompt=contexts[0].tolist(),
        pass_lengths=[k + 1 for k in args.trained_ks],
    )
    hidden = int(target.args.hidden_size)
    result["crossing"] = crossing_rows(result, reference_hidden=hidden if hidden in TRAINED_SIZES else None)
    result["cost_split"] = cost_split(result)
    result["drafters"] = {entry.name: entry.note for entry in drafters}
    result["mlx_default_device"] = environment.get("mlx_default_device")
    print(
        "tok/pass exact: 1 + E[accepted] on the prompts (oracles.exact_acceptance, lower..upper); 1st round: the "
        "loop's first round on them (+- standard error over generations); all rounds: every round that drafted k "
        "(per generation, then +- over generations). a: the i.i.d. acceptance giving all rounds' tok/pass; "
        "c: proposal / (k x target step); pred: Leviathan's "
        "(1-a^(k+1))/((1-a)(kc+1)); measured: mlx-lm generate_step's time / the loop's, interleaved (medians)"
    )
    print(format_trained(result))
    print("where a round's time goes (medians; rest = the loop's round minus its three calls)")
    print(format_round_times(result))
    print(
        f"MLX round trip {result['round_trip_s'] * 1e3:.3f} ms; a target shaped as the trained one (random "
        "weights) by hidden size, step and its longest pass, interleaved (the crossing tables scale them by the "
        "trained target's step over the sweep's at its size): "
        + ", ".join(
            f"{s['hidden_size']}: {s['target_step_s'] * 1e3:.2f} ms, {max(s['target_pass_s'], key=int)} tokens "
            f"{s['target_pass_s'][max(s['target_pass_s'], key=int)] * 1e3:.2f} ms"
            for s in result["size_sweep"]
        )
    )
    print(
        "cost per call and per token (least squares over the k measured): "
        + "; ".join(
            f"{name} {fit['per_call_s'] * 1e3:.2f} ms + {fit['per_token_s'] * 1e3:.3f} ms/token"
            for name, fit in result["cost_split"].items()
        )
    )
    print(format_crossing(result["crossing"]))
    if result["crossing"] and "speedup_from_parts_by_target_hidden_size" in result["crossing"][0]:
        print(format_crossing(result["crossing"], "speedup_from_parts_by_target_hidden_size", "from parts"))
    return result


def format_crossing(rows: list[dict], field: str = "speedup_predicted_by_target_hidden_size", what: str = "") -> str:
    sizes = list(rows[0][field]) if rows else []
    title = f"predicted speedup{' ' + what if what else ''}, target hidden size"
    width = max(len(title), 37)
    lines = [f"{title:{width}} " + " ".join(f"{size:>7}" for size in sizes)]
    for row in rows:
        figures = row[field]
        label = f"{row['drafter']:32} k={row['k']:<2}"
        lines.append(f"{label:{width}} " + " ".join(f"{figures[s]:7.2f}" for s in sizes))
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
    modes = ("with_replacement", "without_replacement", "top_k")
    tracker = Progress("bench tree loop", len(TREE_LOOP_PAIRS) * len(modes) * len(BUDGET_SHAPES))
    for p, (pair, (target_spec, draft_spec)) in enumerate(TREE_LOOP_PAIRS.items()):
        target, draft = make_tiny_model(target_spec), make_tiny_model(draft_spec)
        fixture = model_fixture(target_spec, draft_spec)
        for m, mode in enumerate(modes):
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
                tracker.done(f"{pair}, {mode}, {name}")
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
        f"{args.loop_tokens} tokens and {args.first_rounds} first rounds per row"
    )
    rows = tree_loop_rows(impl, generations=args.generations, tokens=args.loop_tokens, first_rounds=args.first_rounds)
    out = args.out if args.out != Path("reports/bench-drafting.json") else Path("reports/bench-tree-loop.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"rows": rows, "environment": environment, "grid": args.grid}
    out.write_text(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def run_untrained(args, impl, environment: dict) -> dict:
    target = make_tiny_model(TARGET_SPEC)
    print(
        f"C12 text drafting on {environment.get('mlx_default_device')}: target {TARGET_SPEC}, "
        f"{args.untrained_tokens} tokens"
    )
    drafters = default_drafters()
    print("drafters (tiny, untrained): " + "; ".join(d.name for d in drafters))
    result = measure(impl, target, drafters, tokens=args.untrained_tokens, rounds=args.rounds, ks=args.ks)
    result["size_sweep"] = size_sweep()
    result["crossing"] = crossing_rows(result)
    result["drafters"] = {entry.name: entry.note for entry in drafters}
    result["target"] = dataclasses.asdict(TARGET_SPEC)
    print(format_rows(result))
    print(
        f"per call: MLX round trip "
        f"{result['round_trip_s'] * 1e3:.3f} ms; target step by hidden size: "
        + ", ".join(f"{s['hidden_size']}: {s['target_step_s'] * 1e3:.2f} ms" for s in result["size_sweep"])
    )
    print(format_crossing(result["crossing"]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.drafting", description=__doc__.split("\n")[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    parser.add_argument("--out", type=Path, default=Path("reports/bench-drafting.json"))
    parser.add_argument(
        "--drafters",
        choices=("trained", "untrained", "both"),
        default="trained",
        help="the shipped trained models (default), the tiny untrained test drafters, or both",
    )
    add_grid_argument(parser, default=None)
    parser.add_argument("--full", action="store_true", help="the full grid: k = 1..8 on 32 prompts (about 15 minutes)")
    parser.add_argument("--tokens", type=int, help=f"trained: tokens per generation ({TRAINED_TOKENS})")
    parser.add_argument("--prompts", type=int, help=f"trained: held-out prompts ({TRAINED_PROMPTS})")
    parser.add_argument("--repeats", type=int, help=f"trained: generations per prompt ({TRAINED_REPEATS})")
    parser.add_argument("--trained-ks", type=int, nargs="+", help=f"trained: draft lengths ({TRAINED_KS})")
    parser.add_argument("--floor", type=float, default=EXACT_FLOOR, help="trained: the exact oracle's floor")
    parser.add_argument("--untrained-tokens", type=int, default=32, help="untrained: tokens per generation")
    parser.add_argument("--rounds", type=int, default=5, help="untrained: interleaved rounds per k")
    parser.add_argument("--ks", type=int, nargs="+", default=list(DRAFT_LENGTHS), help="untrained: draft lengths")
    parser.add_argument("--tree-loop", action="store_true", help="only the tree-decoding loop's tokens per pass")
    parser.add_argument("--generations", type=int, help="--tree-loop: generations per row (100)")
    parser.add_argument("--first-rounds", type=int, help="--tree-loop: one-round generations per row (400)")
    parser.add_argument("--loop-tokens", type=int, default=16, help="--tree-loop: tokens per generation")
    args = parser.parse_args(argv)
    if args.full:
        args.grid = "full"
    apply_grid(args, GRIDS[args.grid] if args.grid else {**GRIDS["full"], "trained_ks": list(TRAINED_KS), "prompts": 8})
    if args.tree_loop:
        return tree_loop_main(args)
    impl = load_implementation(args.impl)
    environment = describe_environment()
    result: dict[str, Any] = {"environment": environment, "grid": args.grid}
    if args.drafters in ("trained", "both"):
        result["trained"] = run_trained(args, impl, environment)
    if args.drafters in ("untrained", "both"):
        result["untrained"] = run_untrained(args, impl, environment)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
