"""Numeric evidence a property leaves for the report (largest difference vs tolerance).

The report plugin reads `DIFFERENCES` after each test; the checks module feeds it.
"""

from __future__ import annotations

import os

DIFFERENCES: dict[str, dict] = {}


def current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]


def record_difference(name: str, difference: float, tolerance: float) -> None:
    """Keep the largest `difference` seen for check `name` in the current test."""
    key = f"{current_test()}::{name}"
    seen = DIFFERENCES.get(key)
    if seen is None or difference > seen["difference"]:
        DIFFERENCES[key] = {
            "test": current_test(),
            "check": name,
            "difference": float(difference),
            "tolerance": float(tolerance),
        }
