"""A ``verify_*`` step after validation, its uniforms drawn inside, as one ``mx.compile``d call.

Eager, its ~40 small ops cost more than the arithmetic at B = 1 (mlx-lm compiles its samplers alike).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from ncm_verify.reference._kernels.checks import check_key, per_sequence_keys


def compile_step(apply: Callable, uniforms: Callable, columns: int) -> Callable:
    """``apply(*arrays, uniforms(keys, (2, columns)))`` called as ``step(*arrays, keys)``, compiled.

    `keys` is one key (split per sequence inside the compiled step) or one per sequence.
    """

    def step(*arrays_and_keys):
        *arrays, keys = arrays_and_keys
        batch = arrays[0].shape[0]
        keys = mx.random.split(keys, batch) if keys.shape == (2,) else keys
        return tuple(apply(*arrays, uniforms(keys, (2, columns))))

    return mx.compile(step)


def run_step(step: Callable, arrays: tuple, key) -> tuple:
    """`step` (from `compile_step`) on `arrays` with the uniforms `key` gives, once the key is checked."""
    batch = arrays[0].shape[0]
    check_key(key, batch)
    keys = key if batch else per_sequence_keys(key, batch)  # split inside the compiled step
    return step(*arrays, keys)
