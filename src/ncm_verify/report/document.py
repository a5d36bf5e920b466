"""The report built once: ledger + evidence + self-test files -> verify.json (`build_report`), and that content
as the typed document the writers render (`build_document`; its tables from `report.tables`).

Everything here is a pure function of the input files, so the same evidence
gives the same bytes; no clock is read. The markdown, HTML and terminal
writers render the document and add nothing of their own.
"""

from __future__ import annotations

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
from ncm_verify.evidence.chi_square import SHRINK_STOPPED, worst_bin_parts
from ncm_verify.report import mlx_lm_section, tables
from ncm_verify.report import status as claim_status
from ncm_verify.report.ledger import read_ledger
from ncm_verify.report.model import (
    Bin,
    Calibration,
    Claim,
    Document,
    Failure,
    Histogram,
    Mutants,
    Plot,
    StatisticalRun,
    Summary,
    Tables,
    Verdict,
)

REPORT_SCHEMA = "ncm-verify/report/1"
CALIBRATION_BINS = 20
"""Bins of the calibration p-values' histogram."""


def normalized_claims(ledger: dict) -> list[dict]:
    """The ledger's claims with every optional list present, so a half-finished ledger still reports."""
    defaults = {"statement": "", "sources": [], "paths": [], "properties": [], "benchmarks": []}
    return [{**defaults, **claim} for claim in ledger["claims"]]


def registered_mutants() -> list[str]:
    """Every planted bug the sweep must report on."""
    from ncm_verify.planted import EVIDENCE_MUTANTS, MUTANTS

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
        run=facts,
        required=record.required,
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
        "judged": claim_status.what_was_judged(claims, nodes, facts.get("implementation")),
        "required": record.required,
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


# --- the document the writers render: every choice of what they show is made here, once ---


def bin_labels(record: dict) -> list[str]:
    """The outcome label of each bin when the record carries them, else 'bin i'."""
    labels = (record.get("context") or {}).get("bin_labels")
    if isinstance(labels, list) and len(labels) == len(record["expected"]):
        return [str(label) for label in labels]
    return [f"bin {i}" for i in range(len(record["expected"]))]


def worst_bins(record: dict) -> tuple[Bin, ...]:
    """The bins contributing most to the statistic: the record's own list when it has one."""
    listed = (record.get("context") or {}).get("worst_bins")
    if listed:
        return tuple(
            Bin(row.get("outcome"), row.get("expected"), row.get("observed"), row.get("contribution")) for row in listed
        )
    labels, expected, observed = bin_labels(record), record["expected"], record["observed"]
    return tuple(Bin(labels[b], expected[b], observed[b], part) for b, part in worst_bin_parts(expected, observed))


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
    properties = tables.property_runs(report, "nodeid")
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


def plot(p: dict) -> Plot:
    """A statistical property run's figure."""
    record, which = plotted_record(p["statistics"])
    labels = bin_labels(record)
    return Plot(
        nodeid=p["nodeid"],
        which=which,
        name=record["name"],
        labels=tuple(labels),
        labelled=not labels[0].startswith("bin ") if labels else False,
        expected=tuple(record["expected"]),
        observed=tuple(record["observed"]),
        n=record["n"],
        df=record["df"],
        statistic=record["statistic"],
        p_value=record["p_value"],
        alpha=record["alpha"],
        rejected=not record.get("passed", True),
        worst_bins=worst_bins(record),
        failed_tests=p["statistics"]["failed_tests"],
    )


def failure(p: dict) -> Failure:
    """A failed property run; a chi-square rejection carries its figure (the terminal prints its worst bins)."""
    failure = p["failure"]
    statistics = p.get("statistics")
    return Failure(
        nodeid=p["nodeid"],
        claims=tuple(p["claims"]),
        outcome=p["outcome"],
        kind=failure.get("kind"),
        kernels=tuple(failure.get("kernels") or ()),
        message=failure.get("message") or "",
        falsifying_example=failure.get("falsifying_example"),
        reproduce_failure=failure.get("reproduce_failure"),
        seed=failure.get("seed"),
        command=failure["command"],
        shrink_stopped=p.get("stopped_because") == SHRINK_STOPPED,
        plot=plot(p) if statistics and statistics["failed_tests"] else None,
    )


def histogram(p_values: list[float], bins: int = CALIBRATION_BINS) -> Histogram:
    """The p-values in `bins` equal bins of [0, 1], a p-value of 1 in the last."""
    counts = [0] * bins
    for p in p_values:
        counts[min(int(p * bins), bins - 1)] += 1
    return Histogram(
        tuple(counts), tuple(f"{i / bins:.2f}" for i in range(bins)), (len(p_values) / bins,) * bins, len(p_values)
    )


def calibration(section: dict | None) -> Calibration | None:
    if section is None:
        return None
    return Calibration(
        rejections=section["rejections"],
        runs=section["runs"],
        alpha=section["alpha"],
        binomial_p_value=section["binomial_p_value"],
        ks_uniform_p_value=section.get("ks_uniform_p_value"),
        power_cases=len(section.get("power_cases") or []),
        histogram=histogram(section["p_values"]) if section.get("p_values") else None,
    )


FINDING_STATUSES = {
    claim_status.REFUTED: "hypothesis refuted",
    claim_status.INCONCLUSIVE_AT_THIS_SCALE: "inconclusive at this scale",
}
"""A research hypothesis's statuses that are findings, as the terminal names them: results, never failures."""


def claim(c: dict) -> Claim:
    return Claim(
        id=c["id"],
        status=c["status"],
        statement=c["statement"],
        reason=c["reason"],
        sources=tuple(c["sources"]),
        paths=tuple(c["paths"]),
        property_count=c["property_count"],
        distinct_examples=c["distinct_examples"],
        properties=tables.properties_table(c) if c["properties"] else None,
        nodeids=tuple(p["nodeid"] for p in c["properties"]),
        finding=FINDING_STATUSES.get(c["status"]),
    )


def build_document(report: dict) -> Document:
    """The typed document of verify.json's content (`report`), which the writers render as it is."""
    run, facts = report["run"], report.get("run_facts") or {}
    implementation, environment = facts.get("implementation") or {}, report["environment"] or {}
    policy, budget, mutants = report["policy"], report["budget"], report["mutants"]
    statistical = tables.statistical_rows(report)
    failed = tables.property_runs(report, "failure")
    # on a port's run the suite's own checks are reported apart: a failure of one is not the module's
    apart = lambda p: p.get("suite_check") and not claim_status.judges_reference(facts)
    return Document(
        impl=report["impl"],
        implementation_path=implementation.get("path") or None,
        implementation_sha256=implementation.get("sha256") or None,
        device=f"MLX {environment.get('mlx', '?')} on {environment.get('mlx_default_device', '?')}",
        verdict=Verdict(
            verdict=run["verdict"],
            exit_status=run["exit_status"],
            reasons=tuple(run.get("reasons") or ()),
            has_parts=bool(run.get("parts")),
            parts=tables.verdict_table(report),
        ),
        claims=tuple(claim(c) for c in report["claims"]),
        failures=tuple(failure(p) for p in failed if not p.get("finding") and not apart(p)),
        findings=tuple(failure(p) for p in failed if p.get("finding")),
        suite_checks=tuple(
            (p["nodeid"], p["outcome"]) for p in tables.property_runs(report, "suite_check") if not p.get("finding")
        ),
        suite_checks_count=claim_status.judges_reference(facts),
        judged=report.get("judged"),
        statistical=tuple(
            StatisticalRun(
                nodeid=p["nodeid"],
                distinct_laws=p["statistics"]["distinct_laws"],
                n_min=p["statistics"]["n_min"],
                n_max=p["statistics"]["n_max"],
                p_min=p["statistics"]["p_min"],
                min_detectable_tv=p["statistics"]["min_detectable_tv"],
                raw_detectable_tv=p["statistics"]["raw_detectable_tv"],
                reused=p.get("reused"),
            )
            for p in statistical
        ),
        plots=tuple(plot(p) for p in sorted(statistical, key=lambda p: p["statistics"]["failed_tests"] == 0)),
        unchecked=tuple((text, tuple(nodes)) for text, nodes in unchecked_items(report)),
        unclaimed=tuple(report["unclaimed"]),
        reuse=(facts.get("reuse") or {}).get("why") if facts.get("reuse") else None,
        policy=None
        if policy is None
        else Summary(policy["family_budget"], policy["planned_tests"], policy["alpha"], budget["chi_square_tests_run"]),
        mutants=None
        if mutants is None
        else Mutants(mutants["caught"], len(mutants["mutants"]), tuple(mutants["survived"])),
        calibration=calibration(report["calibration"]),
        tables=Tables(
            claims=tables.claims_table(report),
            judged=tables.judged_table(report),
            policy=tables.policy_table(report),
            statistical=tables.statistical_table(report),
            mlx_lm=tables.mlx_lm_table(report),
            mutants=tables.mutants_table(report),
            calibration=tables.calibration_table(report),
            bench=tables.bench_table(report),
            timing=tables.timing_table(report),
            environment=tables.environment_table(report),
            sources=tables.sources_table(report),
        ),
        data=report,
    )
