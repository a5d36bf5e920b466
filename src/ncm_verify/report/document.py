"""The report as data: ledger + evidence + self-test files -> verify.json, and its tables.

Everything here is a pure function of the input files, so the same evidence
gives the same bytes; no clock is read. The markdown, HTML and terminal
writers render the tables built here and add nothing of their own.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncm_verify.bench.ratios import BENCH_CLAIM
from ncm_verify.bench.ratios import c9_summary as bench_line
from ncm_verify.evidence import (
    BENCH_FILE,
    CALIBRATION_FILE,
    EVIDENCE_FILE,
    MUTANTS_FILE,
    RUN_FILE,
    Evidence,
    Outcome,
    RunRecord,
    property_id,
    read_json,
)
from ncm_verify.harness.checks import worst_bin_parts
from ncm_verify.report import mlx_lm_section
from ncm_verify.report import status as claim_status
from ncm_verify.report.ledger import read_ledger

REPORT_SCHEMA = "ncm-verify/report/1"


def normalized_claims(ledger: dict) -> list[dict]:
    """The ledger's claims with every optional list present, so a half-finished ledger still reports."""
    defaults = {"statement": "", "sources": [], "paths": [], "properties": [], "benchmarks": []}
    return [{**defaults, **claim} for claim in ledger["claims"]]


def registered_mutants() -> list[str]:
    """Every planted bug the sweep must report on."""
    from ncm_verify.mutants import EVIDENCE_MUTANTS, MUTANTS

    return sorted({*MUTANTS, *EVIDENCE_MUTANTS})


def normalized_claims_ledger(ledger: dict) -> dict:
    """The ledger with its claims normalized (every optional list present)."""
    return {**ledger, "claims": normalized_claims(ledger)}


def mutants_summary(mutants: dict | None, claims: list[dict], expected: list[str] | None = None) -> dict | None:
    """The planted-bug table, with the claims whose properties caught each bug (and any `expected` one absent)."""
    if mutants is None:
        return None
    claims_of_property: dict[str, list[str]] = {}
    for claim in claims:
        for node in claim["properties"]:
            claims_of_property.setdefault(node, []).append(claim["id"])
    rows = []
    for mutant in mutants.get("mutants", []):
        caught_by = sorted(mutant.get("caught_by", []))
        claims = sorted({c for node in caught_by for c in claims_of_property.get(property_id(node), [])})
        rows.append(
            {
                "name": mutant["name"],
                "module": mutant.get("module"),
                "description": mutant.get("description", ""),
                "caught": bool(mutant.get("caught")),
                "caught_by": caught_by,
                "claims": claims,
                "failed": len(mutant.get("failed", [])),
                "passed": len(mutant.get("passed", [])),
                "errors": mutant.get("errors", []),
                "sweep_error": mutant.get("sweep_error"),
            }
        )
    rows.sort(key=lambda row: row["name"])
    return {
        "generated": mutants.get("generated"),
        "cache": mutants.get("cache"),
        "profile": mutants.get("profile"),
        "mutants": rows,
        "caught": sum(row["caught"] for row in rows),
        "survived": [row["name"] for row in rows if not row["caught"]],
        "missing": sorted(set(expected or ()) - {row["name"] for row in rows}),
    }


def calibration_summary(calibration: dict | None) -> dict | None:
    """The calibration run: rejections of the correct kernels, and the planted bug's power."""
    if calibration is None:
        return None
    keys = (
        "alpha",
        "runs",
        "rejections",
        "binomial_p_value",
        "ks_uniform_p_value",
        "check_budget",
        "p_values",
        "planted",
        "power_cases",
        "size",
        "size_large_df",
        "generated",
        "cache",
    )
    return {key: calibration.get(key) for key in keys}


def bench_summary(bench: dict | None) -> dict | None:
    """A pytest-benchmark JSON reduced to name, median, mean and rounds per benchmark."""
    if bench is None:
        return None
    rows = []
    for entry in bench.get("benchmarks", []):
        timing = entry.get("stats", {})
        rows.append(
            {
                "name": entry.get("fullname") or entry.get("name"),
                "median_s": timing.get("median"),
                "mean_s": timing.get("mean"),
                "stddev_s": timing.get("stddev"),
                "rounds": timing.get("rounds"),
                "extra_info": entry.get("extra_info", {}),
            }
        )
    rows.sort(key=lambda row: str(row["name"]))
    machine = bench.get("machine_info", {})
    return {
        "file": BENCH_FILE,
        "datetime": bench.get("datetime"),
        "machine": {key: machine.get(key) for key in ("node", "processor", "machine", "python_version")},
        "benchmarks": rows,
    }


def run_facts(evidence: Evidence | None, run: dict | None) -> dict:
    """What identifies the run: implementation (name, path, hash, names it defines), profile, run id."""
    facts: dict[str, Any] = {"impl": None, "profile": None, "planned_tests": None}
    if evidence is not None:
        facts.update(
            impl=evidence.impl,
            profile=evidence.profile or "ci",
            planned_tests=(evidence.policy or {}).get("planned_tests"),
            run_id=evidence.run_id,
            implementation=evidence.implementation,
            checkpoint=evidence.checkpoint,
        )
        facts["impl_path"] = (evidence.implementation or {}).get("path_argument")
    return {**facts, **(run or {})}


def build_report(
    ledger: dict,
    evidence_json: dict | None,
    mutants: dict | None = None,
    calibration: dict | None = None,
    bench: dict | None = None,
    ledger_problems: Sequence[str] = (),
    run: dict | None = None,
    expected_mutants: list[str] | None = None,
) -> dict:
    """verify.json: every claim with its derived status, the evidence behind it, and the run's one verdict.

    `run` carries what the orchestrator knows: the run id, each phase's exit, where self-tests came from.
    """
    evidence = Evidence.from_json(evidence_json)
    record = RunRecord.from_json(run)
    nodes = evidence.properties if evidence else []
    facts = run_facts(evidence, run)
    ledger_problems = [*ledger_problems, *record.ledger_problems]
    ledger_claims = normalized_claims(ledger)
    claims = claim_status.make_claims(ledger_claims, nodes, facts)
    for claim in claims:  # C9: the last make bench's ratios, if it measured this impl and commit
        if claim["id"] == BENCH_CLAIM:
            commit = ((evidence.environment if evidence else None) or {}).get("commit")
            claim["reason"] = f"{claim['reason']}. {bench_line(bench, facts['impl'], commit)}"
    claimed = {n.nodeid for c in ledger_claims for n in claim_status.claim_nodes(c, nodes)}
    mutant_table = mutants_summary(mutants, ledger_claims, expected_mutants)
    calibration_table = calibration_summary(calibration)
    verdict = claim_status.make_verdict(
        evidence,
        claims,
        mutant_table,
        calibration_table,
        list(ledger_problems),
        ledger_claims,
        phases=record.phases,
        run_id=facts.get("run_id") if run else None,
    )
    return {
        "schema": REPORT_SCHEMA,
        "impl": facts["impl"],
        "profile": facts["profile"],
        "run_facts": facts,
        "run": verdict,
        "ledger_problems": list(ledger_problems),
        "environment": evidence.environment if evidence else None,
        "policy": evidence.policy if evidence else None,
        "budget": evidence.budget.to_json() if evidence and evidence.budget else None,
        "claims": claims,
        "unclaimed": sorted(n.nodeid for n in nodes if n.nodeid not in claimed),
        "mutants": mutant_table,
        "mlx_lm": mlx_lm_section.summarize(nodes, evidence.environment if evidence else None),
        "calibration": calibration_table,
        "bench": bench_summary(bench),
        "timing": evidence.timing if evidence else None,
        "sources": ledger["sources"],
    }


def load_report(reports_dir: Path, ledger_path: Path | None = None) -> dict:
    """Build the report from the JSON files in `reports_dir`, the run's own record (run.json) among them; nothing
    is rerun, so a rebuild reads exactly what the run wrote and gives its verdict."""
    reports_dir = Path(reports_dir)
    ledger, problems = read_ledger(ledger_path)
    return build_report(
        ledger,
        read_json(reports_dir / EVIDENCE_FILE),
        read_json(reports_dir / MUTANTS_FILE),
        read_json(reports_dir / CALIBRATION_FILE),
        read_json(reports_dir / BENCH_FILE),
        problems,
        read_json(reports_dir / RUN_FILE),
        registered_mutants(),
    )


# --- tables shared by the markdown, HTML and terminal writers ---


@dataclasses.dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: Sequence[Sequence[str]]
    note: str = ""


def number(value, digits: int = 3) -> str:
    """A number for a table cell: '-' for None, short scientific form when small or large."""
    if value is None:
        return "-"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


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
        for name, part in report["run"]["parts"].items()
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
        f"shown needs, per property, {claim_status.MIN_DISTINCT_EXAMPLES} distinct examples (distinct laws "
        f"for a statistical one), a chi-square test if statistical, at most "
        f"{claim_status.MAX_FILTERED_FRACTION:.0%} of its examples filtered, and a call into code the module "
        "provides itself"
    )
    return Table("Claims", ("claim", "status", "properties", "distinct examples", "statement", "why"), rows, note)


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
    for key in ("path", "sha256"):
        if checkpoint.get(key) is not None:
            rows.append((f"checkpoint (model-level path (b)) {key}", str(checkpoint[key])))
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


def failures(report: dict) -> list[dict]:
    """Every failed property run once, with its claim ids and reproduction."""
    return property_runs(report, "failure")


# --- what the writers show: decided here, rendered by markdown, html and terminal ---


def bin_labels(record: dict) -> list[str]:
    """The outcome label of each bin when the record carries them, else 'bin i'."""
    labels = (record.get("context") or {}).get("bin_labels")
    if isinstance(labels, list) and len(labels) == len(record["expected"]):
        return [str(label) for label in labels]
    return [f"bin {i}" for i in range(len(record["expected"]))]


def worst_bins(record: dict) -> list[dict]:
    """The bins contributing most to the statistic: the record's own list when it has one."""
    listed = (record.get("context") or {}).get("worst_bins")
    if listed:
        return listed
    labels, expected, observed = bin_labels(record), record["expected"], record["observed"]
    return [
        {"outcome": labels[b], "expected": expected[b], "observed": observed[b], "contribution": part}
        for b, part in worst_bin_parts(expected, observed)
    ]


def plotted_record(statistics: dict) -> tuple[dict, str]:
    """The record a property's figure shows, and what it is.

    A failed property shows its minimal counterexample (the last failing test, replayed by Hypothesis after
    shrinking), not the first failure its search met; a passing one shows its smallest p-value.
    """
    counterexample = statistics.get("counterexample")
    if counterexample:
        return counterexample, "the minimal counterexample's test (the last that failed, after shrinking)"
    if statistics["failed_tests"]:
        return statistics["worst"], "the failing test with the smallest p-value (no counterexample recorded)"
    return statistics["worst"], f"the test with the smallest p-value of {statistics['tests']}"


def unchecked_items(report: dict) -> list[tuple[str, list[str]]]:
    """What this run did not check: (item, the node ids behind it), each derived from the report's data."""
    items: list[str | tuple[str, list[str]]] = []
    environment = report["environment"] or {}
    device = str(environment.get("mlx_default_device", ""))
    if "cpu" in device.lower():
        items.append(f"MLX ran on the CPU ({device}): no Metal/GPU kernel path was run.")
    elif not device:
        items.append("The device is unknown: no properties ran, or the run recorded no environment.")
    profile = report.get("profile")
    if profile and profile != "thorough":
        items.append(f"Examples were drawn under the '{profile}' Hypothesis profile; the thorough profile was not run.")
    for status, meaning in (
        ("not checkable", "not checkable by a property"),
        ("not provided", "not provided by the module under test"),
        ("not run", "not run"),
        ("not shown", "not shown"),
    ):
        claims = [c["id"] for c in report["claims"] if c["status"] == status]
        if claims:
            items.append(f"Claims {meaning}: {', '.join(claims)}.")
    inherited = ((report.get("run_facts") or {}).get("implementation") or {}).get("inherits")
    if inherited:
        items.append(f"Names {report['impl']} inherits instead of defining (not its own code): {', '.join(inherited)}.")
    properties = property_runs(report, "nodeid")
    for summary_of, meaning in (
        (
            lambda p: p["outcome"] == Outcome.NOT_PROVIDED or p.get("implementation_use") == "inherited",
            "not provided by the implementation (its calls reached only inherited names, or names it lacks)",
        ),
        (
            lambda p: p.get("implementation_use") == "suite",
            "the suite's own checks: they never call the implementation, so they check the oracle, not the module",
        ),
        (
            lambda p: p["outcome"] == Outcome.NOT_APPLICABLE,
            "not applicable: they need what the module declares it cannot do (the reason is each one's skip reason)",
        ),
        (lambda p: p["outcome"] == Outcome.SKIPPED, "skipped"),
    ):
        nodes = [p["nodeid"] for p in properties if summary_of(p)]
        if nodes:
            items.append(
                (f"{len(nodes)} property runs {meaning}, by file: {claim_status.count_by_file(nodes)}.", nodes)
            )
    reuse = (report.get("run_facts") or {}).get("reuse") or {}
    if reuse.get("reused"):
        items.append(
            f"{reuse['reused']} property runs did not run here: {reuse['why']}. They would run the reference's code on "
            "the same derandomized examples; CI=true runs them all."
        )
    if report["mutants"] is None:
        items.append("The planted-bug sweep did not run (no mutants.json): the suite's teeth are unproven here.")
    if report["calibration"] is None:
        items.append("Calibration and power did not run (no calibration.json).")
    if report["bench"] is None:
        items.append("Speed was not measured (no bench.json; make bench measures it).")
    return [item if isinstance(item, tuple) else (item, []) for item in items]


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8")
