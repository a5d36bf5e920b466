"""The report as a typed document: what the Markdown, HTML and terminal writers render, built once by
`report.document.build_document` and holding verify.json's content exactly (`Document.to_json`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


def number(value, digits: int = 3) -> str:
    """A number for a table cell: '-' for None, short scientific form when small or large."""
    if value is None:
        return "-"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


@dataclasses.dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: Sequence[Sequence[str]]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The run's one verdict; `has_parts` is false for a report rebuilt from JSON older than the parts."""

    verdict: str
    exit_status: int
    reasons: tuple[str, ...]
    has_parts: bool
    parts: Table


@dataclasses.dataclass(frozen=True)
class Claim:
    id: str
    status: str
    statement: str
    reason: str
    sources: tuple[str, ...]
    paths: tuple[str, ...]
    property_count: int
    distinct_examples: int
    properties: Table | None
    """The claim's property runs, one row each, in the order of `nodeids`; None when it has none."""
    nodeids: tuple[str, ...]
    finding: str | None = None
    """A research hypothesis's result ('hypothesis refuted', 'inconclusive at this scale'): a finding, not a failure."""


@dataclasses.dataclass(frozen=True)
class Bin:
    outcome: Any
    expected: float | None
    observed: float | None
    contribution: float | None


@dataclasses.dataclass(frozen=True)
class Plot:
    """One statistical property's chi-square record as a figure: expected vs observed counts per bin."""

    nodeid: str
    which: str
    """What the record is: the minimal counterexample's test, or the test with the smallest p-value."""
    name: str
    labels: tuple[str, ...]
    labelled: bool
    """Whether the labels name outcomes (else 'bin i')."""
    expected: tuple[float, ...]
    observed: tuple[float, ...]
    n: Any
    df: Any
    statistic: Any
    p_value: Any
    alpha: Any
    rejected: bool
    worst_bins: tuple[Bin, ...]
    failed_tests: int


@dataclasses.dataclass(frozen=True)
class StatisticalRun:
    nodeid: str
    distinct_laws: Any
    n_min: Any
    n_max: Any
    p_min: Any
    min_detectable_tv: Any
    raw_detectable_tv: Any
    reused: str | None = None
    """'reused from reference run <id> (<time>)' when the run carried it from the reference's, else None."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failed property run with its claims and reproduction; `plot` when a chi-square test rejected."""

    nodeid: str
    claims: tuple[str, ...]
    outcome: str
    kind: str | None
    kernels: tuple[str, ...]
    message: str
    falsifying_example: str | None
    reproduce_failure: str | None
    seed: str | None
    command: str
    shrink_stopped: bool
    plot: Plot | None


@dataclasses.dataclass(frozen=True)
class Histogram:
    """The calibration p-values in equal bins, beside the count a uniform law gives each."""

    counts: tuple[int, ...]
    labels: tuple[str, ...]
    uniform: tuple[float, ...]
    total: int


@dataclasses.dataclass(frozen=True)
class Summary:
    """The few figures the terminal summary prints beside the claims."""

    family_budget: Any
    planned_tests: Any
    alpha: Any
    tests_run: Any


@dataclasses.dataclass(frozen=True)
class Mutants:
    caught: int
    total: int
    survived: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Calibration:
    rejections: Any
    runs: Any
    alpha: Any
    binomial_p_value: Any
    ks_uniform_p_value: Any
    power_cases: int
    histogram: Histogram | None


@dataclasses.dataclass(frozen=True)
class Tables:
    claims: Table
    judged: Table | None
    policy: Table | None
    statistical: Table
    mlx_lm: Table | None
    mutants: Table
    calibration: Table
    bench: Table | None
    timing: Table | None
    environment: Table | None
    sources: Table


@dataclasses.dataclass(frozen=True)
class Document:
    impl: Any
    implementation_path: str | None
    implementation_sha256: str | None
    device: str
    """'MLX <version> on <device>', as each figure's caption states it."""
    verdict: Verdict
    claims: tuple[Claim, ...]
    failures: tuple[Failure, ...]
    """Failures counted against the module (and, on the reference's run, the suite's own checks)."""
    findings: tuple[Failure, ...]
    """Refuted research hypotheses: results of the run, printed apart, never failures."""
    suite_checks: tuple[tuple[str, str], ...]
    """(node id, outcome) of every property that never reached the module: the suite's own checks."""
    suite_checks_count: bool
    """Whether they count in the verdict: only when the module under test is the reference (the suite itself)."""
    judged: dict | None
    """`status.what_was_judged`: the module's own names judged, those inherited or missing, claims by status."""
    statistical: tuple[StatisticalRun, ...]
    plots: tuple[Plot, ...]
    """One per statistical property run, failed ones first."""
    unchecked: tuple[tuple[str, tuple[str, ...]], ...]
    """What this run did not check: (item, the node ids behind it)."""
    unclaimed: tuple[str, ...]
    reuse: str | None
    policy: Summary | None
    mutants: Mutants | None
    calibration: Calibration | None
    tables: Tables
    data: dict = dataclasses.field(repr=False)

    def to_json(self) -> dict:
        """verify.json: the report this document was built from."""
        return self.data

    @property
    def suite_checks_note(self) -> str:
        """What the suite's own checks are, and whether they count in this run's verdict."""
        counted = (
            "They count in this run's verdict: the module under test is the reference, the suite itself."
            if self.suite_checks_count
            else "They are not a verdict on the module under test: their outcome is the same for every module."
        )
        return f"Properties that never call the module under test. {counted}"


FINDINGS_TITLE = "Findings: research hypotheses the data refute (not failures)"
"""The heading of refuted hypotheses in every writer: results of the run, never failures."""
