"""Relations every sampling kernel keeps: same key, same output; batch == rows; compiled == eager."""

from functools import partial

import mlx.core as mx
import pytest
from hypothesis import given, note

from ncm_verify.harness import checks
from ncm_verify.harness.kernels import SAMPLING_KERNELS
from ncm_verify.harness.strategies import FLOAT_DTYPES, kernel_cases, seeds

pytestmark = pytest.mark.claim("C5", "C6")


def assert_same_outcome(first, second, *, label: str, call: str) -> None:
    for field in first._fields:
        checks.assert_equal(getattr(first, field), getattr(second, field), label=f"{label}: {field}", call=call)


@pytest.mark.claim("C5", "C6", "C13", "C16")
@given(case=kernel_cases(SAMPLING_KERNELS, dtypes=FLOAT_DTYPES), seed=seeds)
def test_the_same_key_gives_the_same_output(impl, case, seed):
    call = f"{case.spec.verify}(B={case.batch}, key=mx.random.key({seed}))"
    note(call)
    assert_same_outcome(
        case.call(impl, mx.random.key(seed)), case.call(impl, mx.random.key(seed)), label="two calls", call=call
    )


@pytest.mark.claim("C5", "C6", "C13", "C16")
@given(case=kernel_cases(SAMPLING_KERNELS, batch=6, dtypes=FLOAT_DTYPES), seed=seeds)
def test_a_batch_gives_the_outputs_of_its_rows_one_at_a_time(impl, case, seed):
    keys = mx.random.split(mx.random.key(seed), case.batch)
    call = f"{case.spec.verify}(B={case.batch}, key=split(key({seed}), B))"
    note(call)
    batched = case.call(impl, keys)
    for row in range(case.batch):
        alone = case.rows(row, row + 1).call(impl, keys[row : row + 1])
        assert_same_outcome(
            type(batched)(*(field[row : row + 1] for field in batched)), alone, label=f"row {row}", call=call
        )


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@pytest.mark.needs("traceable")
@given(case=kernel_cases(SAMPLING_KERNELS, dtypes=FLOAT_DTYPES), seed=seeds)
def test_the_compiled_kernel_equals_the_eager_kernel(impl, case, seed):
    call = f"mx.compile({case.spec.verify}, validate=False)(B={case.batch}, key({seed}))"
    note(call)
    compiled = mx.compile(partial(case.call, impl, validate=False))
    assert_same_outcome(
        compiled(mx.random.key(seed)), case.call(impl, mx.random.key(seed)), label="compiled", call=call
    )
