"""Prefix caching on SmolLM2-135M, measured and never asserted: mlx-lm's own KV cache of a long prompt prefix,
reused across requests that share it, against recomputing the prefix for each request.

Each request is the shared prefix (a long document) then a question of its own; the response is `tokens` tokens
from mlx-lm's `generate_step` (greedy). Three paths, timed side by side (`time_side_by_side`):

- uncached: `generate_step` on prefix + question with a fresh cache (what a server without a prompt cache does);
- cached warm: a copy (`copy.deepcopy`, as mlx-lm's batch generator reuses a prompt cache) of a cache that already
  holds the prefix, then `generate_step` on the question alone;
- cached cold: the prefix computed into a fresh `make_prompt_cache`, copied for later requests, then the question.

Beside the measured speedup stand C4-style predictions from the work each path does per layer: positions
processed and attention pairs scored (query x key). Positions model the weights' matmuls, which dominate at this
size; neither models the fixed cost of a forward pass, which is why a short question's speedup falls short of them.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.bench.measure import STATISTICS, summarise, time_side_by_side
from ncm_verify.bench.ratios import render_columns
from ncm_verify.environment import describe_environment
from ncm_verify.mlx_lm_real import smollm2
from ncm_verify.progress import Progress

DOCUMENT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. However little known the feelings or views of such a man may be on his first entering a "
    "neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered "
    'the rightful property of some one or other of their daughters. "My dear Mr. Bennet," said his lady to him '
    'one day, "have you heard that Netherfield Park is let at last?" Mr. Bennet replied that he had not. "But '
    'it is," returned she; "for Mrs. Long has just been here, and she told me all about it." Mr. Bennet made no '
    'answer. "Do you not want to know who has taken it?" cried his wife impatiently. "You want to tell me, and '
    'I have no objection to hearing it." This was invitation enough. '
)
"""The shared prefix's text (Austen, public domain), repeated to the prefix length in tokens."""
QUESTIONS = (
    "\nQuestion: Who has taken Netherfield Park?\nAnswer:",
    "\nQuestion: What does Mrs. Bennet want to tell her husband?\nAnswer:",
    "\nQuestion: Summarise the passage in one sentence.\nAnswer:",
)
"""Each request's own suffix; requests take them in turn."""
PATHS = ("uncached", "cached warm", "cached cold")
GRIDS = {
    "quick": {"prefix": [256], "tokens": [1, 8], "rounds": 3, "budget": 8.0},
    "full": {"prefix": [256, 1024], "tokens": [1, 8], "rounds": 10, "budget": 30.0},
}
"""quick: the 256-token prefix (an uncached 1024-token prefix takes 11-20 s a call here); full: both lengths."""


def prefix_tokens(model: smollm2.SmolLM2, length: int) -> list[int]:
    """The first `length` tokens of DOCUMENT repeated."""
    if length < 1:
        raise ValueError(f"prefix_length: expected at least 1 token, got {length}")
    once = smollm2.encode(model, DOCUMENT)
    return (once * (length // len(once) + 1))[:length]


def respond(model, prompt: list[int], cache, tokens: int) -> list[int]:
    """`tokens` greedy tokens of mlx-lm's `generate_step` after `prompt` (with `cache` holding what precedes it, or
    None for a fresh one); generate_step evaluates each token before yielding it."""
    stream = generate_step(mx.array(prompt), model, max_tokens=tokens, prompt_cache=cache)
    return [int(token) for token, _ in stream]


def fill_cache(model, prefix: list[int]) -> list:
    """A fresh mlx-lm prompt cache holding `prefix`, evaluated."""
    cache = make_prompt_cache(model)
    model(mx.array(prefix)[None], cache=cache)
    mx.eval([entry.state for entry in cache])
    return cache


def predicted_speedups(prefix: int, question: int, tokens: int) -> dict[str, float]:
    """C4-style per-layer work of the uncached path over the warm one: positions processed (prompt, then one per
    further token) and attention pairs (each position against itself and every earlier one)."""
    total = prefix + question + tokens - 1  # the last token is sampled, never fed back

    def pairs(first: int) -> int:  # positions first+1 .. total, each attending to its own position and all before
        return (total * (total + 1) - first * (first + 1)) // 2

    return {"positions": total / (total - prefix), "pairs": pairs(0) / pairs(prefix)}


def run_case(model: smollm2.SmolLM2, prefix_length: int, tokens: int, rounds: int, budget_s: float) -> dict:
    """The three paths for one prefix length and response length, side by side, beside the predictions."""
    prefix = prefix_tokens(model, prefix_length)
    questions = [smollm2.encode(model, text) for text in QUESTIONS]
    warm = fill_cache(model.model, prefix)
    turn = {"next": 0}

    def question() -> list[int]:
        turn["next"] += 1
        return questions[turn["next"] % len(questions)]

    def cold() -> list[int]:
        stored = fill_cache(model.model, prefix)
        return respond(model.model, question(), copy.deepcopy(stored), tokens)

    contenders: dict[str, Callable[[], object]] = {
        "uncached": lambda: respond(model.model, prefix + question(), None, tokens),
        "cached warm": lambda: respond(model.model, question(), copy.deepcopy(warm), tokens),
        "cached cold": cold,
    }
    same = [
        respond(model.model, prefix + q, None, tokens) == respond(model.model, q, copy.deepcopy(warm), tokens)
        for q in questions
    ]
    times = time_side_by_side(contenders, rounds, budget_s, burst=1)
    mean_question = sum(map(len, questions)) / len(questions)
    predicted = predicted_speedups(prefix_length, round(mean_question), tokens)
    rows = {name: summarise(samples) for name, samples in times.items()}
    for name in ("cached warm", "cached cold"):
        for statistic, reduce in STATISTICS.items():
            rows[name][f"speedup_{statistic}"] = reduce(times["uncached"]) / reduce(times[name])
    return {
        "case": f"prefix {prefix_length} + question ~{mean_question:.0f}, {tokens} token(s)",
        "prefix_tokens": prefix_length,
        "question_tokens": [len(q) for q in questions],
        "response_tokens": tokens,
        "same_tokens_cached_and_uncached": same,
        "predicted_speedup": predicted,
        "contenders": rows,
    }


def format_rows(cases: list[dict]) -> str:
    """Medians of each path, the warm path's speedup from medians (and minima), beside the predictions."""
    header = (
        "case",
        "uncached",
        "cached warm",
        "cached cold",
        "warm speedup (min)",
        "of positions'",
        "of pairs'",
        "same",
    )
    lines = []
    for case in cases:
        rows, predicted = case["contenders"], case["predicted_speedup"]
        speedup = rows["cached warm"]["speedup_median"]
        lines.append(
            (
                case["case"],
                *(f"{rows[name]['median_s'] * 1e3:.0f} ms" for name in PATHS),
                f"{speedup:.2f}x ({rows['cached warm']['speedup_min']:.2f}x)",
                f"{speedup / predicted['positions']:.0%} of {predicted['positions']:.1f}x",
                f"{speedup / predicted['pairs']:.0%} of {predicted['pairs']:.1f}x",
                f"{sum(case['same_tokens_cached_and_uncached'])}/{len(case['same_tokens_cached_and_uncached'])}",
            )
        )
    return render_columns(header, lines)


def run(form: str, prefix_lengths: list[int], token_counts: list[int], rounds: int, budget_s: float) -> dict:
    model = smollm2.load_smollm2(form=form)
    cases = []
    tracker = Progress("bench.prefix_cache", len(prefix_lengths) * len(token_counts))
    for prefix_length in prefix_lengths:
        for tokens in token_counts:
            tracker.start(f"prefix {prefix_length}, {tokens} token(s)")
            cases.append(run_case(model, prefix_length, tokens, rounds, budget_s))
            print(format_rows(cases[-1:]), flush=True)
            tracker.done(f"prefix {prefix_length}, {tokens} token(s)")
    environment = describe_environment()
    return {
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "form": form,
        "device": environment["mlx_default_device"],
        "environment": environment,
        "cases": cases,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench.prefix_cache", description=__doc__.split("\n")[0])
    parser.add_argument("--form", default="float32", choices=smollm2.FORMS)
    add_grid_argument(parser)
    parser.add_argument("--prefix", type=int, nargs="+", help="shared prefix lengths, tokens (the grid's)")
    parser.add_argument("--tokens", type=int, nargs="+", help="response lengths, tokens (the grid's)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per case at most (the grid's)")
    parser.add_argument("--budget", type=float, help="seconds per case before stopping early (the grid's)")
    parser.add_argument("--out", type=Path, default=Path("reports/bench-prefix-cache.json"))
    arguments = parser.parse_args(argv)
    apply_grid(arguments, GRIDS[arguments.grid])
    bench = run(arguments.form, arguments.prefix, arguments.tokens, arguments.rounds, arguments.budget)
    bench["grid"] = arguments.grid
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(bench, indent=1) + "\n", encoding="utf-8")
    print(f"\nSmolLM2-135M {bench['form']} on {bench['device']}: written to {arguments.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
