"""C9 measured: kernel latency beside peers and floors, cache speedups beside their prediction.

``python -m ncm_verify.bench run`` (``make bench``) times, per case and side by
side in interleaved rounds, the implementation's steps (eager, compiled,
validated), the peers (a NumPy copy of the step written here; transformers'
``_speculative_sampling`` when the ``peers`` extra is installed) and two floors
(the bytes the step must read, copied by NumPy and reduced by MLX, the fastest of three reductions). Ratios
within one run survive a noisy machine; absolute times do not.
``python -m ncm_verify.bench compare`` (``make bench-compare``) fails when a
ratio is worse than the baseline's by more than the band recorded beside it;
``python -m ncm_verify.bench baseline`` (``make bench-baseline``) records that baseline.
Nothing here asserts a speed: figures are reported, never tested.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import mlx.core as mx
import numpy as np

from ncm_verify.bench.ratios import (
    BENCH_SCHEMA,
    MIN_BAND,
    RATIO_FILES,
    RATIO_KEYS,
    SPREAD_MARGIN,
    UNVALIDATED,
    compare_to_baseline,
    format_bench,
    format_cache_rows,
    format_goals,
    format_kernel_rows,
    goal_rows,
    ratio,
    read_run,
    record_baseline,
)
from ncm_verify.environment import describe_environment
from ncm_verify.harness.kernel_spec import Argument, KernelSpec, SteppedKernel
from ncm_verify.harness.kernels import KERNEL_SPECS
from ncm_verify.harness.strategies import SMOLLM2_RELATIONS, SMOLLM2_VOCAB, make_smollm2_tables
from ncm_verify.oracles.numpy_steps import (
    numpy_chain_step,
    numpy_factorized_step,
    numpy_greedy_step,
    numpy_uniforms,
)
from ncm_verify.peers import transformers_step
from ncm_verify.progress import Progress
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, load_implementation
from ncm_verify.reference.ncm import accounting
from ncm_verify.reference.speculative import CDF_BLOCK

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16}
OURS = ("eager", "compiled", "validated")
STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "min": min}
"""Ratios from medians (the table) and from minima (steadier under load: a preempted call only adds time)."""
BURST = 3
"""Calls in a row per contender and round: the first after another contender pays MLX's cold start."""
PEERS = ("numpy", "transformers")
FLOORS = ("numpy copy", "mlx reduction")
SMOLLM2_ROWS_LABEL = "SmolLM2"
"""In a case's name after its dtype: its rows are SmolLM2's (bench.ratios groups such cases apart)."""


@dataclasses.dataclass(frozen=True)
class BenchCase:
    """One kernel benchmark: a step (a kernel in the registry) at vocabulary V, G drafts, batch B, input dtype.

    `smollm2` names a relation of `SMOLLM2_RELATIONS` for SmolLM2-135M's real rows (V = 49 152): the float32
    form's rows as target, the draft's related to them so; None draws random rows.
    """

    step: str
    vocab: int
    drafts: int
    batch: int
    dtype: str = "float32"
    smollm2: str | None = None

    @property
    def name(self) -> str:
        rows = f" {SMOLLM2_ROWS_LABEL} {self.smollm2}" if self.smollm2 else ""
        return f"{self.step} V={self.vocab} G={self.drafts} B={self.batch} {self.dtype}{rows}"

    @property
    def spec(self) -> KernelSpec:
        return KERNEL_SPECS[self.step]


GRIDS = ("quick", "full", "smollm2")


GOAL_STEPS = ("chain", "greedy", "factorized", "block")
"""The steps of the kernel grids, each beside its goals (`ratios.GOALS`); the tree's are in `bench.trees`."""
GOAL_BATCHES = (1, 8, 32)
GRID_SETTINGS = {"quick": {"rounds": 12, "budget": 2.0}, "full": {"rounds": 25, "budget": 8.0}}
GRID_SETTINGS["smollm2"] = GRID_SETTINGS["full"]
"""Interleaved rounds per case at most, and seconds per case before stopping early (after 3 rounds), per grid:
quick keeps every kind of case and the goals' batches with fewer rounds (a ratio of medians over 3-12 rounds)."""


def smollm2_cases(batches: tuple[int, ...], relations: tuple[str, ...]) -> list[BenchCase]:
    """Each step on SmolLM2's real rows (G = 4, float32 as the shipped rows' target form), per batch and relation."""
    return [
        BenchCase(step, SMOLLM2_VOCAB, 4, batch, smollm2=relation)
        for step in GOAL_STEPS
        for batch in batches
        for relation in (relations if step != "greedy" else relations[:1])  # greedy reads no draft rows
    ]


def make_grid(name: str) -> list[BenchCase]:
    """The `quick` grid (`make bench`: every step at V = 128 256 and on SmolLM2's rows, B = 1, 8, 32, and one
    bfloat16 case), the `full` one (`GRID=full`: every V, G, B and dtype), or `smollm2`: the full grid's cases on
    SmolLM2's real rows and random-row twins at their V (no generation cases)."""
    if name == "quick":
        steps = [BenchCase(step, 128_256, 4, batch) for step in GOAL_STEPS for batch in GOAL_BATCHES]
        bfloat16 = [BenchCase("chain", 128_256, 4, 1, "bfloat16")]
        return steps + bfloat16 + smollm2_cases(GOAL_BATCHES, ("quantized",))
    if name == "full":
        chain = [
            BenchCase("chain", vocab, drafts, batch, dtype)
            for vocab in (32_000, 128_256, 151_936)
            for drafts in (1, 4, 8)
            for batch in (1, 8, 32)
            for dtype in DTYPES
        ]
        others = [
            BenchCase(step, vocab, 4, batch, dtype)
            for step in GOAL_STEPS[1:]
            for vocab in (32_000, 128_256, 151_936)
            for batch in GOAL_BATCHES
            for dtype in DTYPES
        ]
        return chain + others + smollm2_cases((1, 8, 32), ("quantized", "temperature"))
    if name == "smollm2":  # with random rows at the same V beside them: what real rows change
        twins = [BenchCase(step, SMOLLM2_VOCAB, 4, batch) for step in ("chain", "greedy") for batch in (1, 8)]
        return twins + smollm2_cases((1, 8, 32), ("quantized", "temperature"))
    raise ValueError(f"grid: expected one of {', '.join(GRIDS)}, got {name!r}")


# --- inputs ---------------------------------------------------------------------


def make_smollm2_inputs(case: BenchCase, seed: int) -> tuple[mx.array, mx.array, mx.array]:
    """SmolLM2's rows (the harness's tables, float64 then float32) and drafts sampled from them by NumPy."""
    if case.vocab != SMOLLM2_VOCAB or case.smollm2 not in SMOLLM2_RELATIONS:
        raise ValueError(
            f"case: SmolLM2's rows need vocab {SMOLLM2_VOCAB} and a relation of {SMOLLM2_RELATIONS}, "
            f"got vocab {case.vocab} and {case.smollm2!r}"
        )
    rng = np.random.default_rng(seed)
    rows = case.drafts + case.spec.bonus_row
    target, draft = make_smollm2_tables(rng, case.batch * rows, case.smollm2, temperature=1.0, top_p=1.0)
    target = target.reshape(case.batch, rows, case.vocab)
    draft = draft.reshape(case.batch, rows, case.vocab)[:, : case.drafts]
    cumulative = np.cumsum(draft, axis=-1)
    uniforms = rng.random((*draft.shape[:-1], 1)) * cumulative[..., -1:]
    tokens = np.minimum((cumulative < uniforms).sum(axis=-1), case.vocab - 1)
    return mx.array(target.astype(np.float32)), mx.array(draft.astype(np.float32)), mx.array(tokens.astype(np.int32))


def make_kernel_inputs(case: BenchCase, seed: int = 0) -> dict:
    """Probability rows (random, or SmolLM2's) and drafts sampled from q, as MLX arrays in the case's dtype and
    float32 NumPy."""
    if case.smollm2 is not None:
        target, draft, tokens = make_smollm2_inputs(case, seed)
        return kernel_inputs(case, target, draft, tokens)
    keys = mx.random.split(mx.random.key(seed), 3)
    rows = case.drafts + case.spec.bonus_row
    target = mx.softmax(mx.random.normal((case.batch, rows, case.vocab), key=keys[0]), axis=-1)
    draft = mx.softmax(2 * mx.random.normal((case.batch, case.drafts, case.vocab), key=keys[1]), axis=-1)
    tokens = mx.random.categorical(mx.log(draft), key=keys[2]).astype(mx.int32)
    return kernel_inputs(case, target, draft, tokens)


def kernel_inputs(case: BenchCase, target: mx.array, draft: mx.array, tokens: mx.array) -> dict:
    """Float32 rows in the case's dtype (MLX) and float32 (NumPy), with the drafted tokens."""
    dtype = DTYPES[case.dtype]
    if dtype != mx.float32:  # rounded rows are renormalised in float32 first so that validation accepts them
        target, draft = (
            mx.softmax(mx.log(a.astype(dtype)).astype(mx.float32), axis=-1).astype(dtype) for a in (target, draft)
        )
    mx.eval(target, draft, tokens)
    return {
        "target": target,
        "draft": draft,
        "tokens": tokens,
        "np_target": np.array(target.astype(mx.float32)),
        "np_draft": np.array(draft.astype(mx.float32)),
        "np_tokens": np.array(tokens),
    }


def step_bytes(case: BenchCase) -> int:
    """The least the step reads (its spec's `least_read`: whole rows and single entries per sequence)."""
    rows, entries = case.spec.least_read(case.drafts)
    return case.batch * (rows * case.vocab + entries) * DTYPES[case.dtype].size


def input_bytes(case: BenchCase) -> int:
    """Every probability (or score) entry: what validation must read."""
    rows = sum(case.drafts + (case.spec.bonus_row and i == 0) for i, _ in enumerate(row_arguments(case.spec)))
    return case.batch * rows * case.vocab * DTYPES[case.dtype].size


def row_arguments(spec: KernelSpec) -> list[Argument]:
    """The spec's arguments holding rows over tokens: the target's first, then the draft's."""
    return [a for a in spec.positional if a.role in ("probs", "scores")]


def kernel_arguments(spec: KernelSpec, inputs: dict, prefix: str = "") -> list:
    """The bench's target rows, draft rows and drafted tokens in the order the spec's kernel takes them."""
    rows = iter((inputs[prefix + "target"], inputs[prefix + "draft"]))
    return [next(rows) if a.role in ("probs", "scores") else inputs[prefix + "tokens"] for a in spec.positional]


# --- the NumPy peer -----------------------------------------------------------------

NUMPY_STEPS = {"chain": numpy_chain_step, "greedy": numpy_greedy_step, "factorized": numpy_factorized_step}
"""The NumPy peer's step for each kernel it has, called as the spec's apply (or verify, when deterministic)."""


# --- contenders -------------------------------------------------------------------


def evaluated(function: Callable) -> Callable[[], tuple]:
    """A timed call that evaluates every output (MLX is lazy) and returns them."""

    def call():
        outputs = function()
        mx.eval(*outputs)
        return outputs

    return call


def make_ours(impl, case: BenchCase, inputs: dict) -> dict[str, Callable[[], None]]:
    """The implementation's step eager, compiled (unvalidated) and validated, each evaluated."""
    spec = case.spec
    step, arguments = getattr(impl, spec.verify), kernel_arguments(spec, inputs)
    keywords = {"key": mx.random.key(1)} if spec.samples else {}
    compiled = mx.compile(partial(step, validate=False))
    return {
        "eager": evaluated(lambda: step(*arguments, validate=False, **keywords)),
        "compiled": evaluated(lambda: compiled(*arguments, **keywords)),
        "validated": evaluated(lambda: step(*arguments, **keywords)),
    }


def make_numpy_peer(case: BenchCase, inputs: dict) -> Callable[[], None] | None:
    """The NumPy step on float32 copies (NumPy has no bfloat16), drawing its own uniforms each call; None for a
    step without one (block)."""
    spec, rng = case.spec, np.random.default_rng(1)
    if spec.name not in NUMPY_STEPS:
        return None
    arguments = kernel_arguments(spec, inputs, prefix="np_")
    lengths = [np.full(case.batch, case.drafts)] if spec.lengths else []
    step = NUMPY_STEPS[spec.name]
    if not isinstance(spec, SteppedKernel):  # deterministic: no uniforms
        return lambda: step(*arguments, *lengths)
    columns = case.drafts + spec.bonus_row
    return lambda: step(*arguments, *lengths, numpy_uniforms(rng, (case.batch, 2, columns)))


def load_transformers_step() -> tuple[Callable | None, str]:
    """transformers' ``_speculative_sampling`` (the peer :mod:`ncm_verify.peers.transformers_step` judges),
    or None and why it is absent."""
    try:
        sampling = transformers_step.speculative_sampling()
    except ImportError as error:  # the optional `peers` extra
        return None, f"transformers peer skipped: {error} (make install-peers)"
    return sampling, f"{transformers_step.versions()} (1 thread), looped over the batch"


def make_transformers_peer(case: BenchCase, inputs: dict, loaded) -> Callable[[], object] | None:
    """transformers' chain step looped over the batch by the peer's adapter, its inputs converted once (untimed)."""
    if loaded is None or getattr(transformers_step, case.spec.verify, None) is None:
        return None
    target = inputs["target"]
    tensors = transformers_step.ChainInputs(target, inputs["draft"], inputs["tokens"], None)
    return lambda: transformers_step.run_sequences(tensors, loaded, lambda b: None)


MLX_REDUCTIONS = ("mlx sum", "mlx max", "mlx block sum")
"""MLX reductions over a floor's bytes, timed apart; the fastest sets the MLX floor. On MLX's CPU a sum
over 32-entry blocks streams 2-3x faster than one over 4096-entry rows (20 vs 8 GB/s measured here)."""


def make_floors(nbytes: int, dtype: str) -> dict[str, Callable[[], None]]:
    """Reading `nbytes`: a NumPy copy, and each of `MLX_REDUCTIONS` (the same array as rows and as blocks)."""
    count = max(1, nbytes // 4)
    source, destination = np.ones(count, np.float32), np.empty(count, np.float32)
    rows = mx.ones((max(1, nbytes // (DTYPES[dtype].size * 4096)), 4096), dtype=DTYPES[dtype])
    blocks = rows.reshape(-1, CDF_BLOCK)
    mx.eval(rows, blocks)
    return {
        "numpy copy": lambda: np.copyto(destination, source),
        "mlx sum": lambda: mx.eval(rows.sum(axis=-1)),
        "mlx max": lambda: mx.eval(rows.max(axis=-1)),
        "mlx block sum": lambda: mx.eval(blocks.sum(axis=-1)),
    }


ROUND_TRIP = "mlx round trip"
"""A contender that does no work: a compiled two-op evaluation of 8 floats, the least any MLX call costs when
timed as the steps are (after other contenders left MLX's stream thread asleep): 50-70 us on this 2-core VM,
12 us in a tight loop. A B = 1 step pays it, and more such wakes of the stream thread between its kernels."""


def make_round_trip() -> Callable[[], None]:
    ones = mx.ones((8,))
    mx.eval(ones)
    twice_plus_two = mx.compile(lambda x: (x + 1) * 2)
    return lambda: mx.eval(twice_plus_two(ones))


# --- timing -------------------------------------------------------------------------


def time_side_by_side(
    contenders: dict[str, Callable[[], object]], rounds: int, budget_s: float, burst: int = BURST
) -> dict[str, list]:
    """Seconds per call of each contender, interleaved round by round (in a shuffled order) so
    that machine noise hits all alike. A round runs each contender `burst` times in a row, as a
    decoding loop would. Stops after `rounds`, or at `budget_s` once 3 rounds are in.

    The order is drawn afresh each round (seeded): a rotation keeps each contender behind the
    same one, and the one behind the floors' large reads found a cold cache (1.4x slower at B = 1).
    """
    for function in contenders.values():  # warm up: compile, allocate
        function()
    names = list(contenders)
    times: dict[str, list] = {name: [] for name in names}
    order = random.Random(0)
    start = time.perf_counter()
    for index in range(rounds):
        for name in order.sample(names, len(names)):
            for _ in range(burst):
                begin = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - begin)
        if index >= 2 and time.perf_counter() - start > budget_s:
            break
    return times


def summarise(samples: list[float]) -> dict:
    quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {
        "median_s": statistics.median(samples),
        "q1_s": quartiles[0],
        "q3_s": quartiles[2],
        "min_s": min(samples),
        "calls": len(samples),
    }


def floor_seconds(times: dict[str, list], byte_counts: dict, reduce: Callable) -> dict:
    """Per byte count, the NumPy copy's time and the fastest of the MLX reductions'."""
    return {
        what: {
            "numpy copy": reduce(times[f"numpy copy [{what}]"]),
            "mlx reduction": min(reduce(times[f"{name} [{what}]"]) for name in MLX_REDUCTIONS),
        }
        for what in byte_counts
    }


def kernel_ratios(name: str, medians: dict, floors: dict) -> dict:
    """Ratios of one of ours to the peers (speedup, higher is better) and the floors (x floor, lower is better)."""
    ours = medians[name]
    ratios = {
        f"vs {peer}": ratio(medians[peer] / ours, "higher", f"{peer} time / ours") for peer in PEERS if peer in medians
    }
    for floor, seconds in floors.items():
        ratios[f"x {floor} floor"] = ratio(ours / seconds, "lower", f"ours / {floor} floor")
    if name == "compiled":
        ratios["vs eager"] = ratio(medians["eager"] / ours, "higher", "eager time / compiled")
    if name == "validated":
        ratios[UNVALIDATED] = ratio(ours / medians["eager"], "lower", "default call / the same with validate=False")
    return ratios


def run_kernel_case(impl, case: BenchCase, loaded_peer, rounds: int, budget_s: float) -> dict:
    """Time one case's contenders side by side; their medians, ratios and the floors' bandwidths."""
    inputs = make_kernel_inputs(case)
    contenders = make_ours(impl, case, inputs)
    numpy_step = make_numpy_peer(case, inputs)
    if numpy_step is not None:
        contenders["numpy"] = numpy_step
    transformers_step = make_transformers_peer(case, inputs, loaded_peer)
    if transformers_step is not None:
        contenders["transformers"] = transformers_step
    contenders[ROUND_TRIP] = make_round_trip()
    byte_counts = {"step": step_bytes(case), "inputs": input_bytes(case)}
    for what, nbytes in byte_counts.items():
        contenders.update({f"{floor} [{what}]": fn for floor, fn in make_floors(nbytes, case.dtype).items()})
    times = time_side_by_side(contenders, rounds, budget_s)
    floors = {statistic: floor_seconds(times, byte_counts, reduce) for statistic, reduce in STATISTICS.items()}
    rows = {}
    for name in OURS:
        # Validation must read every input entry; the step alone only what it decides on.
        what = "inputs" if name == "validated" else "step"
        rows[name] = summarise(times[name])
        for statistic, reduce in STATISTICS.items():
            typical = {contender: reduce(samples) for contender, samples in times.items()}
            rows[name][RATIO_KEYS[statistic]] = kernel_ratios(name, typical, floors[statistic][what])
    for name in (*PEERS, ROUND_TRIP):
        if name in times:
            rows[name] = summarise(times[name])
    return {
        "case": case.name,
        **dataclasses.asdict(case),
        "bytes": byte_counts,
        "floors_s": floors["median"],
        "bandwidth_gbs": {
            what: {floor: byte_counts[what] / seconds / 1e9 for floor, seconds in f.items()}
            for what, f in floors["min"].items()
        },
        "contenders": rows,
    }


# --- prefix cache -------------------------------------------------------------------


CACHE_CONFIGS = {
    "sudoku": {},
    "deeper": {"num_layers": 6},
    "longer prefix": {"num_layers": 4, "prefix_length": 324},
}
"""Overrides of the Sudoku-shaped fixture: itself, three times the layers, four puzzles' prefix and more layers."""


def make_cache_model(impl, overrides: dict):
    from ncm_verify.reference.ncm.config import fixture_fields

    return impl.make_model(impl.NCMConfig(**{**fixture_fields("ncm_sudoku"), **overrides}))


def generation(generate, *args, **kwargs):
    result = generate(*args, **kwargs)
    mx.eval(result.tokens, result.latents)
    return result


def peak_bytes(function: Callable[[], object]) -> int:
    """MLX's peak allocation while `function` runs."""
    mx.synchronize()
    mx.reset_peak_memory()
    function()
    mx.synchronize()
    return int(mx.get_peak_memory())


@dataclasses.dataclass(frozen=True)
class CacheBench:
    """One cache config's model, a batch of prefixes, a key, and a cache already holding those prefixes."""

    impl: object
    model: object
    prefix: mx.array
    key: mx.array
    warm: object

    def uncached(self):
        return generation(self.impl.generate_uncached, self.model, self.prefix, self.key)

    def cached(self, cache=None):
        return generation(self.impl.generate_cached, self.model, self.prefix, self.key, cache=cache)

    def contenders(self) -> dict[str, Callable[[], object]]:
        """Uncached; cached cold (a fresh cache: every row misses, is computed and stored); cached warm."""
        return {
            "uncached": self.uncached,
            "cached cold": lambda: self.cached(self.impl.PrefixCache(max_bytes=1 << 30)),
            "cached warm": lambda: self.cached(self.warm),
        }


def make_cache_bench(impl, overrides: dict, batch: int) -> CacheBench:
    model = make_cache_model(impl, overrides)
    config = model.config
    prefix = mx.random.randint(0, config.vocab_size, (batch, config.prefix_length), key=mx.random.key(7))
    made = CacheBench(impl, model, prefix.astype(mx.int32), mx.random.key(0), impl.PrefixCache(max_bytes=1 << 30))
    made.cached(made.warm)  # fills the warm cache
    return made


QUICK_CACHE_CONFIGS = {name: CACHE_CONFIGS[name] for name in ("sudoku", "deeper")}
"""The quick grid's cache cases: the fixture and its deeper twin (the longer prefix's calls take up to 1 s)."""
CACHE_BUDGET_SCALE = 4
"""A cache case gets this many times a kernel case's time budget: its calls take 15 ms to 1 s, and with
the 8 s default the longer-prefix case stopped after 4 rounds, too few for quartiles."""
ONE_LAYER = ", 1 layer"
"""Suffix of the contenders timed on the same config with one layer: the difference is the layers' cost."""


def split_layers(full: float, one: float, layers: int) -> dict:
    """Seconds per layer and fixed seconds per call (embedding, heads, sampling, keys, cache look-ups),
    from one call's time with `layers` layers and with one (each layer has the same shapes)."""
    per_layer = (full - one) / (layers - 1)
    return {"layer_s": per_layer, "fixed_s": one - per_layer}


def layer_speedups(times: dict[str, list], layers: int, predicted: dict) -> dict:
    """Per statistic, the uncached and warm calls split into layers and a fixed cost, and the layers'
    speedup beside both predictions: C4's positions count models the layers' work, not the fixed cost."""
    split = {}
    for statistic, reduce in STATISTICS.items():
        parts = {
            name: split_layers(reduce(times[name]), reduce(times[name + ONE_LAYER]), layers)
            for name in ("uncached", "cached warm")
        }
        speedup = parts["uncached"]["layer_s"] / parts["cached warm"]["layer_s"]
        split[statistic] = {
            **{f"{name} {part}": value for name, halves in parts.items() for part, value in halves.items()},
            "layers speedup": speedup,
            "layers of predicted": speedup / predicted["positions"],
            "layers of pairs predicted": speedup / predicted["pairs"],
        }
    return split


def predicted_speedups(config, batch: int) -> dict[str, dict]:
    """Per cached contender, C4's predicted speedup from positions and the one from attention pairs."""
    hits = {"cached cold": 0, "cached warm": batch, "loaded then warm": batch}
    return {
        name: {
            "positions": accounting.uncached_positions(config, batch)
            / accounting.cached_positions(config, batch, prefix_hits),
            "pairs": accounting.uncached_pairs(config, batch) / accounting.cached_pairs(config, batch, prefix_hits),
        }
        for name, prefix_hits in hits.items()
    }


def run_cache_case(impl, label: str, overrides: dict, batch: int, rounds: int, budget_s: float) -> dict:
    """Uncached vs cached (cold, warm, loaded from disk) generation, beside C4's predicted speedups.

    The uncached and warm calls are also timed with one layer, side by side, to split each into a
    cost per layer (what C4's counts model) and a fixed cost per call that they do not.
    """
    cache_bench = make_cache_bench(impl, overrides, batch)
    config = cache_bench.model.config
    contenders = cache_bench.contenders()
    if config.num_layers > 1:
        one_layer = make_cache_bench(impl, {**overrides, "num_layers": 1}, batch)
        contenders.update(
            {name + ONE_LAYER: call for name, call in one_layer.contenders().items() if name != "cached cold"}
        )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "prefix-cache.safetensors"
        cache_bench.warm.save(path)

        def load():
            loaded = impl.PrefixCache(max_bytes=1 << 30)
            loaded.load(path)
            return loaded

        contenders["cache load"] = load
        contenders["loaded then warm"] = lambda: cache_bench.cached(load())
        # long calls: no cold start to hide
        times = time_side_by_side(contenders, rounds, budget_s * CACHE_BUDGET_SCALE, burst=1)
        hits = cache_bench.cached(load()).cache_hits
        peaks = {name: peak_bytes(contenders[name]) for name in ("uncached", "cached cold", "cached warm")}
    predicted = predicted_speedups(config, batch)
    rows = {name: summarise(samples) for name, samples in times.items()}
    for name, peak in peaks.items():
        rows[name]["peak_bytes"] = peak
    for name, speedups in predicted.items():
        rows[name]["predicted_speedup"] = speedups["positions"]
        rows[name]["predicted_speedup_pairs"] = speedups["pairs"]
        for statistic, reduce in STATISTICS.items():
            measured = reduce(times["uncached"]) / reduce(times[name])
            rows[name][RATIO_KEYS[statistic]] = {
                "vs uncached": ratio(measured, "higher", "uncached time / cached"),
                "of predicted": ratio(measured / speedups["positions"], "higher", "measured / predicted speedup"),
            }
    if config.num_layers > 1:
        rows["cached warm"]["layers"] = layer_speedups(times, config.num_layers, predicted["cached warm"])
    return {
        "case": f"generation {label} B={batch}",
        "config": config.to_dict(),
        "batch": batch,
        "positions_per_layer": {
            "uncached": accounting.uncached_positions(config, batch),
            "cached cold": accounting.cached_positions(config, batch, 0),
            "cached warm": accounting.cached_positions(config, batch, batch),
        },
        "pairs_per_layer": {
            "uncached": accounting.uncached_pairs(config, batch),
            "cached cold": accounting.cached_pairs(config, batch, 0),
            "cached warm": accounting.cached_pairs(config, batch, batch),
        },
        "cache_bytes": cache_bench.warm.nbytes,
        "loaded_hits": hits,
        "contenders": rows,
    }


# --- the run --------------------------------------------------------------------------


def run_bench(
    impl_name: str, grid: str, rounds: int, budget_s: float, *, cases=None, cache_configs=None, progress=print
) -> dict:
    """Every kernel case and cache case of `grid`, measured side by side; the bench.json document."""
    impl = load_implementation(impl_name)
    loaded_peer, peer_note = load_transformers_step()
    progress(peer_note)
    kernels = []
    cases = cases if cases is not None else make_grid(grid)
    if cache_configs is None:
        cache_configs = {} if grid == "smollm2" else CACHE_CONFIGS if grid == "full" else QUICK_CACHE_CONFIGS
    tracker = Progress(f"bench ({grid} grid)", len(cases) + len(cache_configs), say=progress)
    for case in cases:
        tracker.start(case.name)
        kernels.append(run_kernel_case(impl, case, loaded_peer, rounds, budget_s))
        progress(format_kernel_rows(kernels[-1:]))
        tracker.done(kernels[-1]["case"])
    generations = []
    for label, overrides in cache_configs.items():
        tracker.start(f"generation {label}")
        generations.append(run_cache_case(impl, label, overrides, 8, rounds, budget_s))
        progress(format_cache_rows(generations[-1:]))
        tracker.done(label)
    environment = describe_environment()
    return {
        "schema": BENCH_SCHEMA,
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "impl": impl_name,
        "commit": environment["commit"],
        "grid": grid,
        "device": environment["mlx_default_device"],
        "mlx": environment["mlx"],
        "environment": environment,
        "peers": {"numpy": f"numpy {np.__version__}, float32 inputs (no bfloat16)", "transformers": peer_note},
        "machine_info": {"node": environment["platform"], "machine": environment["machine"]},
        "rounds": rounds,
        "budget_s": budget_s,
        "kernels": kernels,
        "generation": generations,
        "goals": goal_rows({"bench.json": {"kernels": kernels}}),
        "benchmarks": pytest_benchmark_rows(kernels + generations),
    }


def pytest_benchmark_rows(cases: list[dict]) -> list[dict]:
    """Rows in pytest-benchmark's shape, so that readers of its JSON still find the medians."""
    return [
        {
            "fullname": f"{case['case']} :: {name}",
            "stats": {"median": row["median_s"], "rounds": row["calls"]},
            "extra_info": {"ratios": {k: v["value"] for k, v in row.get("ratios", {}).items()}},
        }
        for case in cases
        for name, row in case["contenders"].items()
    ]


# --- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.bench", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="measure, print the table and the goals, write the JSON")
    run.add_argument("--impl", default=DEFAULT_IMPLEMENTATION)
    run.add_argument("--grid", default="quick", choices=GRIDS)
    run.add_argument("--rounds", type=int, help="interleaved rounds per case at most (default: the grid's)")
    run.add_argument("--budget", type=float, help="seconds per case before stopping early (default: the grid's)")
    run.add_argument("--out", type=Path, default=Path("reports/bench.json"))
    goals = commands.add_parser("goals", help="print every ratio of a run's JSON beside its goal")
    goals.add_argument("reports", type=Path, help=f"the folder holding {' and '.join(RATIO_FILES)}")
    goals.add_argument("--markdown", action="store_true", help="as a Markdown table (docs/performance.md)")
    compare = commands.add_parser("compare", help="fail when a ratio regressed past its recorded band")
    compare.add_argument("baseline", type=Path)
    compare.add_argument("reports", type=Path, help=f"the folder holding {' and '.join(RATIO_FILES)}")
    baseline = commands.add_parser("baseline", help="record the baseline (ratios and bands) from one or more runs")
    baseline.add_argument("runs", type=Path, nargs="+", help=f"folders holding {' and '.join(RATIO_FILES)}")
    baseline.add_argument("--out", type=Path, required=True)
    baseline.add_argument("--min-band", type=float, default=MIN_BAND)
    baseline.add_argument("--margin", type=float, default=SPREAD_MARGIN)
    arguments = parser.parse_args(argv)
    if arguments.command == "run":
        settings = GRID_SETTINGS[arguments.grid]
        rounds = arguments.rounds if arguments.rounds is not None else settings["rounds"]
        budget = arguments.budget if arguments.budget is not None else settings["budget"]
        bench = run_bench(arguments.impl, arguments.grid, rounds, budget)
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps(bench, indent=1) + "\n", encoding="utf-8")
        print("\n" + format_bench(bench) + "\n\n" + format_goals(bench["goals"]) + f"\n\nwritten to {arguments.out}")
        return 0
    if arguments.command == "goals":
        documents = read_run(arguments.reports)
        if not documents:
            raise ValueError(f"reports: no {' or '.join(RATIO_FILES)} in {arguments.reports}; run `make bench`")
        print(format_goals(goal_rows(documents), markdown=arguments.markdown))
        return 0
    if arguments.command == "baseline":
        runs = [read_run(directory) for directory in arguments.runs]
        if not all(runs):
            raise ValueError(f"runs: each folder must hold {' or '.join(RATIO_FILES)}, got {arguments.runs}")
        recorded = record_baseline(runs, min_band=arguments.min_band, margin=arguments.margin)
        arguments.out.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
        print(f"{len(recorded['ratios'])} ratios from {len(runs)} run(s) recorded in {arguments.out}")
        return 0
    compared = compare_to_baseline(
        json.loads(arguments.baseline.read_text(encoding="utf-8")), read_run(arguments.reports)
    )
    for line in compared["regressions"]:
        print(f"REGRESSION {line}")
    if compared["missing"]:
        print(f"{len(compared['missing'])} baseline ratio(s) not measured by this run (another grid?)")
    matched = len(compared["regressions"]) + len(compared["within"])
    print(
        f"{len(compared['regressions'])} of {matched} ratio(s) worse than {arguments.baseline} by more than "
        "their recorded band"
    )
    return 1 if compared["regressions"] or not matched else 0


if __name__ == "__main__":
    sys.exit(main())
