"""C9: cached vs uncached generation on the Sudoku-shaped config, side by side in one run."""

import mlx.core as mx
import pytest

from ncm_verify.ncm import NCMConfig, PrefixCache, generate_cached, generate_uncached, make_model
from ncm_verify.ncm.config import fixture_fields

BATCH = 8


@pytest.fixture(scope="module")
def sudoku():
    model = make_model(NCMConfig(**fixture_fields("ncm_sudoku")))
    prefix = mx.random.randint(0, 10, (BATCH, model.config.prefix_length), key=mx.random.key(7)).astype(mx.int32)
    return model, prefix


def evaluated_generation(generate, *args, **kwargs):
    result = generate(*args, **kwargs)
    mx.eval(result.tokens, result.latents)
    return result


@pytest.mark.benchmark(group="sudoku generation")
@pytest.mark.parametrize("path", ["uncached", "cached cold", "cached warm"])
def test_sudoku_generation_latency(benchmark, sudoku, path):
    model, prefix = sudoku
    benchmark.extra_info.update(batch=BATCH, path=path)
    if path == "uncached":
        benchmark(evaluated_generation, generate_uncached, model, prefix, mx.random.key(0))
        return
    cache = PrefixCache(max_bytes=1 << 30) if path == "cached warm" else None
    if cache is not None:
        evaluated_generation(generate_cached, model, prefix, mx.random.key(0), cache=cache)
    result = benchmark(evaluated_generation, generate_cached, model, prefix, mx.random.key(0), cache=cache)
    if cache is not None:  # a warm run that missed would measure the cold path
        assert result.cache_hits == BATCH
