"""The short summary printed at the end of `make verify`, with one block per failed property."""

from __future__ import annotations

from ncm_verify.report.model import Document, Failure, StatisticalRun, number

LISTED_STATISTICAL = 8
"""Statistical properties of the module's own listed one a line; past it (or reused) summed up (all in verify.md)."""

MESSAGE_LINES = 6
"""Lines of a failure's message printed; the whole message, example and reproduction are in verify.md."""
TERMINAL_BINS = 3
LINE_CHARS = 240


def clipped(text: str, limit: int = LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finding_block(f: Failure, index: int, total: int) -> list[str]:
    """A refuted (or inconclusive) research hypothesis in brief: a result of the run, not a failure. Its headline and
    rerun line; its table and power are in verify.md and verify.html."""
    message = [line.strip() for line in f.message.strip().splitlines() if line.strip()]
    headline = message[0].removeprefix("AssertionError: ") if message else "(no message)"
    what = "refutes" if f.outcome == "failed" else "is inconclusive for"
    return [
        f"  FINDING {index} of {total}: {f.nodeid} {what} {', '.join(f.claims) or 'its hypothesis'}",
        f"    {clipped(headline)} (its table and power: verify.md)",
        f"    rerun: {f.command}",
    ]


def failure_block(f: Failure, index: int | None, total: int | None, label: str = "FAILURE") -> list[str]:
    """One failed property: what failed, its message (or worst bins), its example, and the line that reruns it.
    `label` heads it: FAILURE (FIRST FAILURE as it is found); no `total`: no count."""
    kernels = f" on {', '.join(f.kernels)}" if f.kernels else ""
    kind = "by assertion" if f.kind == "assertion" else f"with {f.kind}"
    counted = f" {index} of {total}" if total else ""
    lines = [f"  {label}{counted}: {f.nodeid} ({', '.join(f.claims) or 'no claim'}), {f.outcome} {kind}{kernels}"]
    message = [line for line in f.message.strip().splitlines() if line.strip()]
    if f.plot is not None:  # a chi-square rejection: its headline, then its worst bins
        # a group's first line only counts its failures ("Hypothesis found 2 distinct failures."): keep the next too
        headline = message[:2] if message and message[0].startswith("Hypothesis found") else message[:1]
        lines += [f"    {clipped(line)}" for line in headline]
        lines.append(f"    worst bins of {len(f.plot.expected)} (outcome: expected vs observed):")
        lines += [
            f"      {clipped(str(row.outcome), 60)}: {number(row.expected)} vs "
            f"{number(row.observed)} (chi-square part {number(row.contribution)})"
            for row in f.plot.worst_bins[:TERMINAL_BINS]
        ]
    else:
        lines += [f"    {clipped(line)}" for line in message[:MESSAGE_LINES]]
        if len(message) > MESSAGE_LINES:
            lines.append(f"    ... {len(message) - MESSAGE_LINES} more lines in verify.md")
    if f.falsifying_example:
        example = " ".join(f.falsifying_example.split())  # Hypothesis's one argument a line, joined
        lines.append(f"    example: {clipped(example)}")
    if f.shrink_stopped:
        lines.append("    (shrinking stopped at the profile's time budget: the example is less shrunk)")
    lines.append(f"    rerun: {f.command}")
    return lines


def render_terminal(document: Document) -> str:
    """Policy, per-claim status, per statistical property n / min p / detectable TV."""
    verdict = document.verdict
    lines = [f"ncm-verify: run {verdict.verdict} (exit status {verdict.exit_status})"]
    lines += [f"  FAILED {reason}" for reason in verdict.reasons]
    policy = document.policy
    if policy is not None:
        lines.append(
            f"  policy: family-wise budget {number(policy.family_budget)} over "
            f"{policy.planned_tests} planned chi-square tests, per-test alpha {number(policy.alpha)}; "
            f"{policy.tests_run} run"
        )
    if document.reuse is not None:
        lines.append(f"  properties reused: {document.reuse}")
    lines += judged_lines(document)
    lines.append("  claims:")
    for claim in document.claims:
        status = f"finding: {claim.finding}" if claim.finding else claim.status
        reason = "" if claim.status == "shown" else ": see the findings below" if claim.finding else f": {claim.reason}"
        lines.append(
            clipped(
                f"    {claim.id:<4} {status:<26} {claim.property_count:>3} properties, "
                f"{claim.distinct_examples:>5} distinct examples{reason}"
            )
        )
    lines += statistical_lines(document)
    mutants = document.mutants
    lines.append(
        "  planted bugs: not run"
        if mutants is None
        else f"  planted bugs: {mutants.caught} of {mutants.total} caught"
        + (f"; SURVIVED: {', '.join(mutants.survived)}" if mutants.survived else "")
    )
    calibration = document.calibration
    lines.append(
        "  calibration: not run"
        if calibration is None
        else f"  calibration: {calibration.rejections} of {calibration.runs} rejected at alpha "
        f"{number(calibration.alpha)}, binomial p={number(calibration.binomial_p_value)}, "
        f"KS p={number(calibration.ks_uniform_p_value)}; "
        f"{calibration.power_cases} power cases"
    )
    lines += suite_checks_lines(document)
    if document.findings:
        lines.append("  findings (research hypotheses the data refute or leave open: results of the run, not faults):")
    for index, f in enumerate(document.findings, 1):
        lines += finding_block(f, index, len(document.findings))
    for index, f in enumerate(document.failures, 1):
        lines += failure_block(f, index, len(document.failures))
    return "\n".join(lines)


def judged_lines(document: Document) -> list[str]:
    """What the run judged of a module that provides only some names: its own names with their property runs,
    the names it inherits (not judged), and the claims by how much of them it provides."""
    judged = document.judged
    if not judged or not (judged["inherited"] or judged["missing"]):
        return []  # the module provides every name: the claims say it all
    own = [
        f"{name} ({entry['runs']} runs, " + (f"{entry['failed']} FAILED)" if entry["failed"] else "all passed)")
        for name, entry in judged["judged"].items()
    ]
    claims = judged["claims"]
    lines = [
        f"  judged, the module's own code: {', '.join(own) or 'nothing'}",
        f"  inherited, not judged ({len(judged['inherited'])}): {clipped(', '.join(judged['inherited']))}",
        f"  claims shown: {', '.join(claims.get('shown', [])) or '-'}; partly provided (its own code passed, the rest "
        f"inherited): {', '.join(claims.get('partly provided', [])) or '-'}; not provided: "
        f"{', '.join(claims.get('not provided', [])) or '-'}",
    ]
    if judged["not_judged"]:
        lines.insert(1, f"  its own, but no property called it: {', '.join(judged['not_judged'])}")
    return lines


def suite_checks_lines(document: Document) -> list[str]:
    """The suite's own checks in one line, apart from the verdict on the module (its failures listed)."""
    if not document.suite_checks:
        return []
    failed = [nodeid for nodeid, outcome in document.suite_checks if outcome in ("failed", "error")]
    counted = (
        "counted in this run's verdict: the module is the reference"
        if document.suite_checks_count
        else ("not a verdict on the module")
    )
    line = f"  the suite's own checks ({counted}): {len(document.suite_checks)} never called the module"
    return [line + (f"; {len(failed)} FAILED: {', '.join(failed)}" if failed else ", all passed")]


def statistical_summary(runs: list[StatisticalRun]) -> str:
    """Several statistical properties in one line: how many, their sizes, worst p-value and detectable deviation."""
    numbers = [r for r in runs if r.n_min is not None]
    if not numbers:
        return f"{len(runs)}"
    return (
        f"{len(runs)}, n={number(min(r.n_min for r in numbers))}..{number(max(r.n_max for r in numbers))}, "
        f"min p={number(min(r.p_min for r in numbers))}, min detectable TV at most "
        f"{number(max(r.min_detectable_tv for r in numbers))} "
        f"(raw law {number(max(r.raw_detectable_tv for r in numbers))})"
    )


def statistical_lines(document: Document) -> list[str]:
    """The statistical properties: those this run ran (one a line when few), apart from those reused from the
    reference's run (summed up, with the run they come from); each in full in verify.md."""
    own = [s for s in document.statistical if not s.reused]
    reused = [s for s in document.statistical if s.reused]
    if not document.statistical:
        return []
    lines = []
    if own and len(own) <= LISTED_STATISTICAL and reused:
        lines.append(f"  statistical properties run here: {len(own)}")
        lines += [
            clipped(
                f"    {s.nodeid}: {s.distinct_laws} distinct laws, n={number(s.n_min)}..{number(s.n_max)} "
                f"min p={number(s.p_min)} min detectable TV={number(s.min_detectable_tv)} "
                f"(raw law {number(s.raw_detectable_tv)})"
            )
            for s in own
        ]
    elif own:
        lines.append(f"  statistical properties run here: {statistical_summary(own)}; each in verify.md")
    if reused:
        sources = sorted({s.reused or "" for s in reused})
        lines.append(
            clipped(
                f"  statistical properties {sources[0] if len(sources) == 1 else 'reused'}: "
                f"{statistical_summary(reused)}"
            )
        )
    return lines
