"""The short summary printed at the end of `make verify`, with one block per failed property."""

from __future__ import annotations

from ncm_verify.report.model import Document, Failure, number

MESSAGE_LINES = 6
"""Lines of a failure's message printed; the whole message, example and reproduction are in verify.md."""
TERMINAL_BINS = 3
LINE_CHARS = 240


def clipped(text: str, limit: int = LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_block(f: Failure, index: int | None, total: int | None, label: str = "FAILURE") -> list[str]:
    """One failed property: what failed, its message (or worst bins), its example, and the line that reruns it.
    `label` heads it: FAILURE, or FINDING for a refuted hypothesis (a result, not a failure); no `total`: no count."""
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
        lines.append(
            f"    {claim.id:<4} {claim.status:<14} {claim.property_count:>3} properties, "
            f"{claim.distinct_examples:>5} distinct examples"
            + ("" if claim.status == "shown" else f": {claim.reason[:300]}")
        )
    if document.statistical:
        lines.append("  statistical properties:")
    for s in document.statistical:
        lines.append(
            f"    {s.nodeid}: {s.distinct_laws} distinct laws, "
            f"n={number(s.n_min)}..{number(s.n_max)} "
            f"min p={number(s.p_min)} min detectable TV={number(s.min_detectable_tv)} "
            f"(raw law {number(s.raw_detectable_tv)})"
        )
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
        lines.append("  findings (research hypotheses the data refute: results of the run, not failures):")
    for index, f in enumerate(document.findings, 1):
        lines += failure_block(f, index, len(document.findings), "FINDING")
    for index, f in enumerate(document.failures, 1):
        lines += failure_block(f, index, len(document.failures))
    return "\n".join(lines)


def judged_lines(document: Document) -> list[str]:
    """What the run judged of a module that provides only some names: its own names with their property runs,
    the names it inherits (not judged), and the claims by how much of them it provides."""
    judged = document.judged
    if not judged or not (judged["inherited"] or judged["missing"]):
        return []  # the module provides every name: the claims say it all
    own = [f"{name} ({entry['runs']} runs, {entry['failed']} failed)" for name, entry in judged["judged"].items()]
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
    return [line + (f"; {len(failed)} failed: {', '.join(failed)}" if failed else ", none failed")]
