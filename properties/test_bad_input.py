"""Invalid input raises a ValueError whose message starts with the argument's name.

Every kernel meets every class of corruption that applies to one of its
arguments (parametrized, so no kernel can go unvisited); Hypothesis draws the
valid call, the argument and the variant of the corruption.
"""

import functools

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.harness import checks
from ncm_verify.harness.kernel_spec import KEYWORD_ROLES, BorrowingKernel
from ncm_verify.harness.kernels import KERNEL_SPECS
from ncm_verify.harness.strategies import FLOAT_DTYPES, kernel_cases

pytestmark = pytest.mark.claim("C5", "C6", "C7")


def role_of(kernel: str, name: str) -> str:
    return KERNEL_SPECS[kernel].argument(name).role


def wide_dtype(array: mx.array):
    """The NumPy dtype a corruption is written in: float64 for floating arrays, else int64."""
    return np.float64 if mx.issubdtype(array.dtype, mx.floating) else np.int64


def editable(array: mx.array) -> np.ndarray:
    """A C-ordered float64 or int64 copy (MLX may hand NumPy broadcast strides: reshape would copy)."""
    return np.ascontiguousarray(checks.as_numpy(array), dtype=wide_dtype(array))


def in_dtype(values, like: mx.array) -> mx.array:
    """`values` in `like`'s dtype, converted as a float64 or int64 NumPy copy of `like` would be."""
    return mx.array(np.asarray(values, dtype=wide_dtype(like)), dtype=like.dtype)


def set_entry(array: mx.array, row: int, value) -> mx.array:
    """`array` with the first entry of sequence `row` set to `value` (in its own dtype).

    Spliced in MLX: a round trip of the whole array through NumPy cost more than the kernel's checks.
    """
    rows = array.reshape(array.shape[0], -1)
    rows[row, 0] = in_dtype(value, array)
    return rows.reshape(array.shape)


def move_mass_negative(array: mx.array, context: dict) -> mx.array:
    """One entry set to -0.25, its row still summing to 1 (vocabularies hold two ids at least)."""
    rows = array.reshape(-1, array.shape[-1])
    first = editable(rows[0])
    first[-1] += first[0] + 0.25
    first[0] = -0.25
    rows[0] = in_dtype(first, array)
    return rows.reshape(array.shape)


def zero_row(array: mx.array, context: dict) -> mx.array:
    rows = array.reshape(-1, array.shape[-1])
    rows[0] = 0.0
    return rows.reshape(array.shape)


def extra_batch_row(array: mx.array, context: dict) -> mx.array:
    return mx.concatenate([array, array[:1]], axis=0)


def id_at_drafted_position(value):
    """An id corruption written where a draft is judged (a drafted sequence, first position)."""
    return lambda ids, context: set_entry(ids, context["drafted_row"], value(context))


CORRUPTIONS = {
    "nan": {
        "probs": {"nan": lambda a, c: set_entry(a, 0, np.nan)},
        "scores": {"nan": lambda a, c: set_entry(a, 0, np.nan)},
    },
    "infinite": {
        "probs": {"+inf": lambda a, c: set_entry(a, 0, np.inf), "-inf": lambda a, c: set_entry(a, 0, -np.inf)},
    },
    "negative": {"probs": {"negative entry, row sums to 1": move_mass_negative}},
    "unnormalised": {"probs": {"rows times 1.5": lambda a, c: a * 1.5, "a zero-mass row": zero_row}},
    "shape mismatch": {
        "probs": {
            "extra dimension": lambda a, c: a[None],
            "missing dimension": lambda a, c: a[0],
            "extra batch row": extra_batch_row,
            "empty batch": lambda a, c: a[:0],
            "scalar": lambda a, c: a.reshape(-1)[0],
        },
        "scores": {
            "extra dimension": lambda a, c: a[None],
            "missing dimension": lambda a, c: a[0],
            "extra batch row": extra_batch_row,
            "empty batch": lambda a, c: a[:0],
            "no rows (not even the bonus row)": lambda a, c: a[:, :0],
        },
        "ids": {
            "missing column": lambda ids, c: ids[..., :-1] if ids.ndim > 1 else ids[:-1],
            "extra batch row": extra_batch_row,
        },
        "nodes": {"missing column": lambda ids, c: ids[..., :-1], "extra batch row": extra_batch_row},
        "lengths": {"missing sequence": lambda n, c: n[:-1], "extra dimension": lambda n, c: n[None]},
    },
    "vocabulary mismatch": {
        "probs": {
            "extra vocabulary column": lambda a, c: mx.concatenate([a, mx.zeros_like(a[..., :1])], axis=-1),
            "missing vocabulary column": lambda a, c: a[..., :-1],
        },
    },
    "id out of range": {
        "ids": {
            "id equal to V": id_at_drafted_position(lambda c: c["vocab"]),
            "id far above V": id_at_drafted_position(lambda c: c["vocab"] + 2**16 + 3),
            "negative id below padding": id_at_drafted_position(lambda c: -2),
        },
        "lengths": {
            "a draft length above G": lambda n, c: n + c["max_draft"] + 1,
            "a negative draft length": lambda n, c: set_entry(n, 0, -1),
        },
    },
    "empty draft": {"ids": {"padding (-1) where a draft is judged": id_at_drafted_position(lambda c: -1)}},
    "wrong dtype": {
        "probs": {"integer dtype": lambda a, c: a.astype(mx.int32), "numpy array": lambda a, c: checks.as_numpy(a)},
        "scores": {"integer dtype": lambda a, c: a.astype(mx.int32), "numpy array": lambda a, c: checks.as_numpy(a)},
        "ids": {"float dtype": lambda ids, c: ids.astype(mx.float32), "numpy array": lambda ids, c: np.array(ids)},
        "nodes": {"float dtype": lambda ids, c: ids.astype(mx.float32), "numpy array": lambda ids, c: np.array(ids)},
        "lengths": {"float dtype": lambda n, c: n.astype(mx.float32), "numpy array": lambda n, c: np.array(n)},
        "key": {"float key": lambda k, c: k.astype(mx.float32), "numpy key": lambda k, c: np.array(k)},
    },
    "unknown option": {"option": {"a value it does not take": lambda value, c: f"not {value}"}},
    "bad key shape": {
        "key": {
            "one key too many": lambda k, c: mx.random.split(k, c["batch"] + 1),
            "three words": lambda k, c: mx.concatenate([k, k[:1]]),
            "a batch of key batches": lambda k, c: mx.random.split(k, c["batch"])[None],
        },
    },
}
"""Corruption class -> argument role -> variant -> ``corrupt(value, context) -> value``."""
RELATIONAL = {"shape mismatch", "vocabulary mismatch"}
"""Classes that break a relation between arguments: the argument or its shape partner is named."""


def accepted_names(kernel: str, name: str, corruption: str) -> list[str]:
    """Who the ValueError may name: the corrupted argument, or for a broken relation also its partners.

    A kernel's first argument sets B, G and V: whichever argument is checked against it next
    (draft_probs, num_draft, ...) is where a mismatch shows, so any of them may be named.
    """
    if corruption not in RELATIONAL:
        return [name]
    spec = KERNEL_SPECS[kernel]
    if name == spec.names[0]:
        return list(spec.names)
    return [name, *spec.argument(name).partners]


def applicable(kernel: str, corruption: str) -> list[str]:
    """The kernel's arguments that `corruption` can reach."""
    return [name for name in KERNEL_SPECS[kernel].names if role_of(kernel, name) in CORRUPTIONS[corruption]]


KERNEL_CORRUPTIONS = [
    (kernel, corruption) for kernel in KERNEL_SPECS for corruption in CORRUPTIONS if applicable(kernel, corruption)
]


def valid_arguments(spec, case) -> dict:
    """The named arguments of a valid call to `spec`'s kernel, from a case of its own or the one it borrows."""
    values = spec.valid_arguments(case) if isinstance(spec, BorrowingKernel) else (*case.args, case.num_draft)
    arguments = dict(zip([a.name for a in spec.arguments if a.role not in ("key", "option")], values))
    if spec.samples:
        arguments["key"] = mx.random.key(0)
    return arguments | {option.name: case.options[option.name] for option in spec.options}


def corruption_context(spec, name: str, case) -> dict:
    """What a corruption needs: the size of what the ids index, G, the batch and a drafted sequence."""
    indexed = case.args[case.spec.positions("probs", over=spec.argument(name).over)[0]]
    drafted = 0 if case.num_draft is None else int(np.argmax(np.array(case.num_draft)))
    max_draft = case.args[case.spec.positions("ids")[0]].shape[-1] if spec.lengths else 0
    return {"vocab": indexed.shape[-1], "drafted_row": drafted, "max_draft": max_draft, "batch": case.batch}


def call_kernel(impl, spec, arguments: dict):
    keywords = {a.name: arguments[a.name] for a in spec.arguments if a.role in KEYWORD_ROLES}
    positional = [arguments[a.name] for a in spec.arguments if a.name not in keywords]
    return getattr(impl, spec.verify)(*positional, **keywords)


@functools.cache
def valid_calls(kernel: str):
    """Valid calls of `kernel`, a strategy built once: one built per example was validated anew each time."""
    return kernel_cases((KERNEL_SPECS[kernel],), batch=4, dtypes=FLOAT_DTYPES, drafting=True)


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@pytest.mark.needs("value_error_contract")
@pytest.mark.parametrize("kernel, corruption", KERNEL_CORRUPTIONS)
@given(data=st.data())
def test_invalid_arguments_raise_a_value_error_naming_the_argument(impl, kernel, corruption, data):
    spec = KERNEL_SPECS[kernel]
    source = spec.cases_from if isinstance(spec, BorrowingKernel) else kernel
    case = data.draw(valid_calls(source), label="valid call")
    name = data.draw(st.sampled_from(tuple(applicable(kernel, corruption))), label="argument")
    variants = CORRUPTIONS[corruption][role_of(kernel, name)]
    how = data.draw(st.sampled_from(tuple(sorted(variants))), label="variant")
    arguments = valid_arguments(spec, case)
    arguments[name] = variants[how](arguments[name], corruption_context(spec, name, case))
    named = accepted_names(kernel, name, corruption)
    description = f"{spec.verify} with {name} corrupted ({corruption}: {how}), V={case.vocab}, {case.args[0].dtype}"
    note(description)
    checks.assert_raises_naming(lambda: call_kernel(impl, spec, arguments), named, description=description)
