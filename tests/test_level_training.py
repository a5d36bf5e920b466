"""The toy level NCM's training objectives (`train/tasks.py`) against brute-force enumeration over its codes."""

import itertools

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.reference.ncm import NCMConfig, make_model
from ncm_verify.train.tasks import ncm_level_joint_kl, ncm_level_log_likelihood

TINY = NCMConfig(
    vocab_size=4, prefix_length=3, level_sizes=(2, 1), codebook_size=3, d_model=8, num_heads=2, num_layers=1, seed=3
)


def level_law(model, sequence: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """p(z) (K,) and p(x_i | z) (K, n, V) of the level after `sequence`, in float64, one code at a time."""
    placeholders = np.full(size, model.config.placeholder)
    hidden, _ = model(mx.array(np.concatenate([sequence, placeholders])[None], dtype=mx.int32))
    slots = hidden[:, -size:]
    prior = np.array(mx.softmax(model.latent_logits(slots), axis=-1)[0], dtype=np.float64)
    rows = [
        np.array(mx.softmax(model.token_logits(slots, mx.array([z])), axis=-1)[0], dtype=np.float64)
        for z in range(model.config.codebook_size)
    ]
    return prior, np.stack(rows)


def brute_force_log_likelihood(model, window: np.ndarray) -> float:
    """log sum over every code tuple (z_1, ..., z_L) of p(z, x | prefix), enumerated."""
    config = model.config
    laws = [
        level_law(model, window[: config.level_start(level)], size) for level, size in enumerate(config.level_sizes)
    ]
    total = 0.0
    for codes in itertools.product(range(config.codebook_size), repeat=len(laws)):
        p = 1.0
        for level, (z, (prior, rows)) in enumerate(zip(codes, laws)):
            x = window[config.level_start(level) : config.level_start(level) + config.level_sizes[level]]
            p *= prior[z] * np.prod(rows[z, np.arange(len(x)), x])
        total += p
    return float(np.log(total))


@pytest.fixture(scope="module")
def windows():
    return np.random.default_rng(0).integers(0, TINY.vocab_size, size=(5, TINY.total_length)).astype(np.int32)


def test_the_marginalised_level_likelihood_equals_the_sum_over_every_code_tuple(windows):
    model = make_model(TINY)
    got = np.array(ncm_level_log_likelihood(model, mx.array(windows)))
    want = [brute_force_log_likelihood(model, w) for w in windows]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_distillation_kl_equals_the_kl_of_the_enumerated_joint_level_laws(windows):
    target, draft = make_model(TINY), make_model(NCMConfig(**{**TINY.to_dict(), "seed": 4}))
    got = np.array(ncm_level_joint_kl(target, draft, mx.array(windows)))
    config = TINY
    want = []
    for w in windows:
        kl = 0.0
        for level, size in enumerate(config.level_sizes):
            (p_prior, p_rows), (q_prior, q_rows) = (
                level_law(m, w[: config.level_start(level)], size) for m in (target, draft)
            )
            for z in range(config.codebook_size):
                for x in itertools.product(range(config.vocab_size), repeat=size):
                    p = p_prior[z] * np.prod(p_rows[z, np.arange(size), x])
                    q = q_prior[z] * np.prod(q_rows[z, np.arange(size), x])
                    kl += p * np.log(p / q)
        want.append(kl)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.all(np.array(want) > 1e-3), "the two seeds' laws should differ, or the check shows nothing"
    np.testing.assert_allclose(np.array(ncm_level_joint_kl(target, target, mx.array(windows))), 0.0, atol=1e-5)


def test_the_level_table_prints_one_line_per_drafting_row_and_skips_level_by_level_rows():
    from ncm_verify.bench.levels import level_rows

    drafting = {
        "draft": "level_draft_data",
        "target": "level_target (trained)",
        "accepted_levels_per_pass": 1.25,
        "accepted_levels_per_pass_predicted_at_visited": 1.5,
        "acceptance_per_drafted_level": 0.4,
        "acceptance_per_drafted_level_at_visited": 0.45,
        "target_passes_per_generation": 3.0,
        "drafting_ms_batch8": 10.0,
        "level_by_level_ms_batch8": 5.0,
        "wall_ratio_vs_level_by_level_batch8": 2.0,
        "wall_ratio_vs_level_by_level_batch1": 1.5,
        "device": "Device(cpu, 0)",
    }
    lines = level_rows([{"extra_info": drafting}, {"extra_info": {"target_passes_per_generation": 6}}])
    assert len(lines) == 2
    assert lines[1].split()[:3] == ["level_draft_data", "level_target", "(trained)"]
    assert "1.250" in lines[1] and "1.500" in lines[1] and "2.00" in lines[1] and "Device(cpu, 0)" in lines[1]
