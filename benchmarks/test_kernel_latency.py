"""C9: speculative kernel latency at a Llama-3 vocabulary (V = 128,256, G = 4).

MLX is lazy: every timed call evaluates its outputs. Compare figures only
within one run; the device is recorded with each.
"""

from functools import partial

import mlx.core as mx
import pytest

from ncm_verify import speculative

VOCAB = 128_256
DRAFTS = 4


def make_chain_inputs(batch: int, seed: int = 0) -> tuple:
    keys = mx.random.split(mx.random.key(seed), 3)
    target = mx.softmax(mx.random.normal((batch, DRAFTS + 1, VOCAB), key=keys[0]), axis=-1)
    draft = mx.softmax(mx.random.normal((batch, DRAFTS, VOCAB), key=keys[1]), axis=-1)
    tokens = mx.random.categorical(mx.log(draft), key=keys[2]).astype(mx.int32)
    mx.eval(target, draft, tokens)
    return target, draft, tokens


def evaluated(function):
    return lambda *args, **kwargs: mx.eval(*function(*args, **kwargs))


@pytest.mark.benchmark(group="chain step")
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("mode", ["eager", "compiled", "validated"])
def test_chain_step_latency(benchmark, batch, mode):
    target, draft, tokens = make_chain_inputs(batch)
    step = partial(speculative.verify_chain, validate=mode == "validated")
    if mode == "compiled":
        step = mx.compile(partial(speculative.verify_chain, validate=False))
    benchmark.extra_info.update(batch=batch, vocab=VOCAB, drafts=DRAFTS, mode=mode)
    benchmark(evaluated(step), target, draft, tokens, key=mx.random.key(1))


@pytest.mark.benchmark(group="greedy step")
@pytest.mark.parametrize("batch", [1, 32])
def test_greedy_step_latency(benchmark, batch):
    target, _, tokens = make_chain_inputs(batch)
    benchmark.extra_info.update(batch=batch, vocab=VOCAB, drafts=DRAFTS)
    benchmark(evaluated(partial(speculative.verify_greedy, validate=False)), target, tokens)
