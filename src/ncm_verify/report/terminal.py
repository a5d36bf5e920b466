"""The short summary printed at the end of `make verify`."""

from __future__ import annotations

from ncm_verify.report import document as doc


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
            f"min p={doc.number(s['p_min'])} min detectable TV={doc.number(s['min_detectable_tv'])}"
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
    return "\n".join(lines)
