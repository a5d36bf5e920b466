"""The report's tables, each made once from verify.json's content: rows of strings that the writers render as
they are (`report.document.build_document` puts them in the document)."""

from __future__ import annotations

from ncm_verify.evidence.thresholds import MAX_FILTERED_FRACTION, MIN_DISTINCT_EXAMPLES
from ncm_verify.report.model import Table, number


def policy_table(report: dict) -> Table | None:
    policy, budget = report["policy"], report["budget"]
    if policy is None:
        return None
    rows = [
        ("family-wise false-failure budget", number(policy["family_budget"])),
        *(
            [
                ("of which the calibration self-tests", number(policy["selftest_budget"])),
                ("left to the chi-square properties", number(policy["property_budget"])),
            ]
            if "selftest_budget" in policy
            else []
        ),
        ("chi-square tests planned (Sidak split)", number(policy["planned_tests"])),
        ("per-test share of the budget", number(policy["per_test_share"])),
        ("per-test alpha (share x fraction)", f"{number(policy['alpha'])} (x{policy['alpha_fraction']})"),
        ("bins pooled below expected count", number(policy["min_expected"])),
        ("power at the detectable deviation", number(policy["power"])),
        ("power safety factor", number(policy["power_safety"])),
        ("target total-variation deviation", number(policy["target_tv"])),
        ("target deviation of whole decoding loops", number(policy.get("loop_target_tv"))),
        ("smallest alpha any run reaches (most tests planned)", number(policy.get("min_alpha"))),
        ("chi-square tests run", number(budget["chi_square_tests_run"])),
        ("budget check", budget["note"]),
    ]
    return Table("Statistical policy", ("setting", "value"), rows)


def verdict_table(report: dict) -> Table:
    """Each part of the run's verdict: passed, or why not."""
    rows = [
        (name, "passed" if part["passed"] else "failed", "; ".join(part["reasons"]) or "-")
        for name, part in (report["run"].get("parts") or {}).items()
    ]
    return Table(
        "Verdict by part",
        ("part", "verdict", "why"),
        rows,
        f"run verdict: {report['run']['verdict']} (exit status {report['run']['exit_status']})",
    )


def claims_table(report: dict) -> Table:
    rows = [
        (c["id"], c["status"], number(c["property_count"]), number(c["distinct_examples"]), c["statement"], c["reason"])
        for c in report["claims"]
    ]
    note = (
        f"shown needs, per property, {MIN_DISTINCT_EXAMPLES} distinct examples (distinct laws "
        f"for a statistical one), a chi-square test if statistical, at most "
        f"{MAX_FILTERED_FRACTION:.0%} of its examples filtered, and a call into code the module "
        "provides itself"
    )
    return Table("Claims", ("claim", "status", "properties", "distinct examples", "statement", "why"), rows, note)


def judged_table(report: dict) -> Table | None:
    """Each protocol name the module has: judged as its own code (property runs, failures), its own but reached by
    no property, inherited, or missing; None for a report without the implementation's facts."""
    judged = report.get("judged")
    if not judged:
        return None
    rows = [
        (name, "own code, judged", f"{entry['runs']} property runs, {entry['failed']} failed")
        for name, entry in judged["judged"].items()
    ]
    rows += [(name, "own code, not judged", "no property called it") for name in judged["not_judged"]]
    rows += [(name, "inherited", "not judged: the reference's code") for name in judged["inherited"]]
    claims = judged["claims"]
    note = (
        f"claims shown: {', '.join(claims.get('shown', [])) or '-'}; partly provided (every property on its own "
        f"code passed, the rest reached inherited names): {', '.join(claims.get('partly provided', [])) or '-'}; "
        f"not provided: {', '.join(claims.get('not provided', [])) or '-'}; missing names: "
        f"{len(judged['missing'])}"
    )
    if report.get("required"):
        note += f"; required by this run: {', '.join(report['required'])}"
    return Table("What this run judged", ("name", "whose code", "evidence"), rows, note)


def properties_table(claim: dict) -> Table:
    rows = []
    for p in claim["properties"]:
        difference = p["largest_difference"]
        rows.append(
            (
                p["nodeid"],
                p["outcome"],
                f"{number(p['distinct_examples'])} of {number(p['examples'])}",
                "; ".join(
                    [p["implementation_use_reason"] or p["implementation_use"], *p["insufficient"]]
                    + ([p["reused"]] if p.get("reused") else [])
                ),
                number(p["duration_s"]),
                number(p["statistics"]["tests"]) if p["statistics"] else "-",
                f"{difference['check']}: {number(difference['difference'])} vs {number(difference['tolerance'])}"
                if difference
                else "-",
            )
        )
    header = (
        "property",
        "outcome",
        "distinct examples",
        "evidence",
        "seconds",
        "chi-square tests",
        "largest difference vs tolerance",
    )
    return Table(f"{claim['id']}: properties", header, rows)


def property_runs(report: dict, key: str) -> list[dict]:
    """Every property run whose `key` is set, once, in claim order."""
    seen, rows = set(), []
    for claim in report["claims"]:
        for p in claim["properties"]:
            if p[key] and p["nodeid"] not in seen:
                seen.add(p["nodeid"])
                rows.append(p)
    return rows


def statistical_rows(report: dict) -> list[dict]:
    """Every statistical property run once, in claim order."""
    return property_runs(report, "statistics")


def statistical_table(report: dict) -> Table:
    rows = [
        (
            p["nodeid"],
            number(p["statistics"]["tests"]),
            number(p["statistics"]["distinct_laws"]),
            f"{number(p['statistics']['n_min'])}-{number(p['statistics']['n_max'])}",
            number(p["statistics"]["p_min"]),
            number(p["statistics"]["alpha"]),
            number(p["statistics"]["min_detectable_tv"]),
            number(p["statistics"]["pooled_mass_max"]),
            number(p["statistics"]["raw_detectable_tv"]),
            number(p["statistics"]["failed_tests"]),
        )
        for p in statistical_rows(report)
    ]
    header = (
        "property",
        "tests",
        "distinct laws",
        "n",
        "min p-value",
        "alpha",
        "min detectable TV",
        "pooled mass",
        "raw-law TV",
        "rejections",
    )
    note = (
        "min detectable TV: the smallest total-variation deviation of the binned law each test detects with the "
        "policy's power; binning cannot see mass moved inside the pooled remainder, so on the raw law a test "
        "detects TV of at least min detectable TV + pooled mass (raw-law TV, its worst test)."
    )
    return Table("Statistical properties", header, rows, note)


def mutants_table(report: dict) -> Table:
    mutants = report["mutants"]
    if mutants is None:
        return Table("Planted bugs", ("mutant",), [], "not run: no mutants.json (run the self-tests)")
    rows = [
        (
            m["name"],
            "caught" if m["caught"] else "BROKEN SWEEP" if m.get("sweep_error") else "SURVIVED",
            ", ".join(m["claims"]) or "-",
            ", ".join(m["caught_by"]) or ("refused by the verdict" if m["caught"] else "-"),
            m["description"] + (f" (errors, not catches: {', '.join(m['errors'])})" if m.get("errors") else ""),
        )
        for m in mutants["mutants"]
    ]
    note = f"{mutants['caught']} of {len(rows)} planted bugs caught (profile {mutants['profile']})"
    return Table("Planted bugs", ("mutant", "verdict", "claims", "caught by", "bug"), rows, note)


def calibration_table(report: dict) -> Table:
    calibration = report["calibration"]
    if calibration is None:
        return Table("Calibration", ("measure",), [], "not run: no calibration.json (run the self-tests)")
    rows = [
        ("runs of the correct kernels", number(calibration["runs"])),
        ("rejections at alpha", f"{number(calibration['rejections'])} at {number(calibration['alpha'])}"),
        ("binomial p-value of that count", number(calibration["binomial_p_value"])),
        ("KS p-value of uniform p-values", number(calibration.get("ks_uniform_p_value"))),
        ("each check fails when its p-value is below", number(calibration.get("check_budget"))),
    ]
    for case in calibration.get("power_cases") or []:
        if case.get("needed") is not None:
            bar = f"needs {number(case['needed'])}"
        else:  # inside the pooled remainder: the test is blind, rejections at the size
            bar = f"at most {number(case.get('allowed'))} allowed"
        raw = case.get("raw_rejections")
        beside = "" if raw is None else f"; at the raw model's boundary (TV {number(case.get('raw_tv'))}) {raw}"
        rows.append(
            (
                f"power: {case.get('name')}, TV {number(case.get('tv'))}",
                f"{number(case.get('rejections'))} of {number(case.get('runs'))} rejected, {bar}{beside} "
                f"(n {number(case.get('n'))}, df {number(case.get('df'))}, alpha {number(case.get('alpha'))})",
            )
        )
    # the size figures the README points to: generated by the self-tests, never copied by hand
    for name, ratio in ((calibration.get("size") or {}).get("ratios") or {}).items():
        # six digits: an exact plan's 0.99997 must not read as 1, its bound
        rows.append((f"largest size / alpha, df 1-5 summed: {name}", f"{ratio:.6g}"))
    for row in (calibration.get("size_large_df") or {}).get("rows") or []:
        rows.append((f"size / alpha bound, df {row['df']} importance-sampled: {row['profile']}", number(row["ratio"])))
    cache = calibration.get("cache")
    note = f"self-tests from cache key {cache['key']} (ran {cache['ran']})" if cache else ""
    return Table("Calibration and power", ("measure", "value"), rows, note)


def environment_table(report: dict) -> Table | None:
    environment = report["environment"]
    if environment is None:
        return None
    rows = [("implementation under test", str(report["impl"])), ("Hypothesis profile", str(report["profile"]))]
    facts = report.get("run_facts") or {}
    implementation = facts.get("implementation") or {}
    for key in ("path", "sha256", "defines", "inherits"):
        if implementation.get(key) is not None:
            value = implementation[key]
            rows.append((f"implementation {key}", ", ".join(value) if isinstance(value, list) else str(value)))
    checkpoint = facts.get("checkpoint") or {}
    for entry in checkpoint.get("judged") or ([checkpoint] if checkpoint else []):
        rows.append(("checkpoint (model-level path (b))", f"{entry.get('path')} (sha256 {entry.get('sha256')})"))
    for key in ("run_id", "suite_commit", "suite_dirty"):
        if facts.get(key) is not None:
            rows.append((key.replace("_", " "), str(facts[key])))
    if facts.get("reuse"):
        rows.append(("properties reused", facts["reuse"]["why"]))
    rows += [(key, str(value)) for key, value in environment.items()]
    return Table("Environment", ("item", "value"), rows)


def timing_table(report: dict) -> Table | None:
    """Where the run's time went: each phase's wall and CPU seconds, and the properties phase's CPU by part."""
    phases = (report.get("run_facts") or {}).get("phases") or []
    timing = report.get("timing")
    if not phases and not timing:
        return None
    reused = ((report.get("run_facts") or {}).get("selftests") or {}).get("reused")
    rows = [
        (
            phase["name"] + (" (reused: when it ran)" if reused and phase["name"] != "properties" else ""),
            number(phase.get("seconds")),
            number(phase.get("cpu_s")) if phase.get("cpu_s") is not None else "-",
        )
        for phase in phases
    ]
    if timing:
        workers = sum(p["role"] == "worker" for p in timing["processes"])
        rows += [(f"properties: {part}", "-", number(cpu)) for part, cpu in timing["parts_cpu_s"].items()]
        note = (
            f"CPU seconds are user + system of every process of a phase; the properties phase's parts are summed "
            f"over its {workers or 1} pytest process{'es' if workers > 1 else ''} (and controller), examples split "
            "by Hypothesis's own timings of each example"
        )
    else:
        note = "CPU seconds are user + system of every process of a phase"
    return Table("Where the time went", ("phase", "wall s", "CPU s"), rows, note)


def bench_table(report: dict) -> Table | None:
    bench = report["bench"]
    if bench is None:
        return None
    rows = [
        (b["name"], number(b["median_s"]), number(b["mean_s"]), number(b["stddev_s"]), number(b["rounds"]))
        for b in bench["benchmarks"]
    ]
    note = f"from {bench['file']} ({bench['datetime']}); measured by make bench, not asserted"
    return Table("Benchmarks (C9)", ("benchmark", "median s", "mean s", "stddev s", "rounds"), rows, note)


def mlx_lm_table(report: dict) -> Table | None:
    """The mlx-lm section (`mlx_lm_section.summarize`) as a table; None when it has no rows."""
    section = report.get("mlx_lm")
    if not section:
        return None
    counts = ", ".join(f"{count} {verdict}" for verdict, count in section["counts"].items() if count)
    return Table(
        f"mlx-lm {section['version'] or '(version not recorded)'} under test",
        ("property", "decoder-model", "verdict", "examples", "upstream reference and reproduction / failure"),
        [
            (
                r["property"],
                r["case"],
                r["verdict"],
                str(r["examples"] if r["examples"] is not None else "-"),
                r["reason"],
            )
            for r in section["rows"]
        ],
        f"{counts}. A known upstream bug is a strict expected failure: a finding about mlx-lm, "
        "not a failure of this run; a fix upstream fails the run until the mark is lifted.",
    )


def sources_table(report: dict) -> Table:
    rows = [
        (s["id"], s.get("authors", "-"), s["title"], s.get("version", "-"), s["url"], s["read_scope"], s["supports"])
        for s in report["sources"]
    ]
    return Table("Sources", ("id", "authors", "title", "version", "url", "read", "supports"), rows)
