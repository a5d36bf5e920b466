"""Tree verification measured (C9/C12 style: reported, never asserted): tokens per target pass, exact and
sampled, for a chain and for trees of the same node budget; ``verify_tree`` latency beside ``verify_chain``.

Tokens per pass: each fixture (seeded AutoregressiveFixture tables, and the tables of two tiny mlx-lm
models, target and draft, read off their next-token rows) and each tree shape of `BUDGET` nodes, in each
child-drawing mode. *Exact* is the enumerator's expected tokens per pass under the mode's exact rule
(:func:`ncm_verify.oracles.exact_tree.tree_laws`); *measured* is the mean of ``num_accepted + 1`` over
trees drawn from the draft and verified by the implementation's ``verify_tree``, with its standard error.
``python -m ncm_verify.bench.trees`` prints both tables; ``make bench`` runs it after the kernel cases and
writes ``reports/bench-trees.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import numpy as np

from ncm_verify.bench.measure import evaluated, summarise, time_side_by_side
from ncm_verify.environment import describe_environment
from ncm_verify.harness.strategies import make_autoregressive_fixture
from ncm_verify.harness.tree_driver import run_tree
from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model, next_token_logprobs
from ncm_verify.oracles.exact import AutoregressiveFixture, context_offsets
from ncm_verify.oracles.exact_tree import MODES, reference_rule, tree_laws, tree_nodes
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, load_implementation

__all__ = ["BUDGET_SHAPES", "fixtures", "tokens_per_pass_rows", "latency_rows", "format_rows", "main"]

BUDGET = 4
BUDGET_SHAPES = {"chain 1-1-1-1": (1, 1, 1, 1), "2x2 (2-1)": (2, 1), "1-3": (1, 3), "fan of 4": (4,)}
"""Trees of `BUDGET` nodes, as children per depth: a chain, two branches of two, one then three, four siblings."""
MODEL_PROMPT = (1,)
TABLE_LENGTH = BUDGET + 1
"""Contexts up to the deepest node (the chain's), then its bonus row."""


def truncated(fixture: AutoregressiveFixture, length: int) -> AutoregressiveFixture:
    """The fixture's rows for contexts shorter than `length` (the enumeration stops there)."""
    rows = int(context_offsets(fixture.vocab, length)[length])
    return AutoregressiveFixture(fixture.target[:rows], fixture.draft[:rows], fixture.vocab, length)


def model_fixture(target: TinySpec, draft: TinySpec, length: int = TABLE_LENGTH) -> AutoregressiveFixture:
    """Tables p(x | prompt + context), q(x | prompt + context) for every context shorter than `length`,
    read from the two tiny models' next-token rows (temperature 1)."""
    models = [make_tiny_model(spec) for spec in (target, draft)]
    vocab = target.vocab_size
    tables: list[list[np.ndarray]] = [[], []]
    for depth in range(length):
        contexts = np.array(list(itertools.product(range(vocab), repeat=depth)), np.int64).reshape(vocab**depth, depth)
        sequences = np.concatenate([np.tile(MODEL_PROMPT, (len(contexts), 1)), contexts], axis=1)
        for table, model in zip(tables, models):
            rows = np.exp(np.array(next_token_logprobs(model, mx.array(sequences, dtype=mx.int32)), np.float64))
            table.append(rows / rows.sum(axis=1, keepdims=True))
    return AutoregressiveFixture(np.concatenate(tables[0]), np.concatenate(tables[1]), vocab, length)


def fixtures() -> dict[str, AutoregressiveFixture]:
    """The fixtures measured: two seeded tables (V = 8), the tiny llama pair the mlx-lm figures use, and the
    target beside a tempered copy of itself."""
    return {
        "tables V=8 independent": make_autoregressive_fixture(8, TABLE_LENGTH, "independent", False, 0),
        "tables V=8 some_rows_equal": make_autoregressive_fixture(8, TABLE_LENGTH, "some_rows_equal", False, 0),
        "tiny llama V=8 (seeds 1/2)": model_fixture(TinySpec(vocab_size=8, seed=1), TinySpec(vocab_size=8, seed=2)),
        # The target's own weights with a flatter head: a draft that is the target at temperature 2.
        "tiny llama V=8 (tempered)": model_fixture(
            TinySpec(vocab_size=8, seed=1), TinySpec(vocab_size=8, seed=1, logit_scale=1.5)
        ),
    }


def exact_tokens_per_pass(fixture: AutoregressiveFixture, shape: tuple[int, ...], mode: str) -> float:
    return tree_laws(reference_rule(mode), truncated(fixture, len(shape) + 1), shape, mode).tokens_per_pass


def measured_tokens_per_pass(impl, fixture, shape, mode: str, batch: int, seed: int) -> tuple[float, float]:
    """Mean and standard error of ``num_accepted + 1`` over `batch` drawn trees verified by `impl`."""
    run = run_tree(
        impl, truncated(fixture, len(shape) + 1), shape=shape, mode=mode, batch=batch, mixed=False, seed=seed
    )
    emitted = run.num_accepted.astype(np.float64) + 1.0
    return float(emitted.mean()), float(emitted.std(ddof=1) / math.sqrt(batch))


def row_seed(seed: int, *indices: int) -> int:
    """One seed per (fixture, mode, shape): rows sharing one seed share their draws, and a chain drawn with and
    without replacement (one law) gave the same deviation twice, read as a discrepancy (issue 28)."""
    return int(np.random.SeedSequence([seed, *indices]).generate_state(1)[0])


def tokens_per_pass_rows(impl, *, batch: int = 4000, seed: int = 0, progress: Callable = print) -> list[dict]:
    """Exact and measured tokens per pass for every fixture, shape and mode, each row's trees drawn apart."""
    rows = []
    for f, (fixture_name, fixture) in enumerate(fixtures().items()):
        for m, mode in enumerate(MODES):
            for s, (shape_name, shape) in enumerate(BUDGET_SHAPES.items()):
                mean, error = measured_tokens_per_pass(impl, fixture, shape, mode, batch, row_seed(seed, f, m, s))
                rows.append(
                    {
                        "fixture": fixture_name,
                        "mode": mode,
                        "tree": shape_name,
                        "nodes": len(tree_nodes(shape)),
                        "exact": exact_tokens_per_pass(fixture, shape, mode),
                        "measured": mean,
                        "stderr": error,
                        "trees": batch,
                    }
                )
            progress(format_rows(rows[-len(BUDGET_SHAPES) :], header=not rows[: -len(BUDGET_SHAPES)]))
    return rows


def format_rows(rows: list[dict], header: bool = True) -> str:
    lines = (
        [f"{'fixture':28} {'mode':20} {'tree':14} {'exact':>7} {'measured':>9} {'+-':>6} {'z':>6}"] if header else []
    )
    for row in rows:
        z = (row["measured"] - row["exact"]) / row["stderr"] if row["stderr"] > 0 else 0.0
        lines.append(
            f"{row['fixture']:28} {row['mode']:20} {row['tree']:14} {row['exact']:7.4f} "
            f"{row['measured']:9.4f} {row['stderr']:6.4f} {z:6.2f}"
        )
    return "\n".join(lines)


# --- latency: verify_tree beside verify_chain at the same node budget -------------------------


@dataclasses.dataclass(frozen=True)
class LatencyCase:
    vocab: int
    batch: int

    @property
    def name(self) -> str:
        return f"{BUDGET} nodes V={self.vocab} B={self.batch} float32"


LATENCY_CASES = (LatencyCase(32_000, 1), LatencyCase(32_000, 8), LatencyCase(128_256, 1))


def latency_row(impl, case: LatencyCase, rounds: int, budget_s: float) -> dict:
    """Medians of verify_chain (G = budget) and verify_tree on the chain and the fan of the same budget."""
    keys = mx.random.split(mx.random.key(3), 2)
    rows = mx.softmax(mx.random.normal((case.batch, BUDGET + 1, case.vocab), key=keys[0]), axis=-1)
    tokens = mx.random.randint(0, case.vocab, (case.batch, BUDGET), key=keys[1]).astype(mx.int32)
    mx.eval(rows, tokens)
    key = mx.random.key(1)
    contenders: dict[str, Callable[[], object]] = {
        "verify_chain": evaluated(lambda: impl.verify_chain(rows, rows[:, :BUDGET], tokens, key=key))
    }
    for shape_name in ("chain 1-1-1-1", "fan of 4"):
        parents = mx.array([tree_nodes(BUDGET_SHAPES[shape_name])] * case.batch, dtype=mx.int32)
        contenders[f"verify_tree {shape_name}"] = evaluated(
            lambda parents=parents: impl.verify_tree(rows, rows, tokens, parents, key=key, mode="with_replacement")
        )
    times = time_side_by_side(contenders, rounds, budget_s)
    summary = {name: summarise(samples) for name, samples in times.items()}
    chain = summary["verify_chain"]["median_s"]
    for row in summary.values():
        row["x verify_chain"] = row["median_s"] / chain
    return {"case": case.name, **dataclasses.asdict(case), "contenders": summary}


def latency_rows(impl, rounds: int = 25, budget_s: float = 8.0, progress: Callable = print) -> list[dict]:
    rows = []
    for case in LATENCY_CASES:
        rows.append(latency_row(impl, case, rounds, budget_s))
        progress(format_latency(rows[-1:]))
    return rows


def format_latency(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        for name, figures in row["contenders"].items():
            lines.append(
                f"{row['case']:32} {name:26} median {figures['median_s'] * 1e6:9.1f} us "
                f"({figures['x verify_chain']:.2f}x verify_chain)"
            )
    return "\n".join(lines)


def kernel_bench_main(
    argv: list[str] | None,
    *,
    kernel: str,
    unit: str,
    tokens_per_pass_rows: Callable[..., list[dict]],
    latency_rows: Callable[..., list[dict]],
    doc: str,
) -> int:
    """The command line of a kernel family's bench (`python -m ncm_verify.bench.<unit>s`): tokens per pass for
    `--<unit>s` draws, then latency beside verify_chain unless `--no-latency`, written as JSON to `--out`."""
    parser = argparse.ArgumentParser(prog=f"python -m ncm_verify.bench.{unit}s", description=doc.split("\n")[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    parser.add_argument(f"--{unit}s", type=int, default=4000, help=f"{unit}s drawn per fixture and shape")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--budget", type=float, default=8.0, help="seconds per latency case before stopping")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    arguments = parser.parse_args(argv)
    impl = load_implementation(arguments.impl)
    if not hasattr(impl, kernel):
        print(f"{unit}s skipped: {arguments.impl} provides no {kernel}")
        return 0
    figures: dict = {"impl": arguments.impl, "environment": describe_environment()}
    figures["tokens_per_pass"] = tokens_per_pass_rows(impl, batch=getattr(arguments, f"{unit}s"))
    if not arguments.no_latency:
        figures["latency"] = latency_rows(impl, arguments.rounds, arguments.budget)
    if arguments.out is not None:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(figures, indent=1, default=str) + "\n", encoding="utf-8")
        print(f"written to {arguments.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return kernel_bench_main(
        argv,
        kernel="verify_tree",
        unit="tree",
        tokens_per_pass_rows=tokens_per_pass_rows,
        latency_rows=latency_rows,
        doc=__doc__ or "",
    )


if __name__ == "__main__":
    sys.exit(main())
