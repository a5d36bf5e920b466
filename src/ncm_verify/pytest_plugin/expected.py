"""Expected failures applied at collection: each row of `KNOWN_UPSTREAM_BUGS` marks its node a strict xfail.

As array-api-tests does with its xfails file: one table keyed by node id, applied by a hook, so a property
names no bug itself; a row whose property was collected but no node of it matched warns (a renamed
parameter or a typo would otherwise drop the mark in silence).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import pytest

from ncm_verify.mlx_lm_real.known_bugs import KNOWN_UPSTREAM_BUGS, expected_failure


class UnmatchedExpectedFailure(UserWarning):
    """A row of the expected-failure table whose property was collected without the node it names."""


def apply_expected_failures(items: list, table: Mapping[str, str] = KNOWN_UPSTREAM_BUGS) -> list[str]:
    """Mark each item `table` lists a strict xfail with its reason; the rows matching no item of a collected
    property (those of properties this run did not collect say nothing), sorted."""
    by_id = {item.nodeid: item for item in items}
    for nodeid, reason in table.items():
        if nodeid in by_id:
            by_id[nodeid].add_marker(pytest.mark.xfail(strict=True, reason=reason, raises=expected_failure(reason)))
    collected = {nodeid.split("[", 1)[0] for nodeid in by_id}
    return sorted(nodeid for nodeid in table if nodeid not in by_id and nodeid.split("[", 1)[0] in collected)


@pytest.hookimpl(tryfirst=True)  # before any deselection, so that a deselected node still counts as matched
def pytest_collection_modifyitems(items: list) -> None:
    unmatched = apply_expected_failures(items)
    if unmatched:
        warnings.warn(
            UnmatchedExpectedFailure(f"expected failures matching no collected node: {', '.join(unmatched)}"),
            stacklevel=1,
        )
