"""Block verification measured (reported, never asserted): tokens per target pass, block vs chain, exact and
sampled; ``verify_block`` latency beside ``verify_chain``.

Tokens per pass: on each fixture of :func:`ncm_verify.bench.trees.fixtures` (seeded tables and two tiny mlx-lm
model pairs), one round of G = 2, 3, 4 drafts at the empty context. *Exact* is 1 + E[tau] from the
enumerated accepted-count laws (:mod:`ncm_verify.oracles.exact_block`: the paper's rule and the chain rule);
*measured* is the mean of ``num_accepted + 1`` over `batch` blocks drawn from the draft and verified by the
implementation's ``verify_block`` and ``verify_chain``, with its standard error.
``python -m ncm_verify.bench.blocks`` prints both tables; ``make bench`` writes ``reports/bench-blocks.json``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import mlx.core as mx
import numpy as np

from ncm_verify.bench.measure import (
    SMOLLM2_ROWS_LABEL,
    BenchCase,
    evaluated,
    make_smollm2_inputs,
    summarise,
    time_side_by_side,
)
from ncm_verify.bench.trees import LATENCY_CASES, LatencyCase, fixtures, kernel_bench_main, truncated
from ncm_verify.harness.drivers import first_round_inputs
from ncm_verify.oracles import exact_block
from ncm_verify.progress import Progress

__all__ = ["DRAFT_LENGTHS", "tokens_per_pass_rows", "latency_rows", "format_rows", "format_latency", "main"]

DRAFT_LENGTHS = (2, 3, 4)
LATENCY_DRAFTS = 4
VERIFIERS = {"chain": "verify_chain", "block": "verify_block"}


def measured_tokens_per_pass(impl, verify: str, fixture, drafts: int, batch: int, seed: int) -> tuple[float, float]:
    """Mean and standard error of ``num_accepted + 1`` over `batch` blocks of `drafts` verified by `verify`."""
    rng = np.random.default_rng(seed)
    target, draft, tokens, lengths = first_round_inputs(fixture, caps=np.full(batch, drafts), max_draft=drafts, rng=rng)
    outcome = getattr(impl, verify)(target, draft, tokens, key=mx.random.key(seed), num_draft=lengths)
    emitted = np.array(outcome.num_accepted).astype(np.float64) + 1.0
    return float(emitted.mean()), float(emitted.std(ddof=1) / math.sqrt(batch))


def tokens_per_pass_rows(impl, *, batch: int = 4000, seed: int = 0, progress: Callable = print) -> list[dict]:
    """Exact and measured tokens per pass of both rules for every fixture and draft length."""
    rows = []
    measured = fixtures()
    tracker = Progress("bench.blocks tokens per pass", len(measured) * len(DRAFT_LENGTHS), say=progress)
    for fixture_name, whole in measured.items():
        for drafts in DRAFT_LENGTHS:
            fixture = truncated(whole, drafts + 1)
            exact = {
                "chain": exact_block.chain_accepted_length_law(fixture, (), drafts),
                "block": exact_block.accepted_length_law(exact_block.PAPER_RULE, fixture, (), drafts),
            }
            row: dict = {"fixture": fixture_name, "drafts": drafts, "blocks": batch}
            for rule, verify in VERIFIERS.items():
                mean, error = measured_tokens_per_pass(impl, verify, fixture, drafts, batch, seed)
                row[rule] = {
                    "exact": 1.0 + exact_block.expected_accepted(exact[rule]),
                    "measured": mean,
                    "stderr": error,
                }
            row["exact gain"] = row["block"]["exact"] - row["chain"]["exact"]
            row["measured gain"] = row["block"]["measured"] - row["chain"]["measured"]
            rows.append(row)
            progress(format_rows(rows[-1:], header=len(rows) == 1))
            tracker.done(f"{fixture_name}, G = {drafts}")
    return rows


def format_rows(rows: list[dict], header: bool = True) -> str:
    lines = []
    if header:
        lines.append(
            f"{'fixture':28} {'G':>2} {'chain exact':>11} {'measured':>9} {'block exact':>11} {'measured':>9} "
            f"{'+-':>6} {'gain exact':>10} {'measured':>9}"
        )
    for row in rows:
        chain, block = row["chain"], row["block"]
        lines.append(
            f"{row['fixture']:28} {row['drafts']:>2} {chain['exact']:11.4f} {chain['measured']:9.4f} "
            f"{block['exact']:11.4f} {block['measured']:9.4f} {block['stderr']:6.4f} "
            f"{row['exact gain']:+10.4f} {row['measured gain']:+9.4f}"
        )
    return "\n".join(lines)


# --- latency: verify_block beside verify_chain, same inputs ---------------------------------------


def latency_row(impl, case: LatencyCase, rounds: int, budget_s: float) -> dict:
    """Medians of verify_chain and verify_block on one batch of G = `LATENCY_DRAFTS` drafts."""
    if case.smollm2 is not None:  # SmolLM2's rows, drafts drawn from its draft rows
        real = BenchCase("chain", case.vocab, LATENCY_DRAFTS, case.batch, smollm2=case.smollm2)
        target, draft, tokens = make_smollm2_inputs(real, seed=3)
    else:
        keys = mx.random.split(mx.random.key(3), 3)
        target = mx.softmax(mx.random.normal((case.batch, LATENCY_DRAFTS + 1, case.vocab), key=keys[0]), axis=-1)
        draft = mx.softmax(mx.random.normal((case.batch, LATENCY_DRAFTS, case.vocab), key=keys[1]), axis=-1)
        tokens = mx.random.randint(0, case.vocab, (case.batch, LATENCY_DRAFTS), key=keys[2]).astype(mx.int32)
    mx.eval(target, draft, tokens)
    key = mx.random.key(1)
    contenders: dict[str, Callable[[], object]] = {
        verify: evaluated(lambda verify=verify: getattr(impl, verify)(target, draft, tokens, key=key))
        for verify in VERIFIERS.values()
    }
    times = time_side_by_side(contenders, rounds, budget_s)
    summary = {name: summarise(samples) for name, samples in times.items()}
    chain = summary["verify_chain"]["median_s"]
    for figures in summary.values():
        figures["x verify_chain"] = figures["median_s"] / chain
    rows = f" {SMOLLM2_ROWS_LABEL} {case.smollm2}" if case.smollm2 else ""
    name = f"G={LATENCY_DRAFTS} V={case.vocab} B={case.batch} float32{rows}"
    return {"case": name, "vocab": case.vocab, "batch": case.batch, "contenders": summary}


def latency_rows(impl, rounds: int = 25, budget_s: float = 8.0, progress: Callable = print) -> list[dict]:
    rows = []
    tracker = Progress("bench.blocks latency", len(LATENCY_CASES), say=progress)
    for case in LATENCY_CASES:
        rows.append(latency_row(impl, case, rounds, budget_s))
        progress(format_latency(rows[-1:]))
        tracker.done(rows[-1]["case"])
    return rows


def format_latency(rows: list[dict]) -> str:
    return "\n".join(
        f"{row['case']:30} {name:14} median {figures['median_s'] * 1e6:9.1f} us "
        f"({figures['x verify_chain']:.2f}x verify_chain)"
        for row in rows
        for name, figures in row["contenders"].items()
    )


def main(argv: list[str] | None = None) -> int:
    return kernel_bench_main(
        argv,
        kernel="verify_block",
        unit="block",
        tokens_per_pass_rows=tokens_per_pass_rows,
        latency_rows=latency_rows,
        doc=__doc__ or "",
    )


if __name__ == "__main__":
    sys.exit(main())
