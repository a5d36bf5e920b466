"""The bench's prefix-cache cases: the attention-pair counts it predicts from, and the split of a call
into a cost per layer and a fixed cost. Nothing here is timed."""

from __future__ import annotations

import mlx.core as mx
import pytest

from ncm_verify.bench import measure as bench
from ncm_verify.bench import ratios as bench_ratios
from ncm_verify.protocol import load_implementation
from ncm_verify.reference.ncm import accounting
from ncm_verify.reference.ncm.config import fixture_fields


@pytest.mark.parametrize("fixture", ["ncm_tiny", "ncm_sudoku"])
@pytest.mark.parametrize("prefix_hits", [0, 2, 3])
def test_the_analytic_attention_pair_counts_equal_the_instrumented_ones(fixture, prefix_hits):
    impl = load_implementation("ncm_verify.reference")
    model = impl.make_model(impl.NCMConfig(**fixture_fields(fixture)))
    config = model.config
    prefix = mx.random.randint(0, config.vocab_size, (3, config.prefix_length), key=mx.random.key(1)).astype(mx.int32)
    cache = impl.PrefixCache(max_bytes=1 << 30)
    if prefix_hits:
        impl.generate_cached(model, prefix[:prefix_hits], mx.random.key(0), cache)
    impl.generate_cached(model, prefix, mx.random.key(0), cache)
    want = accounting.cached_pairs(config, 3, prefix_hits)
    assert model.pair_counts() == [want] * config.num_layers, f"{fixture}, {prefix_hits} hits: cached pairs"
    impl.generate_uncached(model, prefix, mx.random.key(0))
    want = accounting.uncached_pairs(config, 3)
    assert model.pair_counts() == [want] * config.num_layers, f"{fixture}: uncached pairs"


def test_a_call_splits_into_layers_and_a_fixed_cost_from_its_times_at_n_layers_and_at_one():
    assert bench.split_layers(10.0, 4.0, 3) == {"layer_s": 3.0, "fixed_s": 1.0}


def test_a_tiny_cache_case_reports_both_predictions_and_the_layer_split():
    impl = load_implementation("ncm_verify.reference")
    case = bench.run_cache_case(impl, "sudoku", {}, 8, 2, 0.1)
    warm = case["contenders"]["cached warm"]
    assert warm["predicted_speedup"] == pytest.approx(261 / 99)
    assert warm["predicted_speedup_pairs"] == pytest.approx((90**2 + 171**2) / (9 * 90 + 90 * 171))
    assert case["pairs_per_layer"]["cached cold"] == 8 * (81**2 + 9 * 90 + 90 * 171)
    for statistic in bench.STATISTICS:
        split = warm["layers"][statistic]
        for name in ("uncached", "cached warm"):
            full = case["contenders"][name][f"{statistic}_s"]
            rebuilt = split[f"{name} fixed_s"] + 2 * split[f"{name} layer_s"]
            assert rebuilt == pytest.approx(full), f"{statistic}: {name} is not its fixed cost plus two layers"
        assert split["layers speedup"] == pytest.approx(split["uncached layer_s"] / split["cached warm layer_s"])
    table = bench_ratios.format_cache_rows([case])
    assert "cached warm, 1 layer" in table and "layers' speedup" in table and "pairs predicted" in table
    bench_document = {
        **{key: "x" for key in ("impl", "commit", "datetime", "device")},
        "kernels": [],
        "generation": [case],
    }
    line = bench_ratios.c9_summary({**bench_document, "schema": bench_ratios.BENCH_SCHEMA}, "x", "x")
    assert "of the attention pairs' prediction" in line, line
