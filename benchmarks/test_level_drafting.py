"""C12: drafting whole NCM levels, measured beside the exact prediction, for drafts of several kinds.

Two targets. The tiny one (four levels of one slot) is small enough that the exact
law of passes and accepted levels can be enumerated (`exact_levels.speculative_level_law`);
its drafts are the target with every weight moved by a relative perturbation, and
smaller NCMs (fewer layers, narrower) sharing vocabulary, codebook, level sizes and
prefix layout. A smaller draft has its own weights and cannot be distilled here, so
its closeness is not a knob: its exact acceptance is reported as the prediction.
A layer-skipping draft (the target's first layers) shares the target's weights.
The larger one (six layers, eight levels) is where a cheap draft could pay; it is
too large to enumerate, so its prediction is the exact per-level acceptance
probability of the levels the run verified; its wall time is also taken at batch 1.

Wall time is measured at batch 8 on the prefix-K/V path, as a ratio to
level-by-level generation timed interleaved with it in the same run, with the
chain validated (the default) and unvalidated. The counts come from a larger
sampled run (from scratch, the same law). Nothing is asserted about speed.

What `make bench` runs: the trained models (`make train`'s level_target, six levels of two characters
after 16 characters of pydoc text, and its two smaller drafts, on the data alone and distilled on the
target), on held-out prefixes; predicted is the exact per-level acceptance probabilities of the levels the
run verified. The untrained rows above run with ``--untrained-level-rows``.
"""

import functools
import itertools
import statistics
import time
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.harness.level_models import make_draft_model, make_level_tables
from ncm_verify.oracles import exact_levels
from ncm_verify.reference import speculative
from ncm_verify.reference.drafting.text import text_ids
from ncm_verify.reference.drafting.trained import load_trained
from ncm_verify.reference.ncm import NCMConfig, generate_cached, make_model
from ncm_verify.reference.ncm.level_draft import generate_level_speculative
from ncm_verify.train.data import windows
from ncm_verify.train.tasks import level_log_laws

CONFIG = dict(
    vocab_size=4,
    prefix_length=4,
    level_sizes=[1, 1, 1, 1],
    codebook_size=3,
    d_model=16,
    num_heads=2,
    num_layers=2,
    mask="ncm",
    seed=5,
)
PREFIX = [0, 1, 2, 3]
NUM_DRAFT = 3
LARGE = dict(
    vocab_size=8,
    prefix_length=8,
    level_sizes=[1] * 8,
    codebook_size=4,
    d_model=64,
    num_heads=4,
    num_layers=6,
    mask="ncm",
    seed=5,
)
LARGE_PREFIX = [0, 1, 2, 3, 4, 5, 6, 7]
LARGE_NUM_DRAFT = 4
BATCH = 8
COUNTED = 8192
"""Generations sampled for the tiny target's counts: their standard error on passes is below 0.01."""
LARGE_COUNTED = 64
"""Generations sampled for the larger target's counts (kept small for `make bench`: standard error ~0.2 pass)."""
RATIO_REPEATS = 15
"""Interleaved timings per side for a wall-time ratio: the median of each side."""
LARGE_RATIO_REPEATS = 7
LARGE_BATCHES = (1, 8)
"""Batch 1 too: at batch 8 rows diverge into cohorts that each run their own rounds."""
PERTURBATIONS = (0.0, 0.01, 0.1, 1.0)
SMALLER = {
    # name -> config fields the draft changes; it keeps vocabulary, codebook, level sizes and prefix layout
    "one layer": dict(num_layers=1),
    "one narrow layer": dict(d_model=8, num_heads=1, num_layers=1),
}
TRUNCATED = "first {} layers"
"""A layer-skipping draft: the target's embeddings, heads and first layers, no layer of its own."""
TINY_DRAFTS = tuple(f"perturbed {s}" for s in PERTURBATIONS) + tuple(SMALLER) + (TRUNCATED.format(1),)
LARGE_DRAFTS = ("perturbed 0.1", "one narrow layer", TRUNCATED.format(2))
TRAINED_DRAFTS = ("level_draft_data", "level_draft_distilled")
TRAINED_NUM_DRAFT = 3
TRAINED_COUNTED = 512
"""Held-out prefixes sampled once each for the trained models' counts."""
OVERLAP_WINDOWS = 256
"""Held-out windows (teacher forced) on which the draft's code law is compared with the target's."""
TRAINED_GRIDS = {
    "quick": {"counted": 128, "repeats": 5, "windows": 64, "rounds": 3},
    "full": {"counted": TRAINED_COUNTED, "repeats": RATIO_REPEATS, "windows": OVERLAP_WINDOWS, "rounds": 5},
}
"""The trained rows' sizes per `--bench-grid` (`make bench`: quick; GRID=full): prefixes counted, interleaved
timings per side of a wall-time ratio, windows of the code overlap, pytest-benchmark rounds."""
untrained = pytest.mark.skipif(
    "not config.getoption('untrained_level_rows')", reason="untrained level rows: pass --untrained-level-rows"
)


def make_smaller_draft(target, fields: dict, seed: int = 1):
    """An NCM with the target's layout and `fields` changed, and its own weights."""
    return make_model(NCMConfig(**{**target.config.to_dict(), **fields, "seed": seed}))


def make_truncated_draft(target, layers: int):
    """The target cut to its first `layers` layers, every kept weight shared with it."""
    draft = make_smaller_draft(target, {"num_layers": layers})
    kept = [
        (name, value)
        for name, value in tree_flatten(target.parameters())
        if not name.startswith("layers.") or int(name.split(".")[1]) < layers
    ]
    draft.update(tree_unflatten(kept))
    mx.eval(draft.parameters())
    return draft


def make_draft(target, kind: str):
    """A draft of `kind`: a name in `SMALLER`, ``"first k layers"``, or ``"perturbed S"`` (`make_draft_model`)."""
    if kind in SMALLER:
        return make_smaller_draft(target, SMALLER[kind])
    if kind.startswith("first "):
        return make_truncated_draft(target, int(kind.split()[1]))
    return make_draft_model(target, kind, seed=1)


def make_counting_kernels(validate: bool) -> SimpleNamespace:
    """The reference kernels, the latent chain optionally unvalidated, counting its batched calls.

    Skipping validation is allowed here: every input is a softmax of our own models and a
    draw from it, so it is valid by construction (the protocol's ``validate=False``).
    """
    kernels = SimpleNamespace(verify_greedy=speculative.verify_greedy, calls=0)

    def verify_latent_chain(*args, **kwargs):
        kernels.calls += 1
        return speculative.verify_latent_chain(*args, validate=validate, **kwargs)

    kernels.verify_latent_chain = verify_latent_chain
    return kernels


@pytest.fixture(scope="module")
def tiny():
    model = make_model(NCMConfig(**CONFIG))
    return model, make_level_tables(model, PREFIX)


@pytest.fixture(scope="module")
def large():
    return make_model(NCMConfig(**LARGE))


def evaluated(generate, *args, **kwargs):
    result = generate(*args, **kwargs)
    mx.eval(result.tokens, result.latents)
    return result


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def wall_ratio(drafting, level_by_level, repeats: int = RATIO_REPEATS) -> dict:
    """Median wall time of `drafting` over `level_by_level`, timed alternately so both share the machine's load."""
    drafting(), level_by_level()  # warm-up: first calls build kernels
    pairs = [(timed(drafting), timed(level_by_level)) for _ in range(repeats)]
    spec, base = (statistics.median(side) for side in zip(*pairs))
    return {"drafting_ms": 1e3 * spec, "level_by_level_ms": 1e3 * base, "wall_ratio_vs_level_by_level": spec / base}


def prefix_rows(prefix, count: int) -> mx.array:
    """`count` rows: one prefix repeated, or the first `count` rows of a 2-D array of prefixes."""
    prefix = np.asarray(prefix)
    rows = np.tile(prefix, (count, 1)) if prefix.ndim == 1 else prefix[:count]
    if len(rows) != count:
        raise ValueError(f"prefix: {len(rows)} rows, {count} wanted")
    return mx.array(rows, dtype=mx.int32)


def sampled_counts(target, draft, prefix, num_draft: int, counted: int) -> dict:
    """Measured counts per generation from `counted` sampled generations (from scratch)."""
    run = generate_level_speculative(
        target,
        draft,
        prefix_rows(prefix, counted),
        mx.random.key(1),
        num_draft=num_draft,
        recompute=True,
    )
    return {
        "target_passes_per_generation": float(run.target_passes.mean()),
        "accepted_levels_per_pass": float(run.accepted_levels.sum() / run.target_passes.sum()),
        "acceptance_per_drafted_level": float(run.accepted_levels.sum() / run.verified_levels.sum()),
        # the exact acceptance probabilities of the levels this run verified, averaged
        "acceptance_per_drafted_level_at_visited": float(run.predicted_accepted.sum() / run.verified_levels.sum()),
        "accepted_levels_per_pass_predicted_at_visited": float(run.predicted_accepted.sum() / run.target_passes.sum()),
        "level_by_level_passes": len(target.config.level_sizes),
        "counted_generations": counted,
    }


def exact_predictions(tables, draft) -> dict:
    """The same figures predicted from the exact law of the tiny target's speculative generation."""
    law = exact_levels.speculative_level_law(tables, make_level_tables(draft, PREFIX), NUM_DRAFT)
    passes, accepted, verified = exact_levels.expected_cost(law)
    return {
        "target_passes_predicted": float(passes),
        "accepted_levels_per_pass_predicted": float(accepted / passes),
        "acceptance_per_drafted_level_predicted": float(accepted / verified),
    }


def wall_figures(
    target, draft, prefix, num_draft: int, batch: int = BATCH, repeats: int = RATIO_REPEATS, suffix: str = ""
) -> dict:
    """Wall-time ratios at `batch`, validated and not, and the batched chain calls per generation (mean)."""
    rows = prefix_rows(prefix, batch)
    figures = {}
    for validate, tail in ((True, suffix), (False, suffix + "_unvalidated")):
        kernels = make_counting_kernels(validate)
        drafting = functools.partial(
            evaluated,
            generate_level_speculative,
            target,
            draft,
            rows,
            mx.random.key(0),
            num_draft=num_draft,
            kernels=kernels,
        )
        ratio = wall_ratio(
            drafting, functools.partial(evaluated, generate_cached, target, rows, mx.random.key(0)), repeats
        )
        figures.update({name + tail: value for name, value in ratio.items()})
        figures["chain_calls_per_generation" + tail] = kernels.calls / (repeats + 1)
    return figures


@untrained
@pytest.mark.benchmark(group="level drafting")
@pytest.mark.parametrize("kind", TINY_DRAFTS)
def test_level_drafting_latency(benchmark, tiny, kind):
    model, tables = tiny
    draft = make_draft(model, kind)
    benchmark.extra_info.update(
        batch=BATCH,
        num_draft=NUM_DRAFT,
        draft=kind,
        target="tiny",
        **sampled_counts(model, draft, PREFIX, NUM_DRAFT, COUNTED),
        **exact_predictions(tables, draft),
        **wall_figures(model, draft, PREFIX, NUM_DRAFT),
    )
    prefix = mx.array(np.tile(PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark(evaluated, generate_level_speculative, model, draft, prefix, mx.random.key(0), num_draft=NUM_DRAFT)


@untrained
@pytest.mark.benchmark(group="level drafting, larger target")
@pytest.mark.parametrize("kind", LARGE_DRAFTS)
def test_level_drafting_latency_on_a_larger_target(benchmark, large, kind):
    draft = make_draft(large, kind)
    benchmark.extra_info.update(
        batch=BATCH,
        num_draft=LARGE_NUM_DRAFT,
        draft=kind,
        target="larger",
        **sampled_counts(large, draft, LARGE_PREFIX, LARGE_NUM_DRAFT, LARGE_COUNTED),
    )
    for batch in LARGE_BATCHES:
        benchmark.extra_info.update(
            wall_figures(
                large, draft, LARGE_PREFIX, LARGE_NUM_DRAFT, batch, LARGE_RATIO_REPEATS, suffix=f"_batch{batch}"
            )
        )
    prefix = mx.array(np.tile(LARGE_PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark.pedantic(
        evaluated,
        args=(generate_level_speculative, large, draft, prefix, mx.random.key(0)),
        kwargs=dict(num_draft=LARGE_NUM_DRAFT),
        rounds=5,
        warmup_rounds=1,
    )


@untrained
@pytest.mark.benchmark(group="level drafting")
def test_level_by_level_latency(benchmark, tiny):
    model, _ = tiny
    benchmark.extra_info.update(batch=BATCH, target_passes_per_generation=len(CONFIG["level_sizes"]))
    prefix = mx.array(np.tile(PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark(evaluated, generate_cached, model, prefix, mx.random.key(0))


@untrained
@pytest.mark.benchmark(group="level drafting, larger target")
def test_level_by_level_latency_on_a_larger_target(benchmark, large):
    benchmark.extra_info.update(batch=BATCH, target_passes_per_generation=len(LARGE["level_sizes"]))
    prefix = mx.array(np.tile(LARGE_PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark.pedantic(evaluated, args=(generate_cached, large, prefix, mx.random.key(0)), rounds=5, warmup_rounds=1)


@pytest.fixture(scope="module")
def sizes(pytestconfig):
    return TRAINED_GRIDS[pytestconfig.getoption("bench_grid")]


@pytest.fixture(scope="module")
def trained(sizes):
    """The shipped level target and held-out prefixes (fixed windows of the held-out text)."""
    target = load_trained("level_target")
    _, held_out = text_ids()
    prefixes = windows(held_out, sizes["counted"], target.config.prefix_length, seed=2026, step=0)
    return target, prefixes


def code_overlap(target, draft, w: mx.array) -> dict:
    """Mean over levels and windows of sum_z min(p(z), q(z)): as coded, and under the draft's best relabelling
    of its codes (a data-only draft's codes need not mean the target's; the latent chain compares them by code)."""
    laws = [
        (np.exp(np.array(p)), np.exp(np.array(q)))
        for (p, _, _), (q, _, _) in zip(*(level_log_laws(m, w) for m in (target, draft)))
    ]
    overlap = {
        perm: float(np.mean([np.minimum(p, q[:, list(perm)]).sum(-1).mean() for p, q in laws]))
        for perm in itertools.permutations(range(target.config.codebook_size))
    }
    identity = tuple(range(target.config.codebook_size))
    return {"code_overlap": overlap[identity], "code_overlap_best_relabelling": max(overlap.values())}


@pytest.mark.benchmark(group="level drafting, trained")
@pytest.mark.parametrize("name", TRAINED_DRAFTS)
def test_level_drafting_latency_on_the_trained_models(benchmark, trained, sizes, name):
    target, prefixes = trained
    draft = load_trained(name)
    benchmark.extra_info.update(
        batch=BATCH,
        num_draft=TRAINED_NUM_DRAFT,
        draft=name,
        target="level_target (trained)",
        **sampled_counts(target, draft, prefixes, TRAINED_NUM_DRAFT, sizes["counted"]),
        **code_overlap(
            target, draft, mx.array(windows(text_ids()[1], sizes["windows"], target.config.total_length, 2026, 0))
        ),
    )
    for batch in LARGE_BATCHES:
        benchmark.extra_info.update(
            wall_figures(target, draft, prefixes, TRAINED_NUM_DRAFT, batch, sizes["repeats"], suffix=f"_batch{batch}")
        )
    rows = prefix_rows(prefixes, BATCH)
    benchmark.pedantic(
        evaluated,
        args=(generate_level_speculative, target, draft, rows, mx.random.key(0)),
        kwargs=dict(num_draft=TRAINED_NUM_DRAFT),
        rounds=sizes["rounds"],
        warmup_rounds=1,
    )


@pytest.mark.benchmark(group="level drafting, trained")
def test_level_by_level_latency_on_the_trained_target(benchmark, trained, sizes):
    target, prefixes = trained
    benchmark.extra_info.update(batch=BATCH, target_passes_per_generation=len(target.config.level_sizes))
    rows = prefix_rows(prefixes, BATCH)
    call = dict(args=(generate_cached, target, rows, mx.random.key(0)), rounds=sizes["rounds"], warmup_rounds=1)
    benchmark.pedantic(evaluated, **call)
