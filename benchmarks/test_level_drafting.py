"""C12: drafting whole NCM levels, measured beside the exact prediction, for drafts of several closeness.

The target has four levels of one slot, small enough that the exact law of
passes and accepted levels can be enumerated (`exact_levels.speculative_level_law`);
the draft is the target with every weight moved by a relative perturbation.
Wall time is measured at batch 8 on the prefix-K/V path; the counts come from a
larger sampled run (from scratch, the same law). Nothing is asserted about speed.
"""

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.ncm import NCMConfig, generate_cached, make_model
from ncm_verify.ncm import exact_levels
from ncm_verify.ncm.level_draft import generate_level_speculative, make_perturbed_model

CONFIG = dict(vocab_size=4, prefix_length=4, level_sizes=[1, 1, 1, 1], codebook_size=3, d_model=16, num_heads=2,
              num_layers=2, mask="ncm", seed=5)
PREFIX = [0, 1, 2, 3]
NUM_DRAFT = 3
BATCH = 8
COUNTED = 8192
"""Generations sampled for the measured counts: their standard error on passes is below 0.01."""
PERTURBATIONS = (0.0, 0.01, 0.1, 1.0)


@pytest.fixture(scope="module")
def target():
    model = make_model(NCMConfig(**CONFIG))
    return model, exact_levels.make_level_tables(model, PREFIX)


def evaluated(generate, *args, **kwargs):
    result = generate(*args, **kwargs)
    mx.eval(result.tokens, result.latents)
    return result


def drafting_figures(target_model, tables, draft) -> dict:
    """Measured counts per generation beside the exact prediction of the same figures."""
    law = exact_levels.speculative_level_law(tables, exact_levels.make_level_tables(draft, PREFIX), NUM_DRAFT)
    passes, accepted, verified = exact_levels.expected_cost(law)
    run = generate_level_speculative(target_model, draft, mx.array([PREFIX] * COUNTED, dtype=mx.int32),
                                     mx.random.key(1), num_draft=NUM_DRAFT, recompute=True)
    return {
        "target_passes_per_generation": float(run.target_passes.mean()),
        "target_passes_predicted": float(passes),
        "accepted_levels_per_pass": float(run.accepted_levels.sum() / run.target_passes.sum()),
        "accepted_levels_per_pass_predicted": float(accepted / passes),
        "acceptance_per_drafted_level": float(run.accepted_levels.sum() / run.verified_levels.sum()),
        "acceptance_per_drafted_level_predicted": float(accepted / verified),
        # the exact acceptance probabilities of the levels this run verified, averaged
        "acceptance_per_drafted_level_at_visited": float(run.predicted_accepted.sum() / run.verified_levels.sum()),
        "level_by_level_passes": len(CONFIG["level_sizes"]),
        "counted_generations": COUNTED,
    }


@pytest.mark.benchmark(group="level drafting")
@pytest.mark.parametrize("perturbation", PERTURBATIONS)
def test_level_drafting_latency(benchmark, target, perturbation):
    model, tables = target
    draft = make_perturbed_model(model, perturbation, seed=1)
    benchmark.extra_info.update(batch=BATCH, num_draft=NUM_DRAFT, perturbation=perturbation,
                                **drafting_figures(model, tables, draft))
    prefix = mx.array(np.tile(PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark(evaluated, generate_level_speculative, model, draft, prefix, mx.random.key(0), num_draft=NUM_DRAFT)


@pytest.mark.benchmark(group="level drafting")
def test_level_by_level_latency(benchmark, target):
    model, _ = target
    benchmark.extra_info.update(batch=BATCH, target_passes_per_generation=len(CONFIG["level_sizes"]))
    prefix = mx.array(np.tile(PREFIX, (BATCH, 1)), dtype=mx.int32)
    benchmark(evaluated, generate_cached, model, prefix, mx.random.key(0))
