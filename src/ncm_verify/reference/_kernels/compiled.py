"""A ``verify_*`` step after validation, its uniforms drawn inside, as one ``mx.compile``d call; or with its input
checks fused into the same graph, answered by the one host sync that evaluates the step.

Eager, its ~40 small ops cost more than the arithmetic at B = 1 (mlx-lm compiles its samplers alike).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from ncm_verify.reference._kernels.checks import check_key, per_sequence_keys


def compile_step(
    apply: Callable, uniforms: Callable | None, columns: int, checks: tuple[Callable, Callable] | None = None
) -> Callable:
    """``apply(*arrays, uniforms(keys, (2, columns)))`` called as ``step(*arrays, keys)``, compiled.

    `keys` is one key (split per sequence inside the compiled step) or one per sequence. `uniforms` None: `apply`
    draws none and the step takes no keys. `checks` ``(flags, guard)``: the step also returns ``flags(*arrays)``,
    a lazy "every value valid", and runs on ``guard(*arrays)``, the arrays with ids and counts clamped into range
    (a no-op on valid input), so that input the flag refuses is never read out of bounds.
    """

    def step(*arrays_and_keys):
        arrays, keys = (arrays_and_keys[:-1], arrays_and_keys[-1]) if uniforms else (arrays_and_keys, None)
        extra: tuple = ()
        if checks is not None:
            flags, guard = checks
            extra = (flags(*arrays),)
            arrays = guard(*arrays)
        if uniforms is None:
            return (*apply(*arrays), *extra)
        batch = arrays[0].shape[0]
        keys = mx.random.split(keys, batch) if keys.shape == (2,) else keys
        return (*apply(*arrays, uniforms(keys, (2, columns))), *extra)

    return mx.compile(step)


def step_keys(arrays: tuple, key) -> tuple:
    """`key` checked, as a step from `compile_step` takes it (one key is split inside the compiled step)."""
    batch = arrays[0].shape[0]
    check_key(key, batch)
    return (key if batch else per_sequence_keys(key, batch),)


def run_step(step: Callable, arrays: tuple, key) -> tuple:
    """`step` (from `compile_step`) on `arrays` with the uniforms `key` gives, once the key is checked."""
    return step(*arrays, *step_keys(arrays, key))


def run_checked(step: Callable, arguments: tuple, stepwise: Callable[[], object], unchecked: Callable) -> tuple:
    """A checked `step`'s outputs on `arguments` (with its keys), evaluated with its validity flag in one host sync.

    Input the flag refuses goes to `stepwise`, which raises the first problem's ValueError in argument order; if
    it raises none (the fused pass doubted what the stepwise checks accept), ``unchecked()`` gives the result.
    """
    try:
        *outputs, ok = step(*arguments)
        mx.eval(*outputs, ok)
    except ValueError:  # a trace that refuses the input: the stepwise checks name its first problem, if any
        stepwise()
        raise
    if ok.item():
        return tuple(outputs)
    stepwise()
    return tuple(unchecked())
