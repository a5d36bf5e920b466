"""What a session runs and in which order: the chi-square tests it plans, the properties it deselects (thorough-only,
or carried from the reference's evidence), the order xdist's workers take them in, and the inventory of markers."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ncm_verify.evidence import PropertyRecord, property_id
from ncm_verify.harness.hypothesis_internals import explicit_examples, settings_of
from ncm_verify.report.ledger import THOROUGH_PROFILE

THOROUGH_ONLY = "thorough_only"
EXPERIMENT = "experiment"
"""Properties marked so run under `THOROUGH_PROFILE` alone (the ledger's `thorough_properties`)."""

_REUSE = pytest.StashKey[dict]()


def planned_tests_of(item) -> int:
    """Chi-square tests one collected property will run at most (0 unless statistical)."""
    from hypothesis import settings

    marker = item.get_closest_marker("statistical")
    if marker is None:
        return 0
    test = getattr(item, "obj", None)
    test_settings = settings_of(test) or settings.default
    return marker.kwargs.get("tests", 1) * (test_settings.max_examples + explicit_examples(test))


def planned_statistical_tests(items) -> int:
    """Chi-square tests the collected statistical properties will run at most."""
    return max(sum(planned_tests_of(item) for item in items), 1)


def exact_first(items: list) -> list:
    """Properties without a sampling plan before the statistical ones (stable otherwise): a session that stops at
    its first catch meets the cheaper checks first, a sampled one costing 10-100k outcomes an example."""
    return sorted(items, key=lambda item: planned_tests_of(item) > 0)


def matches(nodeid: str, named: str) -> bool:
    """Whether node `nodeid` is the node, the parametrised property or the file `named` names."""
    return nodeid == named or nodeid.startswith((f"{named}[", f"{named}::"))


def named_first(items: list, named: list[str]) -> list:
    """The items `named` names (node ids, properties without their parameters, files), in that order, before the
    rest (stable otherwise); a name that matches no item is a usage error, never a silently unrouted sweep."""
    unmatched = [name for name in named if not any(matches(item.nodeid, name) for item in items)]
    if unmatched:
        raise pytest.UsageError(f"--ncm-first: no collected property is named {', '.join(unmatched)}")

    def rank(item) -> int:
        return next((place for place, name in enumerate(named) if matches(item.nodeid, name)), len(named))

    return sorted(items, key=rank)


def balanced_order(items: list, workers: int, *, exact_first: bool = False) -> list:
    """Statistical properties (the long ones: each example samples 10-100k outcomes) first, largest plan first,
    dealt in turn to the `workers` contiguous blocks xdist's work stealing first hands out (the first worker gets
    n // workers of the pending list, the next n // (workers - 1) of the rest, ...), so that the longest start at
    once on different workers instead of queueing behind one another. With `exact_first` (a port's run, where the
    first failure matters more than the last second) every worker starts on the exact properties instead."""
    # stable: the rest keep collection order
    ranked = sorted(items, key=lambda item: (exact_first and planned_tests_of(item) > 0, -planned_tests_of(item)))
    sizes, left = [], len(items)
    for remaining in range(workers, 0, -1):
        sizes.append(left // remaining)
        left -= sizes[-1]
    blocks: list[list] = [[] for _ in sizes]
    for rank, item in enumerate(ranked):
        free = [b for b in range(workers) if len(blocks[b]) < sizes[b]]
        blocks[min(free, key=lambda b: (b - rank) % workers)].append(item)
    return [item for block in blocks for item in block]


def deselect(config, items: list, dropped: list) -> None:
    """Remove `dropped` from the session's `items`, as pytest's own deselection does (and reports)."""
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]


def thorough_only(items: list) -> list:
    """The items this run's profile leaves out: marked `THOROUGH_ONLY`, unless the profile is the thorough one."""
    if os.environ.get("HYPOTHESIS_PROFILE", "dev") == THOROUGH_PROFILE:
        return []
    return [item for item in items if item.get_closest_marker(THOROUGH_ONLY)]


def experiments(items: list) -> list:
    """The items marked `EXPERIMENT`: research on the suite's own models, which no module under test can change."""
    return [item for item in items if item.get_closest_marker(EXPERIMENT)]


def read_reuse(config) -> dict:
    """What `--ncm-reuse` carries: {"source": the reference run, "policy": its policy, "properties": entries}.

    Read once per session: collection and the evidence collector both ask.
    """
    if _REUSE not in config.stash:
        path = config.getoption("--ncm-reuse")
        config.stash[_REUSE] = json.loads(Path(path).read_text(encoding="utf-8")) if path else {"properties": []}
    return config.stash[_REUSE]


def reused_entries(config) -> dict[str, PropertyRecord]:
    """Node id -> the reference evidence carried into this run, stamped with the run it came from."""
    reuse = read_reuse(config)
    records = (PropertyRecord.from_json(entry) for entry in reuse["properties"])
    return {record.nodeid: dataclasses.replace(record, reused=reuse["source"]) for record in records}


def claims_of(item) -> list[str]:
    """The claim ids of the item's closest ``@pytest.mark.claim``, sorted, once each.

    A property's own marker replaces its module's: a protocol property (C11) may sit among distribution ones.
    """
    marker = item.get_closest_marker("claim")
    return sorted({str(arg) for arg in marker.args}) if marker else []


def collected_inventory(items) -> list[dict]:
    """What ``--ncm-inventory`` writes: each collected test with its markers."""
    return [
        {
            "nodeid": item.nodeid,
            "property": property_id(item.nodeid),
            "claims": claims_of(item),
            "statistical": item.get_closest_marker("statistical") is not None,
        }
        for item in items
    ]
