"""The probability checks answer valid rows in one host sync and still name every problem as the stepwise checks do.

`check_probabilities` asks one fused flag first and runs its stepwise checks only when the flag refuses the rows:
each condition below must make the flag refuse, or the stepwise message would never be seen.
"""

import re

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.reference._kernels import checks

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16, "float64": mx.float64}


@pytest.fixture(params=["masked sum", "bits maximum and sum"])
def value_path(request, monkeypatch):
    """Small inputs take the masked sum, large ones their bits' maximum and the sum: every check runs under both."""
    if request.param == "bits maximum and sum":
        monkeypatch.setattr(checks, "MASKED_CHECK_MAX_ENTRIES", 0)
    return request.param


def rows(shape=(2, 3, 8)) -> np.ndarray:
    """Float64 rows that sum to 1 exactly in every dtype (multiples of 1/8)."""
    values = np.zeros(shape)
    values[..., :4] = [0.5, 0.25, 0.125, 0.125]
    return values


def refused(values, dtype=mx.float32, name="draft_probs") -> str:
    with pytest.raises(ValueError) as raised:
        checks.check_probabilities(name, mx.array(values, dtype=dtype), values.ndim)
    return str(raised.value)


@pytest.mark.parametrize("dtype", DTYPES)
def test_valid_rows_of_each_dtype_pass_and_come_back_unchanged(dtype, value_path):
    probs = mx.array(rows(), dtype=DTYPES[dtype])
    assert checks.check_probabilities("target_probs", probs, 3) is probs


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["NaN", "+inf", "-inf"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_nan_or_infinite_entry_is_named_as_such(value, dtype, value_path):
    values = rows()
    values[1, 2, 5] = value
    assert refused(values, DTYPES[dtype]) == "draft_probs: contains NaN or infinite values"


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_negative_entry_in_a_row_summing_to_one_is_named_as_negative(dtype, value_path):
    values = rows()
    values[0, 1, :2] = [0.75, -0.25]
    assert refused(values, DTYPES[dtype]) == "draft_probs: contains negative probabilities"


def test_a_negative_zero_is_no_negative_probability(value_path):
    values = rows()
    values[0, 0, 7] = -0.0
    checks.check_probabilities("p", mx.array(values, dtype=mx.float32), 3)


@pytest.mark.parametrize(
    "scale, gap", [(1.5, "0.5"), (0.0, "1"), (1 + 2**-9, "0.00195")], ids=["times 1.5", "a zero row", "just over"]
)
def test_rows_that_do_not_sum_to_one_are_named_with_their_largest_gap(scale, gap, value_path):
    values = rows()
    values[1, 0] *= scale
    assert refused(values, mx.float16) == f"draft_probs: rows do not sum to 1 (largest gap {gap})"


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-4), ("float16", 2.0**-10), ("bfloat16", 2.0**-7)])
def test_a_row_may_stray_from_one_by_its_dtype_s_tolerance_and_no_further(dtype, tolerance, value_path):
    values = rows(shape=(1, 1, 8))
    values[0, 0, 0] = 0.5 + tolerance / 2  # representable at 0.5 in each dtype
    checks.check_probabilities("q", mx.array(values, dtype=DTYPES[dtype]), 3)
    values[0, 0, 0] = 0.5 + tolerance * 4
    assert refused(values, DTYPES[dtype], "q").startswith("q: rows do not sum to 1 (largest gap ")


def test_the_first_problem_in_check_order_is_named_when_a_row_has_several(value_path):
    values = rows()
    values[0, 0, :3] = [np.nan, -0.5, 3.0]
    assert refused(values) == "draft_probs: contains NaN or infinite values"
    values[0, 0, 0] = 0.5
    assert refused(values) == "draft_probs: contains negative probabilities"


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool_"])
def test_probabilities_of_a_non_floating_dtype_are_refused_by_dtype(dtype):
    probs = mx.array(rows()).astype(getattr(mx, dtype))
    with pytest.raises(
        ValueError, match=f"^p: probabilities must be floating point, got {re.escape(str(probs.dtype))}$"
    ):
        checks.check_probabilities("p", probs, 3)


def test_probabilities_not_held_in_an_mx_array_are_refused_by_type():
    with pytest.raises(ValueError, match="^p: expected an mx.array, got ndarray$"):
        checks.check_probabilities("p", rows(), 3)


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 8), "p: expected 3 dimensions, got shape (2, 8)"),
        ((0, 3, 8), "p: empty batch or vocabulary, got shape (0, 3, 8)"),
        ((2, 3, 0), "p: empty batch or vocabulary, got shape (2, 3, 0)"),
    ],
)
def test_probabilities_of_the_wrong_shape_are_refused_by_shape(shape, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        checks.check_probabilities("p", mx.zeros(shape), 3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_drafted_token_of_zero_half_precision_probability_is_refused_and_a_subnormal_one_is_not(dtype):
    """The drafted entries are gathered before their cast to float32: a subnormal q must stay positive."""
    values = rows(shape=(1, 2, 8))
    values[0, :, 6] = 2.0**-20 if dtype == "float16" else 2.0**-130
    draft = mx.array(values, dtype=DTYPES[dtype])
    checks.check_drafted_under("draft_tokens", draft, mx.array([[6, 0]]), None)
    with pytest.raises(ValueError, match="^draft_tokens: a drafted token has draft probability 0"):
        checks.check_drafted_under("draft_tokens", draft, mx.array([[0, 5]]), None)
    checks.check_drafted_under("draft_tokens", draft, mx.array([[0, 5]]), mx.array([[True, False]]))
