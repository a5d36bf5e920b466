"""Numeric evidence a property leaves for the report (largest difference vs tolerance).

The checks module feeds the run state's differences; the report plugin takes them after each test.
"""

from __future__ import annotations

from ncm_verify.harness.run_state import run_state


def record_difference(name: str, difference: float, tolerance: float) -> None:
    """Keep the largest `difference` seen for check `name` in the current test."""
    state = run_state()
    key = f"{state.test}::{name}"
    seen = state.differences.get(key)
    if seen is None or difference > seen["difference"]:
        state.differences[key] = {
            "test": state.test,
            "check": name,
            "difference": float(difference),
            "tolerance": float(tolerance),
        }
