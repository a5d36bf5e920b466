"""The short summary printed at the end of `make verify`, with one block per failed property."""

from __future__ import annotations

from ncm_verify.harness.hypothesis_internals import SHRINK_STOPPED
from ncm_verify.report import document as doc

MESSAGE_LINES = 6
"""Lines of a failure's message printed; the whole message, example and reproduction are in verify.md."""
TERMINAL_BINS = 3
LINE_CHARS = 240


def clipped(text: str, limit: int = LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_block(p: dict, number: int, total: int) -> list[str]:
    """One failed property: what failed, its message (or worst bins), its example, and the line that reruns it."""
    failure = p["failure"]
    kernels = f" on {', '.join(failure['kernels'])}" if failure.get("kernels") else ""
    kind = "by assertion" if failure.get("kind") == "assertion" else f"with {failure.get('kind')}"
    lines = [
        f"  FAILURE {number} of {total}: {p['nodeid']} ({', '.join(p['claims']) or 'no claim'}), {p['outcome']} "
        f"{kind}{kernels}"
    ]
    message = [line for line in (failure.get("message") or "").strip().splitlines() if line.strip()]
    statistics = p.get("statistics")
    if statistics and statistics["failed_tests"]:  # a chi-square rejection: its headline, then its worst bins
        # a group's first line only counts its failures ("Hypothesis found 2 distinct failures."): keep the next too
        headline = message[:2] if message and message[0].startswith("Hypothesis found") else message[:1]
        lines += [f"    {clipped(line)}" for line in headline]
        record, _ = doc.plotted_record(statistics)
        lines.append(f"    worst bins of {len(record['expected'])} (outcome: expected vs observed):")
        lines += [
            f"      {clipped(str(row.get('outcome')), 60)}: {doc.number(row.get('expected'))} vs "
            f"{doc.number(row.get('observed'))} (chi-square part {doc.number(row.get('contribution'))})"
            for row in doc.worst_bins(record)[:TERMINAL_BINS]
        ]
    else:
        lines += [f"    {clipped(line)}" for line in message[:MESSAGE_LINES]]
        if len(message) > MESSAGE_LINES:
            lines.append(f"    ... {len(message) - MESSAGE_LINES} more lines in verify.md")
    if failure.get("falsifying_example"):
        example = " ".join(failure["falsifying_example"].split())  # Hypothesis's one argument a line, joined
        lines.append(f"    example: {clipped(example)}")
    if p.get("stopped_because") == SHRINK_STOPPED:
        lines.append("    (shrinking stopped at the profile's time budget: the example is less shrunk)")
    lines.append(f"    rerun: {failure['command']}")
    return lines


def render_terminal(report: dict) -> str:
    """Policy, per-claim status, per statistical property n / min p / detectable TV."""
    run = report["run"]
    lines = [f"ncm-verify: run {run['verdict']} (exit status {run['exit_status']})"]
    lines += [f"  FAILED {reason}" for reason in run["reasons"]]
    policy, budget = report["policy"], report["budget"]
    if policy is not None:
        lines.append(
            f"  policy: family-wise budget {doc.number(policy['family_budget'])} over "
            f"{policy['planned_tests']} planned chi-square tests, per-test alpha {doc.number(policy['alpha'])}; "
            f"{budget['chi_square_tests_run']} run"
        )
    reuse = (report.get("run_facts") or {}).get("reuse")
    if reuse:
        lines.append(f"  properties reused: {reuse['why']}")
    lines.append("  claims:")
    for claim in report["claims"]:
        lines.append(
            f"    {claim['id']:<4} {claim['status']:<14} {claim['property_count']:>3} properties, "
            f"{claim['distinct_examples']:>5} distinct examples"
            + ("" if claim["status"] == "shown" else f": {claim['reason'][:300]}")
        )
    rows = doc.statistical_rows(report)
    if rows:
        lines.append("  statistical properties:")
    for p in rows:
        s = p["statistics"]
        lines.append(
            f"    {p['nodeid']}: {s['distinct_laws']} distinct laws, "
            f"n={doc.number(s['n_min'])}..{doc.number(s['n_max'])} "
            f"min p={doc.number(s['p_min'])} min detectable TV={doc.number(s['min_detectable_tv'])} "
            f"(raw law {doc.number(s['raw_detectable_tv'])})"
        )
    mutants = report["mutants"]
    lines.append(
        "  planted bugs: not run"
        if mutants is None
        else f"  planted bugs: {mutants['caught']} of {len(mutants['mutants'])} caught"
        + (f"; SURVIVED: {', '.join(mutants['survived'])}" if mutants["survived"] else "")
    )
    calibration = report["calibration"]
    lines.append(
        "  calibration: not run"
        if calibration is None
        else f"  calibration: {calibration['rejections']} of {calibration['runs']} rejected at alpha "
        f"{doc.number(calibration['alpha'])}, binomial p={doc.number(calibration['binomial_p_value'])}, "
        f"KS p={doc.number(calibration.get('ks_uniform_p_value'))}; "
        f"{len(calibration.get('power_cases') or [])} power cases"
    )
    failed = doc.failures(report)
    for number, p in enumerate(failed, 1):
        lines += failure_block(p, number, len(failed))
    return "\n".join(lines)
