"""The verdict of a run, and of each claim, derived from evidence in one place.

Every exit status and every report reads the value `make_verdict` returns; nothing
else decides whether a run passed. The parts of a run, each judged here:

- *properties*: each property run passed, with enough evidence (see `property_evidence`);
- *claims*: each claim is shown, not checkable, not provided by the module under test, or held back only by
  known upstream bugs of the third-party code it judges (strict xfails, reported as findings);
- *planted bugs*: the sweep ran cleanly and some property failed by assertion for every bug;
- *calibration*: the binomial and KS checks of the correct kernels, and every power case;
- *budget*: no more chi-square tests ran than the policy planned;
- *ledger*: ledger.json conforms and every claim marker names a ledger entry;
- *phases*: every phase of the run exited as expected and left evidence of this run.

A claim is *shown* only when each of its properties passed, ran at least
`MIN_DISTINCT_EXAMPLES` distinct examples (distinct laws for a statistical property),
ran at least one chi-square test if statistical, was not mostly filtered, and called
code the module under test provides itself.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from ncm_verify.evidence import (
    EVIDENCE_FILE,
    FAILING_OUTCOMES,
    Evidence,
    HypothesisSummary,
    Outcome,
    Phase,
    PropertyRecord,
)
from ncm_verify.evidence.chi_square import LAW_DECIMALS, power_case_names
from ncm_verify.evidence.thresholds import MAX_FILTERED_FRACTION, MIN_DISTINCT_EXAMPLES
from ncm_verify.protocol import DEFAULT_IMPLEMENTATION, family_named, is_path, protocol_members
from ncm_verify.report.ledger import claim_properties, ledger_kernel_claims

SHOWN = "shown"
NOT_SHOWN = "not shown"
FAILED = "failed"
NOT_CHECKABLE = "not checkable"
NOT_PROVIDED = Outcome.NOT_PROVIDED.value
"""A claim whose properties need names, or capabilities, the module lacks: the word of their runs' outcome."""
NOT_RUN = "not run"
KNOWN_UPSTREAM_BUGS = "known upstream bugs"
"""Every other property passed and those left ran only as strict xfails: bugs of the third-party code judged
(mlx-lm), each with its upstream reference. Findings of the run, not failures of it; a fix turns them red."""
REFUTED = "failed: hypothesis refuted"
"""A research hypothesis (a ledger claim with `"hypothesis": true`, e.g. C10) whose properties failed by
assertion: the data refute it. A finding of the run, reported with its numbers, not a failure of the
implementation; an error in such a property still fails the run."""
INCONCLUSIVE_AT_THIS_SCALE = "inconclusive at this scale"
"""A research hypothesis none of whose properties failed, some of whose experiments could not have seen the effect
the literature reports (`Outcome.INCONCLUSIVE`, with its table and power): a finding, neither shown nor refuted."""
PARTLY_PROVIDED = "partly provided"
"""A claim some of whose properties judged the module's own code, all passing, while the rest reached only names it
inherits: a verdict on what the module provides, never 'shown' for what it does not."""
SUITE_CHECK = "suite's own check"
"""On a port's run, a claim whose every property never reaches the module: the suite's own checks, reported
apart from the verdict on the module (on the reference's run they count as any property does)."""
STATUSES = (
    SHOWN,
    PARTLY_PROVIDED,
    NOT_SHOWN,
    FAILED,
    NOT_CHECKABLE,
    NOT_PROVIDED,
    KNOWN_UPSTREAM_BUGS,
    REFUTED,
    INCONCLUSIVE_AT_THIS_SCALE,
    SUITE_CHECK,
    NOT_RUN,
)
ACCEPTABLE_CLAIM_STATUSES = (
    SHOWN,
    PARTLY_PROVIDED,
    NOT_CHECKABLE,
    NOT_PROVIDED,
    KNOWN_UPSTREAM_BUGS,
    REFUTED,
    INCONCLUSIVE_AT_THIS_SCALE,
    SUITE_CHECK,
)
"""Claim statuses a passing run may hold; a claim of code the module does not provide is not its failure."""

PASSED, RUN_FAILED = "passed", "failed"


PARTS = (
    "phases",
    "properties",
    "claims",
    "coverage",
    "suite checks",
    "planted bugs",
    "calibration",
    "budget",
    "ledger",
)


def never_reaches_implementation(node: PropertyRecord) -> bool:
    """A property that neither called nor looked up any name of the module: the suite's own check (an identity of
    its oracle, an experiment on its fixtures, third-party code), whose outcome says nothing of the module.

    A property that never reached its call phase (`calls` None) is not one: it may have failed on the module."""
    return node.calls == {} and not node.looked_up


def judges_reference(run: dict) -> bool:
    """Whether the module under test is the suite's reference: a run on it is the suite judging itself, so its own
    checks count in the verdict."""
    return run.get("impl") == DEFAULT_IMPLEMENTATION


def count(number: int, noun: str, plural: str | None = None) -> str:
    """'1 property', '3 properties'."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def reproduce_command(node: PropertyRecord, run: dict) -> str:
    """The shell line that reruns one property exactly as the run did: same profile, impl and planned tests."""
    planned = run.get("planned_tests")
    planned_option = f" --ncm-planned-tests={planned}" if planned else ""
    impl = run.get("impl_path") or run.get("impl")
    where = run.get("rerun_from") or run.get("installed")  # absolute; "installed": run.json before the rename
    # the profile set after the cd: an assignment before `cd` would be cd's environment, not pytest's
    cd, python = (
        (f"cd {shlex.quote(where['root'])} && ", shlex.quote(where["python"])) if where else ("", ".venv/bin/python")
    )
    found = f"PYTHONPATH={shlex.quote(where['pythonpath'])} " if where and where.get("pythonpath") else ""
    return (
        f"{cd}{found}HYPOTHESIS_PROFILE={run.get('profile', 'ci')} {python} -m pytest '{node.nodeid}' "
        f"-p no:xdist --impl={impl}{planned_option}"
    )


def rerun_pythonpath(impl: str, folder: Path, root: Path) -> dict:
    """``{"pythonpath": folder}`` when `impl` names a module that imports from `folder` (the run's current folder, as
    ``python -m`` finds it) and `folder` is not the suite's `root`: a rerun line runs in the suite's folder, so it puts
    `folder` on PYTHONPATH and works from anywhere; else nothing."""
    if is_path(impl) or folder.resolve() == root.resolve():
        return {}
    top = impl.split(".")[0]
    return {"pythonpath": str(folder)} if (folder / top).is_dir() or (folder / f"{top}.py").is_file() else {}


# --- one property ---


def distinct_laws(records: list[dict]) -> int:
    """Distinct laws per chi-square test name, the fewest over the names: a law that never changes is not shown
    by the others' changing. Laws by `law_digest` (the binned law rounded to `LAW_DECIMALS`), else by
    their expected counts as frequencies rounded alike."""
    laws: dict[str, set] = {}
    for r in records:
        law = r.get("law_digest") or tuple(round(x / r["n"], LAW_DECIMALS) for x in r["expected"])
        laws.setdefault(r["name"], set()).add(law)
    return min((len(digests) for digests in laws.values()), default=0)


def stats_summary(records: list[dict]) -> dict | None:
    """What a property's chi-square tests establish: sizes, laws, worst p-value, detectable deviation."""
    if not records:
        return None
    worst = min(records, key=lambda r: (r["passed"], r["p_value"]))
    return {
        "tests": len(records),
        "distinct_laws": distinct_laws(records),
        "failed_tests": sum(not r["passed"] for r in records),
        "n_min": min(r["n"] for r in records),
        "n_max": max(r["n"] for r in records),
        "df_max": max(r["df"] for r in records),
        "p_min": min(r["p_value"] for r in records),
        "alpha": min(r["alpha"] for r in records),
        # the weakest guarantee among its tests: every test detects at least this deviation of its binned law,
        # and this one of its raw law (the binned TV plus the pooled mass)
        "min_detectable_tv": max(r["min_detectable_tv"] for r in records),
        "raw_detectable_tv": max(
            r.get("raw_detectable_tv", r["min_detectable_tv"] + r["pooled_mass"]) for r in records
        ),
        "pooled_mass_max": max(r["pooled_mass"] for r in records),
        "impossible_count": sum(r["impossible_count"] for r in records),
        "worst": {
            key: worst[key]
            for key in (
                "name",
                "n",
                "df",
                "statistic",
                "p_value",
                "alpha",
                "expected",
                "observed",
                "impossible_count",
                "context",
                "passed",
                "law_digest",
            )
            if key in worst
        },
        # the last failing test is the minimal counterexample's: Hypothesis replays its shrunk example last
        "counterexample": next((r for r in reversed(records) if not r["passed"]), None),
    }


def largest_difference(differences: list[dict]) -> dict | None:
    """The check that came closest to its tolerance (exact checks count mismatches)."""
    if not differences:
        return None

    def closeness(d):
        if d["tolerance"] > 0:
            return d["difference"] / d["tolerance"]
        return math.inf if d["difference"] > 0 else 0.0

    worst = max(differences, key=lambda d: (closeness(d), d["check"]))
    ratio = closeness(worst)
    return {**worst, "ratio": None if math.isinf(ratio) else ratio}


def distinct_examples(node: PropertyRecord) -> int | None:
    """Distinct examples a property ran: laws if statistical, else Hypothesis's valid examples (never repeated).

    None for a plain test, which checks one fixed case by design.
    """
    if node.statistical_tests_per_example:
        return distinct_laws(node.stats) if node.stats else 0
    if node.hypothesis is None:
        return None
    return node.hypothesis.examples or 0


def implementation_use(node: PropertyRecord, impl: str | None, claim_id: str | None = None) -> tuple[str, str]:
    """('implementation' | 'suite' | 'inherited' | 'unknown', why) from the calls a property made.

    For `claim_id`, only calls into that claim's kernels count when the property called any (a relation
    checked on every kernel is evidence for C6 only through the C6 kernels). Without call records (older
    evidence) the use is unknown and not held against it.
    """
    calls = node.calls
    if calls is None:
        return "unknown", ""
    if not calls:
        return "suite", "made no call into the implementation: the suite's own check, of its oracle, not of the module"
    relevant = {name: record for name, record in calls.items() if ledger_kernel_claims().get(name) == claim_id} or calls
    own = sorted(name for name, record in relevant.items() if record.get("own"))
    if not own:
        names = ", ".join(sorted(relevant))
        return "inherited", f"not provided by {impl}: its calls reached only inherited names ({names})"
    return "implementation", f"called {', '.join(own)}"


def count_by_file(nodes: list[str]) -> str:
    """'test_a.py (3), test_b.py (1)': a long list of node ids read at a glance, files in first-seen order."""
    counts: dict[str, int] = {}
    for node in nodes:
        name = node.split("::")[0].rsplit("/", 1)[-1]
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({number})" for name, number in counts.items())


def reused_note(node: PropertyRecord) -> str | None:
    """'reused from reference run <id> (<time>)' for evidence carried from the reference's run, else None."""
    source = node.reused
    return f"reused from reference run {source['run_id']} ({source['ran']})" if source else None


def searched_and_found(node: PropertyRecord) -> bool:
    """A property that passed because its search found what it looked for (a counterexample shown to exist),
    or that Hypothesis ran to exhaustion: its example count is not a measure of its evidence."""
    hypothesis = node.hypothesis or HypothesisSummary()
    found = (hypothesis.failing_examples or 0) > 0 and node.outcome == Outcome.PASSED
    return found or (hypothesis.stopped_because or "").startswith("nothing left to do")


def property_evidence(node: PropertyRecord) -> list[str]:
    """Why a passing property run is not evidence enough for its claims (empty: it is)."""
    reasons = []
    distinct = distinct_examples(node)
    exempt = searched_and_found(node) and not node.statistical_tests_per_example
    if distinct is not None and distinct < MIN_DISTINCT_EXAMPLES and not exempt:
        unit = "distinct law" if node.statistical_tests_per_example else "distinct example"
        reasons.append(f"ran {count(distinct, unit)} < {MIN_DISTINCT_EXAMPLES}")
    if node.statistical_tests_per_example and not node.stats:
        reasons.append("statistical but ran no chi-square test")
    hypothesis = node.hypothesis or HypothesisSummary()
    valid, invalid = hypothesis.examples or 0, hypothesis.invalid_examples or 0
    if invalid and invalid > MAX_FILTERED_FRACTION * (valid + invalid):
        reasons.append(f"{invalid} of {valid + invalid} examples filtered out")
    return reasons


def property_summary(
    node: PropertyRecord, run: dict, claim_id: str | None = None, hypotheses: frozenset[str] = frozenset()
) -> dict:
    """One property run as the report shows it, with what it is evidence of (for `claim_id`); a failure that
    refutes one of `hypotheses` is a finding."""
    hypothesis = node.hypothesis or HypothesisSummary()
    use, use_reason = implementation_use(node, run.get("impl"), claim_id)
    summary = {
        "nodeid": node.nodeid,
        "property": node.property,
        "claims": node.claims,
        "outcome": node.outcome.value,
        "duration_s": node.duration_s,
        "examples": hypothesis.examples,
        "distinct_examples": distinct_examples(node),
        "invalid_examples": hypothesis.invalid_examples,
        "stopped_because": hypothesis.stopped_because,
        "statistics": stats_summary(node.stats),
        "largest_difference": largest_difference(node.differences),
        "skip_reason": node.skip_reason,
        "calls": node.calls,
        "implementation_use": use,
        "implementation_use_reason": use_reason,
        "suite_check": never_reaches_implementation(node),
        "finding": refutes_a_hypothesis(node, hypotheses),
        "reused": reused_note(node),
        "insufficient": property_evidence(node) if node.outcome == Outcome.PASSED else [],
        "failure": None,
    }
    if node.failure:
        summary["failure"] = {**node.failure.to_json(), "command": reproduce_command(node, run)}
    return summary


# --- one claim ---


def claim_nodes(claim: dict, nodes: list[PropertyRecord]) -> list[PropertyRecord]:
    """Evidence entries behind a claim: listed by the ledger or marked with the claim id."""
    listed = set(claim_properties(claim))
    return [n for n in nodes if n.property in listed or claim["id"] in n.claims]


def fails_claim(summary: dict, claim_id: str, counts_suite_checks: bool = True) -> bool:
    """A failure counts against the claims of the kernels its failing example exercised, when known; a suite's own
    check counts only when `counts_suite_checks` (the run judges the reference)."""
    if summary["outcome"] not in FAILING_OUTCOMES or (summary.get("suite_check") and not counts_suite_checks):
        return False
    attributed = (summary["failure"] or {}).get("claims")
    return not attributed or claim_id in attributed


def derive_status(claim: dict, summaries: list[dict], counts_suite_checks: bool = True) -> tuple[str, str]:
    """(status, one-line reason) of a claim given the property summaries behind it; on a port's run
    (`counts_suite_checks` false) the suite's own checks are reported apart and never fail it."""
    apart: set[str] = set()  # the suite's own checks, on a port's run: neither required nor counted
    if not counts_suite_checks and claim.get("hypothesis") and not summaries:
        return (
            SUITE_CHECK,
            "an experiment on the suite's own models, left out of a port's run: `make verify` decides it",
        )
    if not counts_suite_checks:
        own = [s for s in summaries if not s.get("suite_check")]
        refuted = claim.get("hypothesis") and any(s["outcome"] == Outcome.FAILED for s in summaries)
        if summaries and not own and not refuted:
            return SUITE_CHECK, "its properties never call the module: the suite's own checks, reported apart"
        if not own:  # a hypothesis judged on the suite's experiment alone: its finding stands on any run
            counts_suite_checks = True
        else:
            apart = {s["property"] for s in summaries if s.get("suite_check")} - {s["property"] for s in own}
            summaries = own
    if claim.get("not_checkable"):
        return NOT_CHECKABLE, claim["not_checkable"]
    if not claim["properties"] and not summaries:
        return NOT_RUN, "the ledger lists no property for it and gives no reason"
    if not summaries:
        return NOT_RUN, f"no evidence: none of its {len(claim['properties'])} properties ran"
    runs = count(len(summaries), "property run")
    failing = [s["nodeid"] for s in summaries if fails_claim(s, claim["id"], counts_suite_checks)]
    if (
        failing
        and claim.get("hypothesis")
        and all(s["outcome"] == Outcome.FAILED for s in summaries if s["nodeid"] in failing)
    ):
        return REFUTED, f"the data refute it: {len(failing)} of {runs} failed by assertion: {', '.join(failing)}"
    if failing:
        return FAILED, f"{len(failing)} of {runs} failed: {', '.join(failing)}"
    weak = [s["nodeid"] for s in summaries if s["outcome"] == Outcome.INCONCLUSIVE]
    if weak and claim.get("hypothesis"):
        return INCONCLUSIVE_AT_THIS_SCALE, f"{len(weak)} of {runs} could not have seen the effect: {', '.join(weak)}"
    # a failure on another claim's kernel says nothing of this claim's; if its calls to this claim's kernels
    # reached only inherited names, the module does not provide what the property would have shown here
    elsewhere = [
        s["nodeid"] for s in summaries if s["outcome"] in FAILING_OUTCOMES and s["implementation_use"] != "inherited"
    ]
    if elsewhere:
        return NOT_SHOWN, f"failed on another claim's kernel: {', '.join(elsewhere)}"
    skipped = [s["nodeid"] for s in summaries if s["outcome"] in (Outcome.SKIPPED, Outcome.INCONCLUSIVE)]
    if skipped:
        return NOT_RUN, f"{len(skipped)} of {runs} skipped: {', '.join(skipped)}"
    not_provided = [
        s
        for s in summaries
        if s["outcome"] in (Outcome.NOT_PROVIDED, Outcome.NOT_APPLICABLE) or s["implementation_use"] == "inherited"
    ]
    ran = {s["property"] for s in summaries if s["outcome"] == Outcome.PASSED}
    missing = [p for p in claim["properties"] if p not in ran | apart | {s["property"] for s in not_provided}]
    xfailed = {s["property"] for s in summaries if s["outcome"] == Outcome.XFAILED}
    known = [p for p in missing if p in xfailed]
    if known and len(known) == len(missing):  # an xfail is a known upstream bug: neither a pass nor a failure
        listed = count(len(known), "listed property", "listed properties")
        return KNOWN_UPSTREAM_BUGS, f"{listed} ran only as known upstream bugs (strict xfail): {', '.join(known)}"
    if missing:
        listed = count(len(claim["properties"]), "listed property", "listed properties")
        return NOT_RUN, f"{len(missing)} of {listed} did not pass a run: {', '.join(missing)}"
    # thin evidence on what the module does provide is not excused by what it does not
    thin = [
        f"{s['nodeid']} ({'; '.join(s['insufficient'])})"
        for s in summaries
        if s["insufficient"] and s not in not_provided
    ]
    if thin:
        return NOT_SHOWN, f"not enough evidence: {', '.join(thin)}"
    if not_provided:
        by_reason: dict[str, list[str]] = {}
        for s in not_provided:
            by_reason.setdefault(s["skip_reason"] or s["implementation_use_reason"], []).append(s["nodeid"])
        why = "; ".join(f"{reason} [{count_by_file(nodes)}]" for reason, nodes in by_reason.items())
        applicable = all(s["outcome"] != Outcome.NOT_APPLICABLE for s in not_provided)
        said = "not provided by the module" if applicable else "not provided by the module or not applicable to it"
        own = [s for s in summaries if s not in not_provided and s["implementation_use"] == "implementation"]
        if own:
            judged = ", ".join(sorted({n for s in own for n, r in (s["calls"] or {}).items() if r.get("own")}))
            return (
                PARTLY_PROVIDED,
                f"{len(own)} of {runs} judged the module's own code ({judged}) and passed; "
                f"{len(not_provided)} {said}: {why}",
            )
        return NOT_PROVIDED, f"{len(not_provided)} of {runs} {said}: {why}"
    # a claim whose subject is the suite's own loop over mlx-lm (`judges_suite_code` says which) is shown by them
    if all(s["implementation_use"] == "suite" for s in summaries) and not claim.get("judges_suite_code"):
        return NOT_SHOWN, "every property is the suite's own check: none called the implementation"
    distinct = sum(s["distinct_examples"] or 0 for s in summaries)
    return (
        SHOWN,
        f"{count(len(ran), 'property', 'properties')} passed in {count(len(summaries), 'run')}, "
        f"{count(distinct, 'distinct example')}",
    )


def make_claims(ledger_claims: list[dict], nodes: list[PropertyRecord], run: dict) -> list[dict]:
    """Every ledger claim with its derived status and the property summaries behind it."""
    claims = []
    hypotheses = frozenset(c["id"] for c in ledger_claims if c.get("hypothesis"))
    for claim in ledger_claims:
        summaries = [property_summary(node, run, claim["id"], hypotheses) for node in claim_nodes(claim, nodes)]
        status, reason = derive_status(claim, summaries, judges_reference(run))
        claims.append(
            {
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
                "distinct_examples": sum(s["distinct_examples"] or 0 for s in summaries),
                "properties": summaries,
            }
        )
    return claims


# --- the parts of a run, and the run ---


def refutes_a_hypothesis(node: PropertyRecord, hypotheses: frozenset[str]) -> bool:
    """A property of research hypotheses alone that failed by assertion or found its experiment too weak: a finding
    (`REFUTED`, `INCONCLUSIVE_AT_THIS_SCALE`), not a failure."""
    findings = (Outcome.FAILED, Outcome.INCONCLUSIVE)
    return node.outcome in findings and bool(node.claims) and set(node.claims) <= hypotheses


def outcome_counts(nodes) -> dict[str, int]:
    """Property runs per outcome, outcomes by name in order."""
    outcomes: dict[str, int] = {}
    for node in nodes:
        outcomes[node.outcome.value] = outcomes.get(node.outcome.value, 0) + 1
    return dict(sorted(outcomes.items()))


def properties_part(evidence: Evidence | None, hypotheses: frozenset[str] = frozenset()) -> list[str]:
    """The properties that reached the module; the suite's own checks are `suite_checks_part`'s."""
    if evidence is None:
        return ["no evidence: the properties were not run"]
    outcomes = outcome_counts(
        node
        for node in evidence.properties
        if not refutes_a_hypothesis(node, hypotheses) and not never_reaches_implementation(node)
    )
    failing = (Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED, Outcome.INCONCLUSIVE)
    reasons = [f"{count(outcomes[o.value], 'property run')} {o.value}" for o in failing if outcomes.get(o.value)]
    if not evidence.properties:
        reasons.append("no property ran")
    return reasons


def suite_checks_part(evidence: Evidence | None, hypotheses: frozenset[str], counts: bool) -> list[str]:
    """The suite's own checks that failed (refuted hypotheses are findings): the run's failure only when it judges
    the reference, the suite itself; a port's run reports them apart from its verdict on the module."""
    if evidence is None or not counts:
        return []
    failed = [
        node.nodeid
        for node in evidence.properties
        if never_reaches_implementation(node) and node.failing and not refutes_a_hypothesis(node, hypotheses)
    ]
    return [f"{count(len(failed), 'suite check')} failed: {', '.join(failed)}"] if failed else []


def claims_part(claims: list[dict]) -> list[str]:
    reasons = [
        f"{c['id']} {c['status']}: {c['reason']}"
        for c in claims
        if c["status"] not in ACCEPTABLE_CLAIM_STATUSES and c["status"] != FAILED
    ]
    if claims and not any(c["status"] in (SHOWN, PARTLY_PROVIDED) for c in claims):
        reasons.append("no claim was shown: no property judged code the module provides and passed")
    failed = [c["id"] for c in claims if c["status"] == FAILED]
    if failed:
        reasons.insert(0, f"claims failed: {', '.join(failed)}")
    return reasons


def judged_names(nodes: list[PropertyRecord]) -> dict[str, dict[str, int]]:
    """Each name of the module's own code a property called -> {"runs": property runs, "failed": of them failing}."""
    judged: dict[str, dict[str, int]] = {}
    for node in nodes:
        for name, record in (node.calls or {}).items():
            if record.get("own"):
                entry = judged.setdefault(name, {"runs": 0, "failed": 0})
                entry["runs"] += 1
                entry["failed"] += node.failing
    return dict(sorted(judged.items()))


def what_was_judged(claims: list[dict], nodes: list[PropertyRecord], implementation: dict | None) -> dict:
    """The run as a verdict on what the module provides: its own names the properties judged (runs, failures),
    those they never reached, the names it inherits or lacks, and the claims by how much of them it provides."""
    implementation = implementation or {}
    judged = judged_names(nodes)
    by_status: dict[str, list[str]] = {}
    for claim in claims:
        by_status.setdefault(claim["status"], []).append(claim["id"])
    return {
        "judged": judged,
        "not_judged": sorted(set(implementation.get("defines") or ()) - set(judged)),
        "inherited": [entry.split(" ")[0] for entry in implementation.get("inherits") or ()],
        "missing": list(implementation.get("missing") or ()),
        "claims": by_status,
    }


def coverage_part(required: list[str], claims: list[dict], judged: dict) -> list[str]:
    """What `required` (claim ids, or protocol families by name) asks of the module and it does not give: a claim
    not shown on its own code, a family name it does not provide itself or no property judged."""
    statuses = {claim["id"]: claim for claim in claims}
    reasons = []
    for wanted in required:
        family = family_named(wanted)
        if family is not None:
            lacking = [
                f"{name} ({'inherited' if name in judged['inherited'] else 'missing'})"
                for name in protocol_members(family)
                if name in judged["inherited"] or name in judged["missing"]
            ]
            unjudged = [name for name in protocol_members(family) if name in judged["not_judged"]]
            lacking += [f"{name} (no property called it)" for name in unjudged]
            if lacking:
                reasons.append(f"required family {family.__name__} not provided: {', '.join(lacking)}")
        elif wanted not in statuses:
            reasons.append(f"required {wanted}: no such claim or protocol family")
        elif statuses[wanted]["status"] != SHOWN:
            claim = statuses[wanted]
            reasons.append(f"required claim {wanted} is {claim['status']}, not shown: {claim['reason']}")
    return reasons


def mutants_part(mutants: dict | None) -> list[str]:
    if mutants is None:
        return ["not run: no mutants.json"]
    reasons = [f"sweep broken for {m['name']}: {m['sweep_error']}" for m in mutants["mutants"] if m.get("sweep_error")]
    if mutants["survived"]:
        reasons.append(f"planted bugs not caught: {', '.join(mutants['survived'])}")
    if mutants.get("missing"):
        reasons.append(f"planted bugs with no sweep result: {', '.join(mutants['missing'])}")
    if not mutants["mutants"]:
        reasons.append("no planted bug was run")
    return reasons


def calibration_part(calibration: dict | None) -> list[str]:
    """The binomial and KS checks of the correct kernels, the size of the worst plans (summed, and of many bins
    bounded), and every power case `power_case_names` names, each passed."""
    if calibration is None:
        return ["not run: no calibration.json"]
    budget = calibration.get("check_budget")
    reasons = []
    for key, label in (("binomial_p_value", "binomial"), ("ks_uniform_p_value", "KS uniformity")):
        value = calibration.get(key)
        if value is None or budget is None:
            reasons.append(f"{label} check not recorded")
        elif value < budget:
            reasons.append(f"{label} check failed: p = {value:.3g} < {budget:.3g}")
    size = calibration.get("size")
    if size is None:
        reasons.append("exact test-size check not recorded")
    elif not size.get("passed"):
        reasons.append(f"a plan's exact size exceeds its alpha: largest size/alpha {size.get('largest_ratio')}")
    large = calibration.get("size_large_df")
    if large is None:
        reasons.append("size bound of a plan of many bins not recorded")
    elif not large.get("passed"):
        reasons.append(f"a plan of many bins exceeds its alpha: size/alpha bound {large.get('largest_ratio')}")
    cases = {case.get("name"): case for case in calibration.get("power_cases") or []}
    missing = [name for name in power_case_names() if name not in cases]
    if missing:
        reasons.append(f"power cases not recorded: {', '.join(missing)}")
    for name, case in cases.items():
        below = case.get("needed") is not None and (case.get("rejections") or 0) < case["needed"]
        if not case.get("passed") or case.get("rejections") is None or below:
            reasons.append(
                f"power case {name}: {case.get('rejections')} of {case.get('runs')} rejected, needs "
                f"{case.get('needed')} (raw model: {case.get('raw_rejections')})"
            )
    return reasons


def budget_part(evidence: Evidence | None) -> list[str]:
    if evidence is None:
        return ["no evidence"]
    budget = evidence.budget
    return [budget.note] if budget is not None and budget.run_failed_by_budget else []


def ledger_part(ledger_problems: list[str], ledger_claims: list[dict], nodes: list[PropertyRecord]) -> list[str]:
    known = {c["id"] for c in ledger_claims}
    unknown = sorted({(claim, n.nodeid) for n in nodes for claim in n.claims if claim not in known})
    return [*ledger_problems, *(f"{nodeid}: claim marker {claim} names no ledger entry" for claim, nodeid in unknown)]


def phases_part(phases: list[Phase] | None, evidence: Evidence | None, run_id: str | None) -> list[str]:
    """Each phase's exit status as expected, and the evidence stamped with this run's id.

    No phases (no run.json: the evidence was written by pytest alone) is no pass: a self-test or a phase that
    failed would leave no other trace in the folder.
    """
    if phases is None:
        return ["no run record (run.json): the phases are unknown, so their exit statuses are not shown"]
    reasons = [f"phase {p.name}: {p.problem}" for p in phases if p.problem]
    if run_id and evidence is not None and evidence.run_id != run_id:
        reasons.append(f"{EVIDENCE_FILE} belongs to run {evidence.run_id}, not this run {run_id}")
    return reasons


def make_verdict(
    evidence: Evidence | None,
    claims: list[dict],
    mutants: dict | None,
    calibration: dict | None,
    ledger_problems: list[str],
    ledger_claims: list[dict],
    phases: list[Phase] | None = None,
    run_id: str | None = None,
    run: dict | None = None,
    required: list[str] | None = None,
) -> dict:
    """The run's verdict: passed only when every part passed. Exit status 0 exactly when passed."""
    nodes = evidence.properties if evidence else []
    hypotheses = frozenset(c["id"] for c in ledger_claims if c.get("hypothesis"))
    counts_suite_checks = judges_reference(run or {"impl": evidence.impl if evidence else None})
    parts = {
        "phases": phases_part(phases, evidence, run_id),
        "properties": properties_part(evidence, hypotheses),
        "claims": claims_part(claims),
        "coverage": coverage_part(
            list(required or ()), claims, what_was_judged(claims, nodes, evidence.implementation if evidence else None)
        ),
        "suite checks": suite_checks_part(evidence, hypotheses, counts_suite_checks),
        "planted bugs": mutants_part(mutants),
        "calibration": calibration_part(calibration),
        "budget": budget_part(evidence),
        "ledger": ledger_part(ledger_problems, ledger_claims, nodes),
    }
    reasons = [f"{name}: {reason}" for name in PARTS for reason in parts[name]]
    verdict = PASSED if not reasons else RUN_FAILED
    return {
        "verdict": verdict,
        "exit_status": 0 if verdict == PASSED else 1,
        "reasons": reasons,
        "parts": {name: {"passed": not parts[name], "reasons": parts[name]} for name in PARTS},
        "outcomes": outcome_counts(nodes),
        "examples": sum((n.hypothesis.examples or 0) if n.hypothesis else 0 for n in nodes),
    }
