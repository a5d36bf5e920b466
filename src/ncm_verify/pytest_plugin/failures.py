"""Failure classification: a check that failed (a verdict) or an error of the run, the claims a failure bears on,
and the falsifying example, reproduction line and seed read from Hypothesis's text."""

from __future__ import annotations

import re

from ncm_verify.evidence import Failure
from ncm_verify.report.ledger import ledger_kernel_claims

MAX_MESSAGE_CHARS = 4000
ASSERTION = "assertion"
"""The failure kind of a property whose check failed: the one kind that is a verdict."""
ASSERTION_KINDS = ("AssertionError", "Failed")
"""Exceptions that mean a property's check failed; anything else is an error of the run, not a verdict."""

_FALSIFYING = re.compile(r"^(?:Falsifying (?:explicit )?example|Failing test case):.*?(?:^\)$|\Z)", re.M | re.S)
_HYPOTHESIS_TAIL = re.compile(r"^(?:Falsifying|Failing test case:|You can reproduce)", re.M)
"""Where Hypothesis's own lines start in a crash message; the report shows them apart."""
_REPRODUCE = re.compile(r"@reproduce_failure\(.*?\)")
_SEED = re.compile(r"@seed\((\d+)\)|--hypothesis-seed=(\d+)")


def failure_kind(excinfo) -> str:
    """'assertion' when a check of the property failed (in any example of a group), else the exception type."""
    error = excinfo.value
    members = getattr(error, "exceptions", None) or [error]
    kinds = {type(member).__name__ for member in members}
    if any(isinstance(member, AssertionError) or type(member).__name__ in ASSERTION_KINDS for member in members):
        return ASSERTION
    return ", ".join(sorted(kinds))


def group_message(error: BaseException) -> str | None:
    """Each failure of a Hypothesis group with its own message and falsifying example; None for one failure.

    The group's own text is one line ("found 2 distinct failures"): the checks' messages live in its members.
    """
    members = getattr(error, "exceptions", None)
    if not members:
        return None
    parts = [f"Hypothesis found {len(members)} distinct failures."]
    for number, member in enumerate(members, 1):
        notes = "\n".join(getattr(member, "__notes__", ()))
        parts.append(f"Failure {number} of {len(members)}: {type(member).__name__}: {member}\n{notes}".rstrip())
    return "\n\n".join(parts)[:MAX_MESSAGE_CHARS]


def attributed_claims(claims: list[str], names) -> list[str] | None:
    """The item's claims that the kernels of the failing example bear on (None: all of its claims)."""
    kernel_claims = ledger_kernel_claims()
    touched = sorted({kernel_claims[name] for name in names if name in kernel_claims} & set(claims))
    return touched or None


def failure_details(text: str) -> dict:
    """The falsifying example, ``@reproduce_failure`` line and seed in a failure's text (the first, in a group)."""
    falsifying = _FALSIFYING.search(text)
    reproduce = _REPRODUCE.search(text)
    seed = _SEED.search(text)
    return {
        "falsifying_example": falsifying.group(0).strip() if falsifying else None,
        "reproduce_failure": reproduce.group(0) if reproduce else None,
        "seed": next((g for g in seed.groups() if g), None) if seed else None,
    }


def report_text(report) -> str:
    """The crash message first, then the traceback (its ``E   `` prefixes removed), then sections."""
    sections = "\n".join(content for _, content in getattr(report, "sections", ()))
    traceback = re.sub(r"^E {1,7}", "", report.longreprtext, flags=re.M)
    return f"{crash_message(report)}\n{traceback}\n{sections}"


def crash_message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else report.longreprtext
    return message[:MAX_MESSAGE_CHARS]


def report_kind(report, call_kind: str | None) -> str | None:
    """The kind of a failed report: its call's (`failure_kind`, found where it ran) or the phase that erred."""
    kind = call_kind if report.when == "call" else "error in " + report.when
    if kind is None and str(report.longrepr).startswith("[XPASS(strict)]"):
        kind = ASSERTION  # a known upstream bug no longer shows: a verdict, so the run tells us
    return kind


def report_failure(
    report, kind: str | None, claims: list[str] | None, kernels: list[str], group: str | None
) -> Failure:
    """A failed report as the evidence keeps it; `group`: the Hypothesis group's message, if it was one."""
    return Failure(
        phase=report.when,
        kind=kind,
        claims=claims,
        kernels=kernels,
        message=group or _HYPOTHESIS_TAIL.split(crash_message(report), 1)[0].strip(),
        **failure_details(group or report_text(report)),
    )
