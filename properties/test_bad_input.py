"""Invalid input raises a ValueError whose message starts with the argument's name."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.strategies import kernel_cases

pytestmark = pytest.mark.claim("C5", "C6", "C7")

ARGUMENTS = {
    "chain": ("target_probs", "draft_probs", "draft_tokens", "num_draft", "key"),
    "greedy": ("target", "draft_tokens", "num_draft"),
    "factorized": ("target_probs", "draft_probs", "draft_tokens", "key"),
    "latent_chain": (
        "target_latent_probs", "draft_latent_probs", "draft_latent",
        "target_token_probs", "draft_token_probs", "draft_tokens", "key",
    ),
    "residual_distribution": ("p", "q"),
}
SHAPE_PARTNERS = {
    "target_probs": "draft_probs", "target": "draft_tokens", "target_latent_probs": "draft_latent_probs",
    "target_token_probs": "draft_token_probs", "p": "q",
}
"""Arguments whose shape is checked against the first: a mismatch there names the second."""


def set_first(array: mx.array, value) -> mx.array:
    flat = np.array(array).astype(np.float64 if mx.issubdtype(array.dtype, mx.floating) else np.int64).ravel()
    flat[0] = value
    return mx.array(flat.reshape(array.shape), dtype=array.dtype)


def move_mass_negative(array: mx.array) -> mx.array:
    """One entry set to -0.25, its row still summing to 1 (vocabularies hold two ids at least)."""
    values = np.array(array).astype(np.float64)
    row = values.reshape(-1, values.shape[-1])
    row[0, -1] += row[0, 0] + 0.25
    row[0, 0] = -0.25
    return mx.array(row.reshape(values.shape), dtype=array.dtype)


PROBABILITY_CORRUPTIONS = {
    "nan": lambda a: set_first(a, np.nan),
    "infinite": lambda a: set_first(a, np.inf),
    "negative": move_mass_negative,
    "unnormalised": lambda a: a * 1.5,
    "extra dimension": lambda a: a[None],
    "missing dimension": lambda a: a[0],
    "integer dtype": lambda a: a.astype(mx.int32),
    "numpy array": lambda a: np.array(a),
    "extra vocabulary column": lambda a: mx.concatenate([a, mx.zeros_like(a[..., :1])], axis=-1),
    "extra batch row": lambda a: mx.concatenate([a, a[:1]], axis=0),
    "empty batch": lambda a: a[:0],
    "scalar": lambda a: a.reshape(-1)[0],
}
SCORE_CORRUPTIONS = {
    k: PROBABILITY_CORRUPTIONS[k] for k in ("nan", "extra dimension", "integer dtype", "numpy array", "empty batch")
}
ROW_CORRUPTIONS = {"no rows": lambda a: a[:, :0]}
"""Chain and greedy targets need the bonus row at least."""
ID_CORRUPTIONS = {
    "id equal to the vocabulary": "vocab",
    "negative id below padding": -2,
    "float dtype": "float",
    "missing column": "shape",
    "numpy array": "numpy",
}
NUM_DRAFT_CORRUPTIONS = {"above G": "above", "negative": -1, "wrong shape": "shape", "float dtype": "float"}
MISMATCHES = {
    "extra vocabulary column", "extra batch row", "missing column", "wrong shape", "extra dimension",
    "missing dimension",
}
"""Corruptions that break a relation between arguments: the argument or its shape partner is named."""
KEY_CORRUPTIONS = {
    "float key": lambda k: k.astype(mx.float32),
    "wrong shape": lambda k: mx.concatenate([k, k[:1]]),
}


def corrupt_ids(ids: mx.array, how, vocab: int, row: int) -> object:
    if how == "float":
        return ids.astype(mx.float32)
    if how == "shape":
        return ids[..., :-1] if ids.ndim > 1 else ids[:-1]
    if how == "numpy":
        return np.array(ids)
    values = np.array(ids).astype(np.int64)
    values.reshape(len(values), -1)[row, 0] = vocab if how == "vocab" else how
    return mx.array(values, dtype=ids.dtype)


def vocabulary_of(kernel: str, name: str, arguments: dict) -> int:
    if kernel == "latent_chain" and name == "draft_latent":
        return arguments["target_latent_probs"].shape[-1]
    source = {"chain": "target_probs", "greedy": "target", "factorized": "target_probs"}.get(kernel, "target_token_probs")
    return arguments[source].shape[-1]


@st.composite
def invalid_calls(draw):
    """A valid kernel call with exactly one argument corrupted: (kernel, argument, how, arguments)."""
    kernel = draw(st.sampled_from(sorted(ARGUMENTS)), label="kernel")
    source = {"greedy": "chain", "residual_distribution": "factorized"}.get(kernel, kernel)
    case = draw(
        kernel_cases(batch=4, kernels=(source,)).filter(
            lambda c: c.num_draft is None or int(mx.max(c.num_draft).item()) > 0
        ),
        label="valid case",
    )
    names = ARGUMENTS[kernel]
    values = list(case.args) + ([case.num_draft] if case.num_draft is not None else [])
    if kernel == "greedy":
        values = [case.args[0], case.args[2], case.num_draft]
    if kernel == "residual_distribution":
        values = [case.args[0], case.args[1]]
    arguments = dict(zip([n for n in names if n != "key"], values))
    arguments["key"] = mx.random.key(0)
    name = draw(st.sampled_from(names), label="argument")
    value = arguments[name]
    if name == "key":
        how = draw(st.sampled_from(sorted(KEY_CORRUPTIONS)), label="corruption")
        arguments[name] = KEY_CORRUPTIONS[how](value)
    elif name == "num_draft":
        how = draw(st.sampled_from(sorted(NUM_DRAFT_CORRUPTIONS)), label="corruption")
        change = NUM_DRAFT_CORRUPTIONS[how]
        arguments[name] = (
            value.astype(mx.float32) if change == "float" else value[:-1] if change == "shape"
            else value + arguments["draft_tokens"].shape[1] + 1 if change == "above" else mx.full(value.shape, change, mx.int32)
        )
    elif mx.issubdtype(value.dtype, mx.integer):
        how = draw(st.sampled_from(sorted(ID_CORRUPTIONS)), label="corruption")
        drafted = 0 if case.num_draft is None else int(np.argmax(np.array(case.num_draft)))
        arguments[name] = corrupt_ids(value, ID_CORRUPTIONS[how], vocabulary_of(kernel, name, arguments), drafted)
    else:
        table = SCORE_CORRUPTIONS if kernel == "greedy" else PROBABILITY_CORRUPTIONS
        if name in ("target_probs", "target") and kernel in ("chain", "greedy"):
            table = {**table, **ROW_CORRUPTIONS}
        how = draw(st.sampled_from(sorted(table)), label="corruption")
        arguments[name] = table[how](value)
    return kernel, name, how, arguments


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@given(call=invalid_calls())
def test_invalid_arguments_raise_a_value_error_naming_the_argument(impl, call):
    kernel, name, how, arguments = call
    function_name = kernel if kernel == "residual_distribution" else f"verify_{kernel}"
    note(f"{function_name} with {name} corrupted: {how}")
    positional = [arguments[n] for n in ARGUMENTS[kernel] if n not in ("key", "num_draft")]
    keywords = {n: arguments[n] for n in ("key", "num_draft") if n in ARGUMENTS[kernel]}
    named = name
    if how in MISMATCHES and name in SHAPE_PARTNERS:
        named = f"{name}|{SHAPE_PARTNERS[name]}"
    with pytest.raises(ValueError, match=rf"^({named}):"):
        getattr(impl, function_name)(*positional, **keywords)
