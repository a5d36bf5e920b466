"""The report's section "mlx-lm <version> under test": each mlx-lm property run, on each decoder and
model, as pass / known upstream bug / fail.

A known upstream bug is a strict expected failure (`pytest.mark.xfail(strict=True)`)
that failed as expected: a finding about mlx-lm, neither a pass nor a failure of
this run. If mlx-lm fixes it, the strict mark turns it into a failure (XPASS).
"""

from __future__ import annotations

from ncm_verify.evidence import Outcome, PropertyRecord

PROPERTY_FILE = "properties/test_mlx_lm_loop.py"
VERDICTS = {
    Outcome.PASSED: "pass",
    Outcome.XFAILED: "known upstream bug",
    Outcome.FAILED: "fail",
    Outcome.ERROR: "fail",
    Outcome.SKIPPED: "not run",
}


def parametrisation(nodeid: str) -> str:
    """'mlx-lm-sliding-window llama' from '...::test_x[mlx-lm-sliding-window llama]'."""
    return nodeid.split("[", 1)[1].rstrip("]") if "[" in nodeid else ""


def make_rows(nodes: list[PropertyRecord]) -> list[dict]:
    """One row per run of an mlx-lm property, in the order of the evidence."""
    rows = []
    for node in nodes:
        if not node.nodeid.startswith(PROPERTY_FILE):
            continue
        rows.append(
            {
                "property": node.property.split("::", 1)[1],
                "case": parametrisation(node.nodeid),
                "verdict": VERDICTS.get(node.outcome, node.outcome.value),
                "reason": node.xfail_reason or (node.failure and node.failure.message) or node.skip_reason or "",
                "examples": node.hypothesis.examples if node.hypothesis else None,
            }
        )
    return rows


def summarize(nodes: list[PropertyRecord], environment: dict | None) -> dict | None:
    """The section's data for verify.json; None when no mlx-lm property ran."""
    rows = make_rows(nodes)
    if not rows:
        return None
    counts = {verdict: sum(row["verdict"] == verdict for row in rows) for verdict in dict.fromkeys(VERDICTS.values())}
    return {"version": (environment or {}).get("mlx_lm"), "rows": rows, "counts": counts}
