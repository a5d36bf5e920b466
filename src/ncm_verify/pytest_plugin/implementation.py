"""The implementation under test, loaded once per session, and the recorder of the calls a property makes into it."""

from __future__ import annotations

import functools
from types import ModuleType

import pytest

from ncm_verify.evidence import NOT_PROVIDED
from ncm_verify.harness.kernels import SAMPLING_KERNELS
from ncm_verify.protocol import (
    PROTOCOL_NAMES,
    ImplementationError,
    describe_implementation,
    load_implementation,
    origin_of,
    own_names,
)

_LOADED = pytest.StashKey["ModuleType | ImplementationError"]()


def loaded_or_error(config) -> ModuleType | ImplementationError:
    """The module ``--impl`` names, or why it does not load: imported on the session's first ask, then kept."""
    if _LOADED not in config.stash:
        try:
            config.stash[_LOADED] = load_implementation(config.getoption("--impl"))
        except ImplementationError as error:
            config.stash[_LOADED] = error
    return config.stash[_LOADED]


def implementation(config) -> ModuleType:
    """The module under test; its ImplementationError when it does not load."""
    found = loaded_or_error(config)
    if isinstance(found, ImplementationError):
        raise found
    return found


def provided_kernels(module: ModuleType | ImplementationError) -> tuple[str, ...] | None:
    """The sampling kernels the module provides itself, when that is not all (None: all, or it does not load).

    A kernel it re-exports from the reference gives no evidence (its runs read 'not provided'), so properties
    over every kernel draw among its own.
    """
    if isinstance(module, ImplementationError):
        return None
    own = own_names(module)
    every = tuple(kernel.name for kernel in SAMPLING_KERNELS)
    provided = tuple(k.name for k in SAMPLING_KERNELS if own.get(k.verify))
    return provided if provided and provided != every else None


def implementation_facts(config) -> dict:
    """The module under test as the report names it, or the argument and why it does not load."""
    argument = config.getoption("--impl")
    found = loaded_or_error(config)
    if isinstance(found, ImplementationError):
        return {"argument": argument, "error": str(found)}
    return describe_implementation(found, argument)


class RecordingImplementation:
    """The implementation module seen through a recorder: calls per protocol name, and which it provides itself.

    Functions are wrapped to count calls; classes count when looked up. A protocol name the module lacks
    skips the property as not provided (Hypothesis re-raises skips at once, so no example is wasted).
    """

    def __init__(self, module: ModuleType):
        self._module = module
        self._own = own_names(module)
        self.calls: dict[str, int] = {}
        self.example_names: set[str] = set()
        self.looked_up: set[str] = set()

    def begin_test(self) -> None:
        self.calls, self.example_names, self.looked_up = {}, set(), set()

    def begin_example(self) -> None:
        self.example_names = set()

    def record(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.example_names.add(name)

    def provenance(self, name: str) -> str:
        """Whose code `name` is, as a failure message says it: the module's own, or inherited from where."""
        origin = origin_of(getattr(self._module, name, None))
        return f"{name} is the module's own ({origin})" if self._own.get(name) else f"{name} inherited from {origin}"

    def call_records(self) -> dict[str, dict]:
        return {
            name: {"calls": n, "own": self._own.get(name, False), "origin": origin_of(getattr(self._module, name))}
            for name, n in sorted(self.calls.items())
        }

    def __getattr__(self, name: str):
        # every name read, called or not: a run may reuse a property's reference evidence only when each of them
        # is the reference's own object (run.reusable_properties); Hypothesis probes for hooks the module lacks
        if name in PROTOCOL_NAMES or hasattr(self._module, name):
            self.looked_up.add(name)
        value = getattr(self._module, name, None)
        if name not in PROTOCOL_NAMES:
            if value is None and not hasattr(self._module, name):
                raise AttributeError(name)
            return value
        if value is None:
            pytest.skip(f"{NOT_PROVIDED} {self._module.__name__}: it has no {name}")
        if isinstance(value, type) or not callable(value):
            self.record(name)
            return value

        @functools.wraps(value)
        def recorded(*args, **kwargs):
            self.record(name)
            return value(*args, **kwargs)

        return recorded


def mark_examples(item, recorder: RecordingImplementation | None):
    """Tell the recorder where each Hypothesis example starts, so a failure names the kernels its example called.

    Hypothesis calls ``test.hypothesis.inner_test`` for every example, the last time for the failing one.
    Returns the function that undoes the wrapping.
    """
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    if handle is None or recorder is None:
        return lambda: None
    inner = handle.inner_test
    # Hypothesis seeds a derandomized test from the source of `inner_test`, this wrapper: its text is kept as it
    # was (loop and name included) so that every property draws the examples it drew before.
    _RECORDER = [recorder]

    def example(*args, **kwargs):
        for recorder in _RECORDER:
            recorder.begin_example()
        return inner(*args, **kwargs)

    handle.inner_test = example

    def restore():
        handle.inner_test = inner

    return restore
