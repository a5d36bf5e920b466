"""The report as data: ledger + evidence + self-test files -> verify.json, and its tables.

Everything here is a pure function of the input files, so the same evidence
gives the same bytes; no clock is read. The markdown, HTML and terminal
writers render the tables built here and add nothing of their own.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from ncm_verify.report import mlx_lm_section
from ncm_verify.report import status as claim_status
from ncm_verify.report.ledger import read_ledger

REPORT_SCHEMA = "ncm-verify/report/1"
EVIDENCE_FILE = "evidence.json"
MUTANTS_FILE = "mutants.json"
CALIBRATION_FILE = "calibration.json"
BENCH_FILE = "bench.json"
VERIFY_JSON = "verify.json"
VERIFY_MD = "verify.md"
VERIFY_HTML = "verify.html"
NOT_RUN = "not run"


def read_json(path: Path) -> dict | None:
    """The JSON at `path`, or None when the file is absent."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def normalized_claims(ledger: dict) -> list[dict]:
    """The ledger's claims with every optional list present, so a half-finished ledger still reports."""
    defaults = {"statement": "", "sources": [], "paths": [], "properties": [], "benchmarks": []}
    return [{**defaults, **claim} for claim in ledger["claims"]]


def mutants_summary(mutants: dict | None, claims: list[dict]) -> dict | None:
    """The planted-bug table, with the claims whose properties caught each bug."""
    if mutants is None:
        return None
    claims_of_property = {}
    for claim in claims:
        for node in claim["properties"]:
            claims_of_property.setdefault(node, []).append(claim["id"])
    rows = []
    for mutant in mutants.get("mutants", []):
        caught_by = sorted(mutant.get("caught_by", []))
        claims = sorted({c for node in caught_by for c in claims_of_property.get(node.split("[", 1)[0], [])})
        rows.append({
            "name": mutant["name"],
            "module": mutant.get("module"),
            "description": mutant.get("description", ""),
            "caught": bool(mutant.get("caught")),
            "caught_by": caught_by,
            "claims": claims,
            "failed": len(mutant.get("failed", [])),
            "passed": len(mutant.get("passed", [])),
        })
    rows.sort(key=lambda row: row["name"])
    return {
        "generated": mutants.get("generated"),
        "profile": mutants.get("profile"),
        "mutants": rows,
        "caught": sum(row["caught"] for row in rows),
        "survived": [row["name"] for row in rows if not row["caught"]],
    }


def calibration_summary(calibration: dict | None) -> dict | None:
    """The calibration run: rejections of the correct kernels, and the planted bug's power."""
    if calibration is None:
        return None
    keys = ("alpha", "runs", "rejections", "binomial_p_value", "p_values", "planted", "generated")
    return {key: calibration.get(key) for key in keys}


def bench_summary(bench: dict | None) -> dict | None:
    """A pytest-benchmark JSON reduced to name, median, mean and rounds per benchmark."""
    if bench is None:
        return None
    rows = []
    for entry in bench.get("benchmarks", []):
        timing = entry.get("stats", {})
        rows.append({
            "name": entry.get("fullname") or entry.get("name"),
            "median_s": timing.get("median"),
            "mean_s": timing.get("mean"),
            "stddev_s": timing.get("stddev"),
            "rounds": timing.get("rounds"),
            "extra_info": entry.get("extra_info", {}),
        })
    rows.sort(key=lambda row: str(row["name"]))
    machine = bench.get("machine_info", {})
    return {
        "file": BENCH_FILE,
        "datetime": bench.get("datetime"),
        "machine": {key: machine.get(key) for key in ("node", "processor", "machine", "python_version")},
        "benchmarks": rows,
    }


def run_verdict(
    evidence: dict | None, mutants: dict | None, calibration: dict | None, ledger_problems: list[str]
) -> dict:
    """Passed only when every property passed, the budget held, no planted bug survived
    and the ledger conforms."""
    if evidence is None:
        return {"verdict": NOT_RUN, "reasons": ["no evidence.json: the properties were not run"]}
    outcomes: dict[str, int] = {}
    for node in evidence["properties"]:
        outcomes[node["outcome"]] = outcomes.get(node["outcome"], 0) + 1
    reasons = [f"ledger.json: {problem}" for problem in ledger_problems]
    failing = outcomes.get("failed", 0) + outcomes.get("error", 0)
    if failing:
        reasons.append(f"{claim_status.count(failing, 'property run')} failed")
    if evidence["budget"].get("run_failed_by_budget"):
        reasons.append(evidence["budget"]["note"])
    if mutants is not None and mutants["survived"]:
        reasons.append(f"planted bugs not caught: {', '.join(mutants['survived'])}")
    if calibration is not None and calibration.get("passed") is False:
        reasons.append("calibration failed")
    return {
        "verdict": "failed" if reasons else "passed",
        "reasons": reasons,
        "outcomes": dict(sorted(outcomes.items())),
        "examples": sum((n.get("hypothesis") or {}).get("examples") or 0 for n in evidence["properties"]),
    }


def build_report(
    ledger: dict,
    evidence: dict | None,
    mutants: dict | None = None,
    calibration: dict | None = None,
    bench: dict | None = None,
    ledger_problems: list[str] = (),
) -> dict:
    """verify.json: every claim with its derived status and the evidence behind it."""
    nodes = evidence["properties"] if evidence else []
    impl = evidence["impl"] if evidence else None
    profile = evidence.get("profile", "ci") if evidence else "ci"
    ledger_claims = normalized_claims(ledger)
    claims = []
    for claim in ledger_claims:
        behind = claim_status.claim_nodes(claim, nodes)
        status, reason = claim_status.derive_status(claim, behind)
        summaries = [claim_status.property_summary(node, impl, profile) for node in behind]
        claims.append({
            "id": claim["id"],
            "statement": claim["statement"],
            "status": status,
            "reason": reason,
            "sources": claim["sources"],
            "basis": claim.get("basis"),
            "paths": claim["paths"],
            "listed_properties": claim["properties"],
            "benchmarks": claim["benchmarks"],
            "property_count": len({s["property"] for s in summaries}),
            "examples": sum(s["examples"] or 0 for s in summaries),
            "properties": summaries,
        })
    claimed = {n["nodeid"] for c in ledger_claims for n in claim_status.claim_nodes(c, nodes)}
    mutant_table = mutants_summary(mutants, ledger_claims)
    calibration_table = calibration_summary(calibration)
    return {
        "schema": REPORT_SCHEMA,
        "impl": impl,
        "profile": profile if evidence else None,
        "run": run_verdict(evidence, mutant_table, calibration, list(ledger_problems)),
        "ledger_problems": list(ledger_problems),
        "environment": evidence["environment"] if evidence else None,
        "policy": evidence["policy"] if evidence else None,
        "budget": evidence["budget"] if evidence else None,
        "claims": claims,
        "unclaimed": sorted(n["nodeid"] for n in nodes if n["nodeid"] not in claimed),
        "mutants": mutant_table,
        "mlx_lm": mlx_lm_section.summarize(nodes, evidence["environment"] if evidence else None),
        "calibration": calibration_table,
        "bench": bench_summary(bench),
        "sources": ledger["sources"],
    }


def load_report(reports_dir: Path, ledger_path: Path | None = None) -> dict:
    """Build the report from the JSON files in `reports_dir`; nothing is rerun."""
    reports_dir = Path(reports_dir)
    ledger, problems = read_ledger(ledger_path)
    return build_report(
        ledger,
        read_json(reports_dir / EVIDENCE_FILE),
        read_json(reports_dir / MUTANTS_FILE),
        read_json(reports_dir / CALIBRATION_FILE),
        read_json(reports_dir / BENCH_FILE),
        problems,
    )


# --- tables shared by the markdown, HTML and terminal writers ---


@dataclasses.dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
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
            [("of which the calibration self-tests", number(policy["selftest_budget"])),
             ("left to the chi-square properties", number(policy["property_budget"]))]
            if "selftest_budget" in policy else []
        ),
        ("chi-square tests planned (Sidak split)", number(policy["planned_tests"])),
        ("per-test share of the budget", number(policy["per_test_share"])),
        ("per-test alpha (share x fraction)", f"{number(policy['alpha'])} (x{policy['alpha_fraction']})"),
        ("bins pooled below expected count", number(policy["min_expected"])),
        ("power at the detectable deviation", number(policy["power"])),
        ("power safety factor", number(policy["power_safety"])),
        ("target total-variation deviation", number(policy["target_tv"])),
        ("chi-square tests run", number(budget["chi_square_tests_run"])),
        ("budget check", budget["note"]),
    ]
    return Table("Statistical policy", ("setting", "value"), rows)


def claims_table(report: dict) -> Table:
    rows = [
        (c["id"], c["status"], number(c["property_count"]), number(c["examples"]), c["statement"], c["reason"])
        for c in report["claims"]
    ]
    return Table("Claims", ("claim", "status", "properties", "examples", "statement", "why"), rows)


def properties_table(claim: dict) -> Table:
    rows = []
    for p in claim["properties"]:
        difference = p["largest_difference"]
        rows.append((
            p["nodeid"],
            p["outcome"],
            number(p["examples"]),
            number(p["duration_s"]),
            number(p["statistics"]["tests"]) if p["statistics"] else "-",
            f"{difference['check']}: {number(difference['difference'])} vs {number(difference['tolerance'])}"
            if difference else "-",
        ))
    header = ("property", "outcome", "examples", "seconds", "chi-square tests", "largest difference vs tolerance")
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
            f"{number(p['statistics']['n_min'])}-{number(p['statistics']['n_max'])}",
            number(p["statistics"]["p_min"]),
            number(p["statistics"]["alpha"]),
            number(p["statistics"]["min_detectable_tv"]),
            number(p["statistics"]["pooled_mass_max"]),
            number(p["statistics"]["failed_tests"]),
        )
        for p in statistical_rows(report)
    ]
    header = ("property", "tests", "n", "min p-value", "alpha", "min detectable TV", "pooled mass", "rejections")
    note = "min detectable TV: the smallest total-variation deviation each test detects with the policy's power."
    return Table("Statistical properties", header, rows, note)


def mutants_table(report: dict) -> Table:
    mutants = report["mutants"]
    if mutants is None:
        return Table("Planted bugs", ("mutant",), [], "not run: no mutants.json (run the self-tests)")
    rows = [
        (m["name"], "caught" if m["caught"] else "SURVIVED", ", ".join(m["claims"]) or "-",
         ", ".join(m["caught_by"]) or "-", m["description"])
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
    ]
    planted = calibration.get("planted")
    if planted:
        rows.append((
            f"planted bug {planted.get('name')}",
            f"{number(planted.get('rejections'))} of {number(planted.get('runs'))} rejected "
            f"(rate {number(planted.get('rejection_rate'))})",
        ))
    return Table("Calibration", ("measure", "value"), rows)


def environment_table(report: dict) -> Table | None:
    environment = report["environment"]
    if environment is None:
        return None
    rows = [("implementation under test", str(report["impl"])), ("Hypothesis profile", str(report["profile"]))]
    rows += [(key, str(value)) for key, value in environment.items()]
    return Table("Environment", ("item", "value"), rows)


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


def sources_table(report: dict) -> Table:
    rows = [
        (s["id"], s.get("authors", "-"), s["title"], s.get("version", "-"), s["url"], s["read_scope"], s["supports"])
        for s in report["sources"]
    ]
    return Table("Sources", ("id", "authors", "title", "version", "url", "read", "supports"), rows)


def failures(report: dict) -> list[dict]:
    """Every failed property run once, with its claim ids and reproduction."""
    return property_runs(report, "failure")


def write_json(report: dict, path: Path) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=True, default=float) + "\n", encoding="utf-8")
