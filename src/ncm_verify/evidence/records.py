"""What a run leaves in the report folder, typed: each property's record, its failure, the evidence document and
the orchestrator's run record. Every writer and reader goes through these; the JSON keeps the field names.

`from_json` takes a document as written (older or partial ones too: a field absent reads as its default), and
`to_json` gives the dict written, keys in the order the files have always had.
"""

from __future__ import annotations

import builtins
import dataclasses
import enum
from typing import Any

EVIDENCE_SCHEMA = "ncm-verify/evidence/1"
NOT_PROVIDED = "not provided by"
"""How a skip for a protocol name the module lacks begins; the record's outcome is then `Outcome.NOT_PROVIDED`."""
NOT_APPLICABLE = "not applicable:"
"""How a skip for a capability the module declares it lacks begins; the outcome is `Outcome.NOT_APPLICABLE`."""
INCONCLUSIVE = "inconclusive at this scale"
"""How a research hypothesis's skip begins when its test could not have seen the literature's effect (its detectable
difference is larger): the outcome is `Outcome.INCONCLUSIVE`, a finding, neither a pass nor a failure."""


class Outcome(str, enum.Enum):
    """A property run's outcome as the evidence records it."""

    PASSED = "passed"
    FAILED = "failed"
    """a check of the property failed (by assertion): a verdict"""
    ERROR = "error"
    """anything else raised: an error of the run, not a verdict"""
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    """a strict xfail that failed as expected: a known upstream bug"""
    NOT_PROVIDED = "not provided"
    NOT_APPLICABLE = "not applicable"
    INCONCLUSIVE = "inconclusive"
    """a research hypothesis's experiment too weak to see the effect it tests: a finding of the run"""

    def __str__(self) -> str:  # the plain word in messages and f-strings, on every Python version
        return self.value


FAILING_OUTCOMES = (Outcome.FAILED, Outcome.ERROR)
REUSABLE_OUTCOMES = (Outcome.PASSED, Outcome.XFAILED)
"""Outcomes a port's run may carry from the reference's evidence; anything else runs again."""


def property_id(nodeid: str) -> str:
    """A node id without its parametrization: the form ledger.json lists."""
    return nodeid.split("[", 1)[0]


@dataclasses.dataclass
class HypothesisSummary:
    """What Hypothesis ran for one property: examples outside shrinking, and why it stopped."""

    examples: int | None = None
    failing_examples: int | None = None
    invalid_examples: int | None = None
    test_cases_per_phase: dict[str, int] | None = None
    stopped_because: str | None = None
    explicit_examples: int | None = None
    generated_seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> HypothesisSummary | None:
        return None if data is None else cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass
class Failure:
    """Why a property run failed or erred, with what reproduces it."""

    phase: str | None = None
    kind: str | None = None
    """'assertion' (a check failed), else the exception type(s) or 'error in <phase>'"""
    claims: list[str] | None = None
    """the claims the failing example's kernels bear on (None: all of the property's)"""
    kernels: list[str] = dataclasses.field(default_factory=list)
    message: str | None = None
    falsifying_example: str | None = None
    reproduce_failure: str | None = None
    seed: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Failure | None:
        if data is None:
            return None
        return cls(
            phase=data.get("phase"),
            kind=data.get("kind"),
            claims=data.get("claims"),
            kernels=list(data.get("kernels") or []),
            message=data.get("message"),
            falsifying_example=data.get("falsifying_example"),
            reproduce_failure=data.get("reproduce_failure"),
            seed=data.get("seed"),
        )


@dataclasses.dataclass
class PropertyRecord:
    """One property run (a node id) as evidence.json keeps it.

    `calls`, `looked_up` and `statistical_tests_per_example` come from the run's call phase: absent (None, and not
    written) when the property never reached it; `calls` None also means older evidence without call records.
    """

    nodeid: str
    property: str = ""
    outcome: Outcome = Outcome.PASSED
    duration_s: float | None = None
    claims: list[str] = dataclasses.field(default_factory=list)
    hypothesis: HypothesisSummary | None = None
    stats: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """the chi-square records of `harness.stats.record`, in order"""
    differences: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """the largest difference per check (`harness.evidence.record_difference`), by check name"""
    failure: Failure | None = None
    skip_reason: str | None = None
    calls: dict[str, dict[str, Any]] | None = None
    """protocol name -> {"calls", "own", "origin"}"""
    looked_up: list[str] | None = None
    statistical_tests_per_example: int | None = None
    xfail_reason: str | None = None
    reused: dict[str, Any] | None = None
    """the reference run this record was carried from ({"run_id", "ran", "key"}), when it did not run here"""

    def __post_init__(self) -> None:
        self.property = self.property or property_id(self.nodeid)
        self.outcome = Outcome(self.outcome)

    @builtins.property  # `property` is a field here
    def failing(self) -> bool:
        return self.outcome in FAILING_OUTCOMES

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "nodeid": self.nodeid,
            "property": self.property,
            "outcome": self.outcome.value,
            "duration_s": self.duration_s,
            "claims": self.claims,
            "hypothesis": self.hypothesis.to_json() if self.hypothesis else None,
            "stats": self.stats,
            "differences": self.differences,
            "failure": self.failure.to_json() if self.failure else None,
            "skip_reason": self.skip_reason,
        }
        if self.calls is not None:
            data.update(
                calls=self.calls,
                looked_up=self.looked_up,
                statistical_tests_per_example=self.statistical_tests_per_example,
            )
        for name in ("xfail_reason", "reused"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PropertyRecord:
        return cls(
            nodeid=data["nodeid"],
            property=data.get("property") or "",
            outcome=Outcome(data["outcome"]),
            duration_s=data.get("duration_s"),
            claims=list(data.get("claims") or []),
            hypothesis=HypothesisSummary.from_json(data.get("hypothesis")),
            stats=list(data.get("stats") or []),
            differences=list(data.get("differences") or []),
            failure=Failure.from_json(data.get("failure")),
            skip_reason=data.get("skip_reason"),
            calls=data.get("calls"),
            looked_up=data.get("looked_up"),
            statistical_tests_per_example=data.get("statistical_tests_per_example"),
            xfail_reason=data.get("xfail_reason"),
            reused=data.get("reused"),
        )


@dataclasses.dataclass
class Budget:
    """Chi-square tests run against those the policy planned; over plan with no failure fails the run."""

    planned_tests: int | None = None
    chi_square_tests_run: int = 0
    within_plan: bool = True
    run_failed_by_budget: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Budget | None:
        if data is None:
            return None
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclasses.dataclass
class Evidence:
    """evidence.json: one pytest run of properties, its policy, budget, timing and every property's record."""

    schema: str = EVIDENCE_SCHEMA
    run_id: str | None = None
    impl: str | None = None
    implementation: dict[str, Any] | None = None
    """`protocol.describe_implementation` of the module under test, or {"argument", "error"}"""
    checkpoint: dict[str, Any] | None = None
    profile: str | None = None
    exit_status: int | None = None
    environment: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    """`harness.stats.Policy.describe` of the run's statistical policy"""
    budget: Budget | None = None
    properties: list[PropertyRecord] = dataclasses.field(default_factory=list)
    timing: dict[str, Any] | None = None
    """CPU seconds by process and part (`pytest_plugin.timing`)"""

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(
            budget=self.budget.to_json() if self.budget else None,
            properties=[record.to_json() for record in self.properties],
        )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Evidence | None:
        if data is None:
            return None
        fields = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        fields.update(
            budget=Budget.from_json(data.get("budget")),
            properties=[PropertyRecord.from_json(entry) for entry in data.get("properties") or []],
        )
        return cls(**fields)


@dataclasses.dataclass
class Phase:
    """One phase of `ncm-verify verify`: its exit status, whether that carries a verdict (`problem`), its time."""

    name: str
    exit_status: int
    seconds: float | None = None
    cpu_s: float | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Phase:
        return cls(data["name"], data["exit_status"], data.get("seconds"), data.get("cpu_s"), data.get("problem"))


@dataclasses.dataclass
class RunRecord:
    """run.json: what `ncm-verify verify` knew of its run, kept so that a rebuilt report gives the run's verdict."""

    run_id: str | None = None
    phases: list[Phase] | None = None
    """None: no run record, so the phases are unknown (never passed)"""
    suite_commit: str | None = None
    suite_dirty: bool | None = None
    selftests: dict[str, Any] | None = None
    """the self-tests' cache key, when they ran and whether reused"""
    reuse: dict[str, Any] | None = None
    """how many properties were carried from the reference's evidence, and why"""
    ledger_problems: list[str] = dataclasses.field(default_factory=list)
    required: list[str] = dataclasses.field(default_factory=list)
    """claim ids and protocol families the run demands the module provide itself (``--require``)"""
    rerun_from: dict[str, str] | None = None
    """{"root", "python"}, absolute: where a rerun line runs pytest from (the checkout's root or an installed
    suite's, and the interpreter that ran), so that the line works from any folder"""

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["phases"] = None if self.phases is None else [phase.to_json() for phase in self.phases]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RunRecord:
        """The record as written; an empty one (phases unknown) for a folder without run.json."""
        data = data or {}
        phases = data.get("phases")
        return cls(
            run_id=data.get("run_id"),
            phases=None if phases is None else [Phase.from_json(phase) for phase in phases],
            suite_commit=data.get("suite_commit"),
            suite_dirty=data.get("suite_dirty"),
            selftests=data.get("selftests"),
            reuse=data.get("reuse"),
            ledger_problems=list(data.get("ledger_problems") or []),
            required=list(data.get("required") or []),
            rerun_from=data.get("rerun_from") or data.get("installed"),  # "installed": run.json before the rename
        )
