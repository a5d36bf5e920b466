"""Test-only builders for the source NCM's drawn instances: away from initialisation, in a drawn dtype.

A model fresh from `make_concept_model` has every RMSNorm and QK-norm gain at 1 and every bias at 0, so a port that
skips a gain or a bias on one path only changes nothing there. `perturb_parameters` moves every floating parameter
(gains, biases, weights alike: the names are the port's own, so none is singled out), reproducibly from a seed.

Public API: `perturb_parameters(model, seed, scale)`, `in_dtype(config, dtype)`, `draw_concept_instance(data,
api)`, `model_dtype(model)`, `assert_concept_generations_agree(actual, expected, *, dtype, label, call)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import assert_close, assert_equal

__all__ = ["perturb_parameters", "in_dtype", "draw_concept_instance", "model_dtype", "assert_concept_generations_agree"]


def perturb_parameters(model, seed: int, scale: float) -> str:
    """Every floating parameter ``x`` of `model` becomes ``x (1 + scale n1) + scale s n2`` in place (``n1, n2``
    standard normal from `seed`; ``s`` the root mean square of ``x``, or 1 where ``x`` is constant: a gain or a
    bias). Returns how the model was changed (for a failure message); a model without MLX's ``parameters`` and
    ``update`` is left alone and says so."""
    if not (callable(getattr(model, "parameters", None)) and callable(getattr(model, "update", None))):
        return "not perturbed (the model has no parameters()/update())"
    rng = np.random.default_rng(seed)
    moved = []
    for name, value in sorted(tree_flatten(model.parameters()), key=lambda item: item[0]):
        if not isinstance(value, mx.array) or not mx.issubdtype(value.dtype, mx.floating):
            continue
        x = np.asarray(value.astype(mx.float32), dtype=np.float64)
        constant = x.size == 0 or bool(np.all(x == x.flat[0]))
        size = 1.0 if constant else float(np.sqrt(np.mean(x * x)))
        y = x * (1 + scale * rng.standard_normal(x.shape)) + scale * size * rng.standard_normal(x.shape)
        moved.append((name, mx.array(y.astype(np.float32)).astype(value.dtype)))
    model.update(tree_unflatten(moved))
    mx.eval(model.parameters())
    return f"perturb_parameters(model, seed={seed}, scale={scale})"


def in_dtype(config, dtype: str):
    """`config` with its ``dtype`` field set to `dtype`, where its type is a dataclass with one; else unchanged."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        if "dtype" in {field.name for field in dataclasses.fields(config)}:
            return dataclasses.replace(config, dtype=dtype)
    return config


def draw_concept_instance(data, api):
    """A drawn instance: the implementation's config (`api.concept_configs`) in a drawn dtype, in most examples
    moved from initialisation; returns (config, model, how to rebuild it, the perturbation or None)."""
    config = in_dtype(
        data.draw(api.concept_configs(), label="config"), data.draw(strategies.concept_dtypes, label="dtype")
    )
    model = api.make_concept_model(config)
    moved = data.draw(strategies.concept_perturbations, label="perturbation")
    how = f"make_concept_model({config})"
    if moved is not None:
        how += "; " + perturb_parameters(model, *moved)
    return config, model, how, moved


def model_dtype(model) -> mx.Dtype:
    """The dtype of `model`'s first parameter (float32 for a model without MLX's ``parameters``)."""
    params = getattr(model, "parameters", None)
    flat = cast(list[tuple[str, Any]], tree_flatten(params())) if callable(params) else []
    leaves = [value for _, value in flat if isinstance(value, mx.array)]
    return leaves[0].dtype if leaves else mx.float32


def assert_concept_generations_agree(actual, expected, *, dtype, label: str, call: str) -> None:
    """Two generations of the source NCM agree: logits within `dtype`'s tolerance, level by level; codes and tokens
    exactly wherever the logits they were drawn from are identical (same logits, same keys: the same draw).

    Where two computations of different shapes (cached and uncached) give logits that differ within the tolerance,
    a differing code is a near tie, not a bug the tolerance can judge: the later levels, drawn given other codes,
    are not compared (Hypothesis notes it). On MLX's CPU backend the two were bit-identical in every dtype measured.
    """
    from hypothesis import note

    pairs = [*zip(actual.codes, expected.codes, actual.logits, expected.logits)]
    pairs.append((actual.tokens, expected.tokens, actual.token_logits, expected.token_logits))
    for level, (a, e, logits_a, logits_e) in enumerate(pairs):
        name = "tokens" if level == len(pairs) - 1 else f"level {level} codes"
        what = "token logits" if level == len(pairs) - 1 else f"level {level} logits"
        assert_close(logits_a, logits_e, dtype=dtype, label=f"{label}: {what}", call=call)
        same_logits = np.array_equal(np.asarray(logits_a.astype(mx.float32)), np.asarray(logits_e.astype(mx.float32)))
        if not same_logits and not np.array_equal(np.asarray(a), np.asarray(e)):
            note(f"{label}: {name} differ where {what} differ within tolerance (a near tie); later ones not compared")
            return
        assert_equal(a, e, label=f"{label}: {name}", call=call)
