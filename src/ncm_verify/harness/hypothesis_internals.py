"""The private Hypothesis names this suite reads or sets, all here: Hypothesis has no public API for them.

A Hypothesis upgrade that renames one breaks this module only (tests/test_plugin.py runs each).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from hypothesis import settings
from hypothesis.internal import constants_ast
from hypothesis.internal.conjecture import engine
from hypothesis.internal.conjecture.engine import ExitReason
from hypothesis.statistics import collector

from ncm_verify.evidence.chi_square import SHRINK_STOPPED

if ExitReason.very_slow_shrinking.value != SHRINK_STOPPED:  # the evidence states it plainly, for the report
    raise RuntimeError(f"Hypothesis's slow-shrinking stop reason is now {ExitReason.very_slow_shrinking.value!r}")

_SETTINGS = "_hypothesis_internal_use_settings"
"""Where `@given` keeps a test's settings; no public accessor (`settings.default` is the profile's, not the test's)."""
_GENERATED_SEED = "_hypothesis_internal_use_generated_seed"
"""The seed a non-derandomized test drew; public only inside the failure text Hypothesis prints."""


def settings_of(test) -> settings | None:
    """The settings `test` runs under (its own `@settings`, or the profile's when it had none); None: not `@given`."""
    return getattr(test, _SETTINGS, None)


@contextlib.contextmanager
def settings_replaced(test, replacement: settings) -> Iterator[None]:
    """Run `test` under `replacement` inside the block, then restore its own settings."""
    current = getattr(test, _SETTINGS)
    setattr(test, _SETTINGS, replacement)
    try:
        yield
    finally:
        setattr(test, _SETTINGS, current)


def set_shrink_time_limit(seconds: float) -> float:
    """Bound the seconds Hypothesis spends shrinking one failure: an engine global it reads at run time (no setting).

    An upgrade that drops the global fails here, not silently.
    """
    if not hasattr(engine, "MAX_SHRINKING_SECONDS"):
        raise RuntimeError("hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS is gone: bound shrinking anew")
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]  # declared int; a float bound works the same
    return engine.MAX_SHRINKING_SECONDS


def shrink_time_limit() -> float:
    return engine.MAX_SHRINKING_SECONDS


def generated_seed(test) -> int | None:
    """The seed `test`'s last run drew; None when derandomized, seeded, or never run."""
    return getattr(test, _GENERATED_SEED, None)


def explicit_examples(test) -> int:
    """How many `@example`s `test` carries (Hypothesis runs each before it generates any)."""
    return len(getattr(test, "hypothesis_explicit_examples", ()))


@contextlib.contextmanager
def statistics_reported_to(callback: Callable[[dict], None]) -> Iterator[None]:
    """Inside the block, each finished `@given` test's engine statistics also go to `callback` (Hypothesis's own
    statistics callback, for ``--hypothesis-show-statistics``, still gets them)."""
    outer = collector.value

    def keep(statistics):
        callback(statistics)
        if outer is not None:
            outer(statistics)

    with collector.with_value(keep):  # type: ignore[arg-type]  # typed by its default, None
        yield


def mines_constants_from(path: str) -> bool:
    """Whether Hypothesis draws constants from the module in file `path` (it reads the project's own modules and
    skips installed packages), so that importing it changes which examples a derandomized run draws."""
    return bool(constants_ast.is_local_module_file(path))
