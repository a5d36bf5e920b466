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

from ncm_verify.bench.grids import add_grid_argument, apply_grid
from ncm_verify.bench.measure import (
    GRID_SETTINGS,
    MLX_REDUCTIONS,
    SMOLLM2_ROWS_LABEL,
    evaluated,
    make_floors,
    summarise,
    time_side_by_side,
)
from ncm_verify.bench.ratios import MLX_FLOOR, NUMPY_WALK, RATIO_KEYS, UNVALIDATED, format_goals, goal_rows, ratio
from ncm_verify.environment import describe_environment
from ncm_verify.harness.strategies import SMOLLM2_VOCAB, make_autoregressive_fixture, make_smollm2_tables
from ncm_verify.harness.tree_driver import run_tree
from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model, next_token_logprobs
from ncm_verify.oracles import exact_tree
from ncm_verify.oracles.exact import AutoregressiveFixture, context_offsets
from ncm_verify.oracles.exact_tree import MODES, reference_rule, tree_laws, tree_nodes
from ncm_verify.oracles.numpy_steps import numpy_uniforms
from ncm_verify.progress import Progress
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
    without replacement (one law) gave the same deviation twice, read as a discrepancy."""
    return int(np.random.SeedSequence([seed, *indices]).generate_state(1)[0])


def tokens_per_pass_rows(impl, *, batch: int = 4000, seed: int = 0, progress: Callable = print) -> list[dict]:
    """Exact and measured tokens per pass for every fixture, shape and mode, each row's trees drawn apart."""
    rows = []
    measured = fixtures()
    tracker = Progress("bench.trees tokens per pass", len(measured) * len(MODES), say=progress)
    for f, (fixture_name, fixture) in enumerate(measured.items()):
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
            tracker.done(f"{fixture_name}, {mode}")
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
    """A latency case at (V, B): random rows, or SmolLM2's related as `smollm2` says (measure.BenchCase)."""

    vocab: int
    batch: int
    smollm2: str | None = None

    @property
    def name(self) -> str:
        return f"{BUDGET} nodes V={self.vocab} B={self.batch} float32"


LATENCY_CASES = (
    LatencyCase(32_000, 1),
    LatencyCase(32_000, 8),
    LatencyCase(128_256, 1),
    LatencyCase(49_152, 1, "quantized"),
    LatencyCase(49_152, 8, "quantized"),
)


@dataclasses.dataclass(frozen=True)
class TreeLatencyCase:
    """One latency row: a tree (parents in topological order) verified at (V, B), beside a chain of its depth; on
    random rows, or SmolLM2's related as `smollm2` says (a relation of measure.BenchCase)."""

    label: str
    parents: tuple[int, ...]
    vocab: int
    batch: int
    mode: str = "top_k"
    smollm2: str | None = None

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(tree_depths(self.parents), default=0)

    @property
    def name(self) -> str:
        rows = f" {SMOLLM2_ROWS_LABEL} {self.smollm2}" if self.smollm2 else ""
        return f"{self.label} ({self.nodes} nodes, depth {self.depth}) V={self.vocab} B={self.batch} {self.mode}{rows}"


def tree_depths(parents) -> list[int]:
    """Each node's depth (a root child has depth 1), parents given in topological order."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def eagle_tree(top_k: int, depth: int) -> tuple[int, ...]:
    """An EAGLE-style tree as SGLang serves it at ``topk`` k: each level holds the k best children of the
    level's first (most likely) node, `depth` levels deep: k * depth nodes."""
    parents: list[int] = []
    expanded = -1
    for _ in range(depth):
        first = len(parents)
        parents.extend([expanded] * top_k)
        expanded = first
    return tuple(parents)


EAGLE_SHAPES = {16: (4, 4), 32: (4, 8), 64: (8, 8)}
"""Node budget -> (top-k, depth) of the EAGLE tree measured (SGLang's defaults: top-k 4-8, depth 5-8)."""
WIDEST = (10, 6)
"""Top-k 10, 6 levels: the widest sibling lists measured (60 nodes)."""


def latency_grid(name: str) -> list[TreeLatencyCase]:
    """`quick`: the chain-shaped and fan-shaped 4-node trees, the 16-node EAGLE tree at B = 1 and 8 and the 64-node
    one at V = 128 256; `full`: 16, 32, 64 (and 60 at top-k 10) nodes at V = 32 000 and 128 256, B = 1 and 8, and
    the chain-shaped tree; each also the 16-node tree on SmolLM2's rows (quick: B = 1, 8, 32; full: 1, 8)."""
    chain = tuple(tree_nodes(BUDGET_SHAPES["chain 1-1-1-1"]))
    if name == "quick":  # the goals' rows: random and SmolLM2's, B = 1, 8 (and 32 on SmolLM2's)
        cases = [TreeLatencyCase("chain", chain, 32_000, 1, "with_replacement")]
        cases.append(TreeLatencyCase("fan of 4", tuple(tree_nodes(BUDGET_SHAPES["fan of 4"])), 32_000, 1))
        k, d = EAGLE_SHAPES[16]
        cases += [TreeLatencyCase(f"eagle top-{k}", eagle_tree(k, d), 32_000, batch) for batch in (1, 8)]
        cases += [TreeLatencyCase(f"eagle top-{k}", eagle_tree(k, d), 128_256, 1) for k, d in (EAGLE_SHAPES[64],)]
        return cases + smollm2_trees((1, 8, 32))
    if name == "full":
        shapes = [*EAGLE_SHAPES.values(), WIDEST]
        cases = [
            TreeLatencyCase(f"eagle top-{k}", eagle_tree(k, d), vocab, batch)
            for k, d in shapes
            for vocab in (32_000, 128_256)
            for batch in (1, 8)
        ] + [TreeLatencyCase("chain", chain, vocab, batch, "with_replacement") for vocab, batch in QUICK_CHAINS]
        return cases + smollm2_trees((1, 8))
    raise ValueError(f"grid: expected 'quick' or 'full', got {name!r}")


def smollm2_trees(batches: tuple[int, ...]) -> list[TreeLatencyCase]:
    """The 16-node EAGLE tree on SmolLM2's rows (the quantised form's as draft), per batch."""
    k, depth = EAGLE_SHAPES[16]
    return [
        TreeLatencyCase(f"eagle top-{k}", eagle_tree(k, depth), SMOLLM2_VOCAB, batch, smollm2="quantized")
        for batch in batches
    ]


QUICK_CHAINS = ((32_000, 1), (32_000, 8), (128_256, 1))
TREE_UNVALIDATED = "verify_tree unvalidated"
"""verify_tree called with ``validate=False``, timed beside the default call."""
"""The chain-shaped 4-node tree at the (V, B) of its first measurement (5.46 vs 0.83 ms at V = 32 000, B = 1)."""


def tree_inputs(case: TreeLatencyCase, seed: int = 3) -> dict:
    """Softmax rows for every node, each node's token one of its parent's draft row's top ids (distinct among
    siblings, as top-k children are), and the chain of the tree's depth on the first rows."""
    shape = (case.batch, case.nodes + 1, case.vocab)
    if case.smollm2 is not None:  # real rows: children are the draft row's own top ids
        rng = np.random.default_rng(seed)
        rows = make_smollm2_tables(rng, shape[0] * shape[1], case.smollm2, temperature=1.0, top_p=1.0)
        target, draft = (mx.array(a.reshape(shape).astype(np.float32)) for a in rows)
        ranked = np.argsort(-rows[1].reshape(shape), axis=-1)[..., :64]
    else:
        keys = mx.random.split(mx.random.key(seed), 2)
        target = mx.softmax(mx.random.normal(shape, key=keys[0]), axis=-1)
        draft = mx.softmax(mx.random.normal(shape, key=keys[1]), axis=-1)
        ranked = np.argsort(-np.array(draft[:, :, :64]), axis=-1)  # the 64 most likely ids among the first 64
    mx.eval(target, draft)
    parents = np.array(case.parents, np.int64)
    tokens = np.zeros((case.batch, case.nodes), np.int32)
    rank = [sum(1 for m in range(n) if parents[m] == parents[n]) for n in range(case.nodes)]
    for n, parent in enumerate(parents):
        tokens[:, n] = ranked[:, parent + 1, rank[n]]
    depth = max(case.depth, 1)
    return {
        "target": target,
        "draft": draft,
        "tokens": mx.array(tokens),
        "parents": mx.array(np.broadcast_to(parents, (case.batch, case.nodes)).astype(np.int32)),
        "chain": (target[:, : depth + 1], draft[:, :depth], mx.array(tokens[:, :depth])),
    }


def latency_row(impl, case: TreeLatencyCase, rounds: int, budget_s: float) -> dict:
    """Medians, interleaved: verify_tree on the tree (the default call, and with ``validate=False``), verify_chain
    on a chain of its depth, the NumPy walk (the float64 step of :mod:`ncm_verify.oracles.exact_tree` on the same
    rows) and the MLX floor (the fastest MLX reduction reading the tree's rows once: the least any verification
    that validates them can cost); verify_tree's ratios to the last three (`ratios.GOALS`), from medians and
    minima."""
    inputs = tree_inputs(case)
    key = mx.random.key(1)
    target, draft, tokens, parents = inputs["target"], inputs["draft"], inputs["tokens"], inputs["parents"]
    np_target, np_draft, np_tokens, np_parents = (np.array(a) for a in (target, draft, tokens, parents))
    rng = np.random.default_rng(1)
    nbytes = 2 * target.nbytes
    floors = make_floors(nbytes, "float32")
    contenders: dict[str, Callable[[], object]] = {
        "verify_tree": evaluated(lambda: impl.verify_tree(target, draft, tokens, parents, key=key, mode=case.mode)),
        TREE_UNVALIDATED: evaluated(
            lambda: impl.verify_tree(target, draft, tokens, parents, key=key, mode=case.mode, validate=False)
        ),
        "verify_chain": evaluated(lambda: impl.verify_chain(*inputs["chain"], key=key)),
        "numpy walk": lambda: exact_tree.step(
            np_target,
            np_draft,
            np_tokens,
            np_parents,
            None,
            numpy_uniforms(rng, (case.batch, 2, case.nodes + 1)),
            mode=case.mode,
        ),
        **{name: floors[name] for name in MLX_REDUCTIONS},
    }
    times = time_side_by_side(contenders, rounds, budget_s)
    summary = {name: summarise(samples) for name, samples in times.items() if name not in MLX_REDUCTIONS}
    summary["mlx floor"] = min((summarise(times[name]) for name in MLX_REDUCTIONS), key=lambda f: f["median_s"])
    chain = summary["verify_chain"]["median_s"]
    for row in summary.values():
        row["x verify_chain"] = row["median_s"] / chain
    for statistic, field in RATIO_KEYS.items():
        figure = "median_s" if statistic == "median" else "min_s"
        tree = summary["verify_tree"][figure]
        summary["verify_tree"][field] = {
            UNVALIDATED: ratio(tree / summary[TREE_UNVALIDATED][figure], "lower", "default call / validate=False"),
            MLX_FLOOR: ratio(tree / summary["mlx floor"][figure], "lower", "verify_tree / MLX floor"),
            NUMPY_WALK: ratio(tree / summary["numpy walk"][figure], "lower", "verify_tree / NumPy walk"),
        }
    return {
        "case": case.name,
        **dataclasses.asdict(case),
        "nodes": case.nodes,
        "depth": case.depth,
        "device": str(mx.default_device()),
        "floor_bytes": nbytes,
        "contenders": summary,
    }


def latency_rows(
    impl, rounds: int = 25, budget_s: float = 8.0, progress: Callable = print, grid: str = "quick"
) -> list[dict]:
    rows = []
    cases = latency_grid(grid)
    tracker = Progress(f"bench.trees latency ({grid} grid)", len(cases), say=progress)
    for case in cases:
        tracker.start(case.name)
        rows.append(latency_row(impl, case, rounds, budget_s))
        progress(format_latency(rows[-1:]))
        tracker.done(case.name)
    progress(format_goals(goal_rows({"bench-trees.json": {"latency": rows}})))
    return rows


def format_latency(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        lines.append(f"{row['case']} on {row['device']}")
        for name, figures in row["contenders"].items():
            lines.append(
                f"    {name:14} median {figures['median_s'] * 1e6:10.1f} us "
                f"({figures['x verify_chain']:6.2f}x verify_chain)"
            )
    return "\n".join(lines)


GRID_DRAWS = {"quick": 1000, "full": 4000}
"""Trees (or blocks) drawn per fixture and shape for tokens per pass: a standard error of about 0.03 tokens
quick, 0.015 full."""


def kernel_bench_main(
    argv: list[str] | None,
    *,
    kernel: str,
    unit: str,
    tokens_per_pass_rows: Callable[..., list[dict]],
    latency_rows: Callable[..., list[dict]],
    doc: str,
    grids: tuple[str, ...] = (),
) -> int:
    """The command line of a kernel family's bench (`python -m ncm_verify.bench.<unit>s`): tokens per pass for
    `--<unit>s` draws, then latency beside verify_chain unless `--no-latency`, written as JSON to `--out`."""
    parser = argparse.ArgumentParser(prog=f"python -m ncm_verify.bench.{unit}s", description=doc.split("\n")[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    add_grid_argument(parser)
    parser.add_argument(f"--{unit}s", type=int, help=f"{unit}s drawn per fixture and shape (default: the grid's)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per latency case (default: the grid's)")
    parser.add_argument("--budget", type=float, help="seconds per latency case before stopping (default: the grid's)")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--no-tokens-per-pass", action="store_true", help="latency only (make bench-baseline)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    arguments = parser.parse_args(argv)
    apply_grid(arguments, {**GRID_SETTINGS[arguments.grid], f"{unit}s": GRID_DRAWS[arguments.grid]})
    impl = load_implementation(arguments.impl)
    if not hasattr(impl, kernel):
        print(f"{unit}s skipped: {arguments.impl} provides no {kernel}")
        return 0
    figures: dict = {
        "impl": arguments.impl,
        "grid": arguments.grid,
        **{name: getattr(arguments, name) for name in (f"{unit}s", "rounds", "budget")},
        "environment": describe_environment(),
    }
    if not arguments.no_tokens_per_pass:
        figures["tokens_per_pass"] = tokens_per_pass_rows(impl, batch=getattr(arguments, f"{unit}s"))
    if not arguments.no_latency:
        options = {"grid": arguments.grid} if grids else {}
        figures["latency"] = latency_rows(impl, arguments.rounds, arguments.budget, **options)
        figures["goals"] = goal_rows({f"bench-{unit}s.json": figures})  # each ratio beside its goal, met or not
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
        grids=("quick", "full"),
    )


if __name__ == "__main__":
    sys.exit(main())
