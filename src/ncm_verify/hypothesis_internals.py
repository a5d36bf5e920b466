"""The private Hypothesis attributes this suite reads or sets, all here: Hypothesis has no public API for them.

A Hypothesis upgrade that renames one breaks this module only (tests/test_plugin.py runs each).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hypothesis import settings

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


def generated_seed(test) -> int | None:
    """The seed `test`'s last run drew; None when derandomized, seeded, or never run."""
    return getattr(test, _GENERATED_SEED, None)
