"""`make verify` as one readable sequence: check the inputs, run each phase, write the report, exit with its verdict.

    python -m ncm_verify verify [--impl NAME_OR_PATH] [--profile ci] [--reports reports] [--cache DIR] [--jobs 2]

Phases run as subprocesses (pytest), each announced with its place in the run:

1. properties, against the implementation under test, stamped with this run's id. The reference's evidence is
   kept per suite key, profile and seed (derandomized profiles only); a port's run carries from it every property
   that read only names the port inherits, or none, instead of rerunning the same code on the same examples;
2. planted bugs, then calibration and power: the suite's self-tests. They depend on the suite,
   not on the implementation, so their results are cached under a key hashed from the suite's
   sources and environment, reused while nothing changed, and always rerun when ``CI=true``;
3. the report, whose verdict (`report.status.make_verdict`) is the exit status. What the run knew of itself
   (phases, run id, reuse, what ``--require`` demands) is written to run.json first, and the report is built
   from the folder's files alone, as `ncm-verify report` rebuilds it.

Both caches (reference evidence, self-tests) live in a folder of their own (``--cache``, default
``.ncm-verify-cache`` at the checkout's root, or in the current folder for an installed suite), not under the
reports folder: a port's run with its reports elsewhere reuses what the reference's run left.

A bad ``--impl``, ``--profile``, ``--require``, ``--model``, ``--properties`` or ``--jobs`` stops the run before any
phase, with one message, leaving the last report as it was. A run writes its files into a staging folder under the
reports folder and swaps them in together at its end (`swap_in`): an interrupted run leaves the previous report whole.
Each phase's output goes to verify.log; the terminal gets a summary (`PhaseOutput`). The run ends with each phase's
time beside its budget (`PHASE_BUDGETS_S`).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import os
import re
import resource
import runpy
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ncm_verify.environment import checkout_root, git_commit, git_dirty, installed_suite_root, suite_root
from ncm_verify.evidence import (
    BENCH_FILE,
    CALIBRATION_FILE,
    EVIDENCE_FILE,
    MUTANTS_FILE,
    RECORDS_FILE,
    REUSABLE_OUTCOMES,
    REUSE_FILE,
    RUN_FILE,
    VERIFY_HTML,
    VERIFY_JSON,
    VERIFY_LOG,
    VERIFY_MD,
    Evidence,
    Phase,
    PropertyRecord,
    RunRecord,
    read_json,
)
from ncm_verify.harness.concept_checkpoint import describe_checkpoint, judged_line
from ncm_verify.protocol import (
    DEFAULT_IMPLEMENTATION,
    ImplementationError,
    describe_implementation,
    is_path,
    load_implementation,
    own_names,
)
from ncm_verify.report import document as doc
from ncm_verify.report.ledger import THOROUGH_PROFILE, read_ledger, repository_problems
from ncm_verify.report.output import print_report, write_reports
from ncm_verify.report.status import refutes_a_hypothesis, rerun_pythonpath

ROOT = suite_root()
DEFAULT_CACHE = (checkout_root() or Path.cwd()) / ".ncm-verify-cache"
"""The cache folder, unless ``--cache`` names another (`make verify CACHE=...`): at the checkout's root, or in the
current folder for an installed suite (never inside the installed package)."""
PACKAGE = Path(__file__).resolve().parent
SELFTEST_CACHE = "selftests"
"""Folder under the cache holding cached self-test results, one subfolder per key."""
REFERENCE_EVIDENCE = "reference-evidence"
"""Folder under the cache keeping the reference's property evidence per suite key, profile and seed."""
SUITE_SOURCES = ("src/ncm_verify", "properties", "selftests", "tests", "pyproject.toml", "ledger.json")
PLANTED_FILES = ("selftests/test_mutants.py", "selftests/test_mlx_lm_planted.py")
"""The planted-bug self-tests; the rest of selftests/ is calibration and power."""
QUIET_FAILURES = ("--tb=no", "-rN")
"""The properties phase prints no traceback or summary line: the closing summary gives one block per failure, read
from the evidence, and the report keeps each failure's message and example."""
VERIFY_GOAL_S = 240
"""A fresh `make verify` on 2 cores within 4 minutes (`make test`'s 300 s are split in the Makefile)."""
PHASE_BUDGETS_S = {"start": 5, "properties": 145, "planted bugs": 65, "calibration and power": 20, "report": 5}
"""Each phase's share of `VERIFY_GOAL_S` (a fresh run: the self-tests run; reused, they take none of it). A change
that adds a property states its cost; a phase past its budget is printed so, never failed for it."""
PYTEST_PASSED, PYTEST_FAILED = 0, 1
"""pytest exit codes that carry a verdict; 2-5 mean interrupted, internal or usage errors, or nothing collected."""


def budget_lines(seconds: dict[str, float]) -> list[str]:
    """One line per phase beside its budget, then the whole run beside `VERIFY_GOAL_S`."""
    lines = [f"ncm-verify: time by phase beside its budget (a fresh `make verify`: {VERIFY_GOAL_S} s on 2 cores):"]
    for name, spent in [*seconds.items(), ("total", sum(seconds.values()))]:
        budget = PHASE_BUDGETS_S.get(name, VERIFY_GOAL_S if name == "total" else 0)
        over = "  OVER" if spent > budget else ""
        lines.append(f"  {name:<22} {spent:>6.0f} s of {budget:>4} s{over}")
    return lines


class UsageError(ValueError):
    """The run cannot start; the message says why."""


def say(message: str) -> None:
    print(f"ncm-verify: {message}", flush=True)


def check_profile(profile: str):
    """The Hypothesis settings properties/conftest.py registers as `profile`; a UsageError naming it otherwise."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    saved = os.environ.pop("HYPOTHESIS_PROFILE", None)
    known = ()
    try:
        known = runpy.run_path(str(ROOT / "properties" / "conftest.py"))["PROFILES"]
        return settings.get_profile(profile)
    except InvalidArgument:
        raise UsageError(
            f"profile: no Hypothesis profile {profile!r}; choose one of {', '.join(sorted(known))}"
        ) from None
    finally:
        if saved is not None:
            os.environ["HYPOTHESIS_PROFILE"] = saved


def check_required(required: list[str]) -> list[str]:
    """`--require`'s claim ids and protocol families (by class name, any case), each known; a UsageError otherwise."""
    from ncm_verify.protocol import PROTOCOLS, family_named

    claims = [claim["id"] for claim in read_ledger(ROOT / "ledger.json")[0]["claims"]]
    families = {item: family.__name__ for item in required if (family := family_named(item)) is not None}
    unknown = [item for item in required if item not in claims and item not in families]
    if unknown:
        raise UsageError(
            f"require: no claim or protocol family {', '.join(map(repr, unknown))}; claims: {', '.join(claims)}; "
            f"families: {', '.join(family.__name__ for family in PROTOCOLS)}"
        )
    return [item if item in claims else families[item] for item in required]


def suite_key() -> str:
    """Hash of everything the self-tests' results depend on: the suite's sources and the environment."""
    from ncm_verify.environment import describe_environment

    digest = hashlib.sha256()
    for entry in SUITE_SOURCES:
        # an installed suite has no src/: its package is hashed in its place (its data/ is hashed as ROOT's)
        base, path = (PACKAGE.parents[1], PACKAGE) if entry == "src/ncm_verify" else (ROOT, ROOT / entry)
        files = sorted(path.rglob("*.py")) + sorted(path.rglob("*.json")) if path.is_dir() else [path]
        for file in files:
            skipped = "__pycache__" in file.parts or (path == PACKAGE and "data" in file.relative_to(PACKAGE).parts)
            if not skipped and file.is_file():
                digest.update(str(file.relative_to(base)).encode() + b"\0" + file.read_bytes() + b"\0")
    environment = {k: v for k, v in describe_environment().items() if k not in ("commit",)}
    digest.update(json.dumps(environment, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def pytest_command(*args: str, jobs: int) -> list[str]:
    # work stealing: an idle worker takes a busy one's queued properties, so a few long ones do not pile up on one
    workers = ["-n", str(jobs), "--dist", "worksteal"] if jobs > 1 else ["-p", "no:xdist"]
    return [sys.executable, "-m", "pytest", *args, *workers]


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of every finished child process so far, their own children included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


PROGRESS_FIRST_S = 120
"""A phase whose test lines go to the log says how far it is after this long, then each time its time doubles: a
long phase is never silent, and a slow machine's run prints a few lines more, not one a minute."""
FIRST_FAILURE_HEADING = "ncm-verify: first failure"
"""The properties phase's first failure (pytest_plugin.collector): passed through to the terminal as it is found."""
FAILURE_SECTIONS = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
PERCENT = re.compile(r"\[\s*(\d+)%\]")
"""pytest's progress: at a -q line's end, or after an xdist worker's name in -v."""
PYTEST_TALLY = re.compile(r"^=*\s*((?:\d+ \w+(?: \w+)?, )*\d+ \w+(?: \w+)?) in [\d.]+s")


class PhaseOutput:
    """One phase's output as the terminal shows it: the first failure's block at once, a progress line at most every
    `PROGRESS_FIRST_S` seconds, then at twice, four times... that (from pytest's percentages), the rest to the log
    only."""

    def __init__(self, label: str) -> None:
        self.label, self.started, self.next_s = label, time.monotonic(), float(PROGRESS_FIRST_S)
        self.echoing, self.tally = False, ""
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        text = line.rstrip("\n")
        if text.startswith(FIRST_FAILURE_HEADING):
            self.echoing = True
        elif self.echoing and not text.startswith("  "):
            self.echoing = False
        if self.echoing:
            print(text, flush=True)
        if tally := PYTEST_TALLY.match(text.strip()):
            self.tally = tally.group(1)
        percent = PERCENT.search(text)
        now = time.monotonic()
        if percent and now - self.started >= self.next_s and 0 < int(percent.group(1)) < 100:
            done, spent = int(percent.group(1)), now - self.started
            self.next_s = max(2 * self.next_s, spent)
            say(f"{self.label}: {done}% after {spent:.0f} s, about {spent * (100 - done) / done:.0f} s left")

    def failure_sections(self) -> list[str]:
        """pytest's FAILURES and ERRORS sections, to the end of its output: what a failed self-test printed."""
        start = next((i for i, line in enumerate(self.lines) if FAILURE_SECTIONS.match(line.strip())), None)
        return [line.rstrip("\n") for line in self.lines[start:]] if start is not None else []


def run_phase(name: str, step: str, command: list[str], env: dict, log: Path | None = None) -> Phase:
    """Run one phase; record its exit status and whether that status carries a verdict, its wall seconds and its CPU
    seconds (all its processes: on a shared machine the wall clock counts the rest). With a `log`, the phase's output
    goes there and the terminal gets `PhaseOutput`'s share, and in full what a failed phase printed of its failures;
    without one, the output streams as it comes."""
    label = f"[{step}] {name}"
    started, cpu_before = datetime.datetime.now(datetime.timezone.utc), children_cpu_seconds()
    output = PhaseOutput(label)
    if log is None:
        say(f"{label}: {' '.join(command[2:])}")
        exit_status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    else:
        say(f"{label}: running; each test's line goes to the log")
        with log.open("a", encoding="utf-8") as sink:
            sink.write(f"\n===== {label}: {' '.join(command)}\n")
            sink.flush()
            unbuffered = {**env, "PYTHONUNBUFFERED": "1"}  # pytest's lines as they come, not in pipe-sized chunks
            with subprocess.Popen(
                command,
                cwd=ROOT,
                env=unbuffered,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            ) as process:
                assert process.stdout is not None
                for line in process.stdout:
                    sink.write(line)
                    output(line)
            exit_status = process.returncode
    seconds = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    cpu = children_cpu_seconds() - cpu_before
    problem = None
    if exit_status not in (PYTEST_PASSED, PYTEST_FAILED):
        problem = f"pytest exited {exit_status} (interrupted, internal or usage error, or nothing collected)"
    took = f"{seconds:.0f} s ({cpu:.0f} CPU s)"
    if log is None:
        say(f"{label}: exit status {exit_status} after {took}")
    elif name != "properties":  # the properties phase is summed up from its evidence (`properties_line`)
        said = f"{output.tally} in {took}" if output.tally else f"pytest exit status {exit_status} after {took}"
        say(f"{label}: {said}" + ("" if exit_status == PYTEST_PASSED else f"; its failures (log: {log}):"))
        if exit_status != PYTEST_PASSED:
            print("\n".join(output.failure_sections() or [line.rstrip("\n") for line in output.lines[-40:]]))
    phase = Phase(name, exit_status, round(seconds, 1), round(cpu, 1), problem)
    return phase


def selftest_phases(
    folder: Path, jobs: int, env: dict, first_step: int, steps: int, log: Path | None = None
) -> list[Phase]:
    """Planted bugs, then calibration and power, leaving mutants.json and calibration.json in `folder`."""
    into = f"--ncm-selftest-dir={folder}"
    # the sweep deals its planted modules to `jobs` processes of its own; the other planted-bug tests run beside it
    planted = pytest_command(*PLANTED_FILES, into, "-v", f"--ncm-sweep-workers={jobs}", jobs=1)
    others = [f"--ignore={path}" for path in PLANTED_FILES]
    calibration = pytest_command("selftests", *others, into, "-v", jobs=jobs)
    phases = [
        run_phase("planted bugs", f"{first_step}/{steps}", planted, env, log),
        run_phase("calibration and power", f"{first_step + 1}/{steps}", calibration, env, log),
    ]
    for phase in phases:  # a self-test that failed is a verdict the parts show; say so here too
        if phase.exit_status == PYTEST_FAILED:
            phase.problem = "a self-test failed (see planted bugs and calibration)"
    return phases


def cached_selftests(
    reports: Path, cache_root: Path, key: str, jobs: int, env: dict, *, rerun: bool, log: Path | None = None
) -> tuple[list[Phase], dict]:
    """The self-tests' results for the suite hashed as `key`: reused from `cache_root`, or run now (and cached if
    they passed)."""
    cache = cache_root / SELFTEST_CACHE / key
    meta_path = cache / "meta.json"
    if not rerun and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        say(f"[2-3/4] self-tests: reusing results of {meta['ran']} (suite and environment unchanged; {cache})")
        return [Phase.from_json(phase) for phase in meta["phases"]], {**meta, "reused": True, "folder": str(cache)}
    scratch = cache_root / SELFTEST_CACHE / f"{key}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    ran = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    phases = selftest_phases(scratch, jobs, env, 2, 4, log)
    meta = {"key": key, "ran": ran, "phases": [phase.to_json() for phase in phases]}
    (scratch / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    if all(p.exit_status == PYTEST_PASSED for p in phases):
        shutil.rmtree(cache, ignore_errors=True)
        scratch.rename(cache)
    else:
        cache = scratch  # a failing or broken self-test run is never reused
    for name in (MUTANTS_FILE, CALIBRATION_FILE):
        (reports / name).unlink(missing_ok=True)
    return phases, {**meta, "reused": False, "folder": str(cache)}


def copy_selftest_results(reports: Path, cache: dict) -> None:
    """Put the self-tests' files beside the evidence, stamped with the cache key and when they ran."""
    folder = Path(cache["folder"])
    stamp = {"key": cache["key"], "ran": cache["ran"], "reused": cache["reused"]}
    for name in (MUTANTS_FILE, CALIBRATION_FILE):
        target = reports / name
        target.unlink(missing_ok=True)
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            target.write_text(json.dumps({**data, "cache": stamp}, indent=1) + "\n")


def reference_evidence_path(cache_root: Path, key: str, profile: str, seed: int | None) -> Path:
    """Where the reference's property evidence for this suite key, profile and seed is kept."""
    drawn = "derandomized" if seed is None else f"seed-{seed}"
    return cache_root / REFERENCE_EVIDENCE / f"{key}-{profile}-{drawn}.json"


def keep_reference_evidence(reports: Path, target: Path, run_id: str, ran: str) -> None:
    """Store the reference run's property evidence, so that a port's run can reuse what it would repeat."""
    evidence = Evidence.from_json(read_json(reports / EVIDENCE_FILE))
    if evidence is None or evidence.run_id != run_id:
        return
    source = {"run_id": run_id, "ran": ran, "key": target.stem}
    kept = {"source": source, "policy": evidence.policy, "properties": [p.to_json() for p in evidence.properties]}
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_suffix(".partial")
    scratch.write_text(json.dumps(kept, indent=1) + "\n")
    scratch.replace(target)


def reusable_properties(kept: dict, module) -> list[dict]:
    """The reference's property runs that `module` would repeat exactly, with its calls judged as `module`'s.

    A run repeats when every name the property read from the implementation (called or not) is the reference's
    own object in `module`, or when it read none: the same code on the same derandomized examples. Only runs
    that passed, or confirmed a known upstream bug, are carried; anything else runs again.
    """
    reference = load_implementation(DEFAULT_IMPLEMENTATION)
    own = own_names(module)
    absent = object()
    carried = []
    for entry in map(PropertyRecord.from_json, kept["properties"]):
        if entry.outcome not in REUSABLE_OUTCOMES or entry.calls is None or entry.looked_up is None:
            continue
        names = {*entry.calls, *entry.looked_up}
        if all(getattr(module, name, absent) is getattr(reference, name, absent) for name in names):
            entry.calls = {name: {**record, "own": own.get(name, False)} for name, record in entry.calls.items()}
            carried.append(entry.to_json())
    return carried


def selected_nodeid(name: str) -> str:
    """A ``--properties`` name as pytest's node ids spell it: relative to the suite's root where it lies there."""
    path, sep, rest = name.partition("::")
    try:
        path = Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:  # not under the root: kept as given (pytest resolves it from the root anyway)
        pass
    return path + sep + rest


def plan_reuse(
    module, reports: Path, kept_path: Path, *, derandomized: bool, rerun: bool, selected: list[str] | None = None
) -> dict:
    """Which properties this run takes from the reference's cached evidence, and why (none, when it cannot).

    A run of `selected` properties (``--properties``) carries only their evidence, and is planned as the reference
    run was (`planned_tests`): its evidence then reads as a part of that run's, never as a budget overspent.
    """
    if module.__name__ == DEFAULT_IMPLEMENTATION:
        kept = "kept for ports' runs" if derandomized else "not kept: this profile's examples are random"
        return {"reused": 0, "why": f"the reference runs every property (its evidence {kept})"}
    if rerun:
        return {"reused": 0, "why": "CI=true (or --rerun-selftests): every property runs, none reused"}
    if not derandomized:
        return {"reused": 0, "why": "the profile draws random examples: a reference run's are not this run's"}
    kept = read_json(kept_path)
    if kept is None:
        return {
            "reused": 0,
            "why": f"no reference evidence cached for {kept_path.stem} in {kept_path.parent}: every property runs "
            "(`make verify` once, on the reference, with this cache enables reuse)",
        }
    carried = reusable_properties(kept, module)
    if selected:
        from ncm_verify.pytest_plugin.planning import matches

        names = [selected_nodeid(name) for name in selected]
        carried = [entry for entry in carried if any(matches(entry["nodeid"], name) for name in names)]
    (reports / REUSE_FILE).write_text(json.dumps({**kept, "properties": carried}) + "\n")
    source = kept["source"]
    return {
        "reused": len(carried),
        **({"planned_tests": kept["policy"]["planned_tests"]} if selected else {}),
        "from_run": source["run_id"],
        "ran": source["ran"],
        "why": f"{len(carried)} of {len(kept['properties'])} properties read only names this module inherits, "
        f"or none: reused from reference run {source['run_id']} ({source['ran']})",
        "file": str(reports / REUSE_FILE),
    }


VERIFY_FILES = (
    EVIDENCE_FILE,
    RECORDS_FILE,
    REUSE_FILE,
    MUTANTS_FILE,
    CALIBRATION_FILE,
    RUN_FILE,
    VERIFY_LOG,
    VERIFY_JSON,
    VERIFY_MD,
    VERIFY_HTML,
)
"""The files a run owns in its reports folder (bench and peers files are other commands'): replaced together."""
STAGING_PREFIX = ".verify-staging-"
"""A run writes its files into a hidden folder of this name under the reports folder, then swaps them in whole."""


def staging_folder(reports: Path, run_id: str) -> Path:
    """A fresh folder, on the reports folder's file system, for this run's files; the leftovers of a run killed
    before its swap are removed (the report they did not replace is intact)."""
    for stale in reports.glob(STAGING_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = reports / f"{STAGING_PREFIX}{run_id}"
    staging.mkdir(parents=True)
    return staging


def swap_in(staging: Path, reports: Path) -> None:
    """This run's files replace the previous run's in `reports` as one step: each renamed over its old copy (one file
    system), the previous run's others removed, interrupts held until it is done: never a mix of two runs on disk."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        for name in VERIFY_FILES:
            if (staging / name).is_file():
                os.replace(staging / name, reports / name)
            else:
                (reports / name).unlink(missing_ok=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    shutil.rmtree(staging, ignore_errors=True)


def ledger_against_run(reports: Path, *, selected: bool = False) -> list[str]:
    """The ledger checked against the properties this run collected: a property listed nowhere, or whose
    markers disagree with its ledger entry, fails the run as it fails `ncm-verify ledger check`. A `selected` run
    (``--properties``) collects only some: what it did not collect is no disagreement."""
    evidence = Evidence.from_json(read_json(reports / EVIDENCE_FILE))
    if evidence is None:
        return []
    ledger, _ = read_ledger(ROOT / "ledger.json")
    claims_ledger = copy.deepcopy(doc.normalized_claims_ledger(ledger))
    if evidence.profile != THOROUGH_PROFILE:  # deselected under every other profile, so not collected
        for claim in claims_ledger["claims"]:
            claim.pop("thorough_properties", None)
    return repository_problems(
        claims_ledger,
        ROOT,
        [record.to_json() for record in evidence.properties],
        installed=installed_suite_root() is not None,
        selected=selected,
    )


def subprocess_environment(profile: str) -> dict:
    """The phases' environment: this run's profile, and a module named by ``--impl`` found from the current folder
    first, as ``python -m`` finds it; an installed suite keeps Hypothesis's files there too, not in the package."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCM_VERIFY_")}
    env.update(HYPOTHESIS_PROFILE=profile)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *filter(None, [env.get("PYTHONPATH")])])
    if installed_suite_root() is not None:
        env.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path.cwd() / ".hypothesis"))
    return env


def verify(
    impl: str,
    profile: str,
    reports: Path,
    jobs: int,
    *,
    rerun_selftests: bool = False,
    seed: int | None = None,
    cache: Path | None = None,
    model: str | None = None,
    required: list[str] | None = None,
    properties: list[str] | None = None,
    selftests: bool = True,
) -> int:
    """The whole run; returns the exit status (0 passed, 1 failed, 2 could not start). `cache`: where the reference
    evidence and self-test results are kept (default `DEFAULT_CACHE`); `required`: claim ids and protocol families
    the module must provide itself and show (`coverage` part of the verdict); `properties`: property files or node
    ids to run instead of all (a quick look: claims left unrun fail the verdict); `selftests` False skips the
    planted bugs and calibration (the verdict then fails: the suite's teeth are unproven in this run)."""
    if os.getcwd() not in sys.path:  # a module in the current folder is found as `python -m` finds it
        sys.path.insert(0, os.getcwd())
    if is_path(impl):  # the phases run in the suite's folder: a relative path is the caller's
        impl = str(Path(impl).expanduser().resolve())
    try:  # every argument is checked before anything is written: a typo leaves the last report as it was
        profile_settings = check_profile(profile)
        required = check_required(list(required or ()))
        check_arguments(jobs, model, properties)
        module = load_implementation(impl)
        implementation = describe_implementation(module, impl)
    except (UsageError, ImplementationError) as error:
        print(f"ncm-verify: {error}", file=sys.stderr)
        kept = f"the report in {reports} is the previous run's, unchanged" if (reports / VERIFY_JSON).is_file() else ""
        print(f"ncm-verify: stopped before any phase (exit status 2){'; ' + kept if kept else ''}", file=sys.stderr)
        return 2
    started = time.monotonic()
    reports = reports.resolve()
    reports.mkdir(parents=True, exist_ok=True)
    cache = Path(cache or DEFAULT_CACHE).resolve()
    run_id = uuid.uuid4().hex[:12]
    staging = staging_folder(reports, run_id)
    try:  # an interrupted run leaves the previous report as it was, and no half-written one
        exit_status = run_phases(
            Run(run_id, impl, profile, module, implementation, reports, staging, cache, jobs),
            started,
            derandomized=profile_settings.derandomize,
            rerun=rerun_selftests or os.environ.get("CI", "").lower() == "true",
            seed=seed,
            model=model,
            required=required,
            selected=properties,
            selftests=selftests,
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return exit_status


@dataclasses.dataclass(frozen=True)
class Run:
    """What a run is about and where it writes: its files go to `staging`, swapped into `reports` at its end."""

    run_id: str
    impl: str
    profile: str
    module: Any
    implementation: dict
    reports: Path
    staging: Path
    cache: Path
    jobs: int

    @property
    def log(self) -> Path:
        return self.staging / VERIFY_LOG


def check_arguments(jobs: int, model: str | None, selected: list[str] | None) -> None:
    """The arguments a run could otherwise only find wrong after minutes: a UsageError naming the first."""
    if jobs < 1:
        raise UsageError(f"jobs: expected a positive number of pytest workers, got {jobs}")
    if model is not None and not Path(model).expanduser().is_file():
        raise UsageError(f"model: no checkpoint file {model!r}")
    for name in selected or ():
        path = Path(name.partition("::")[0]).expanduser()
        if not path.exists() and not (ROOT / path).exists():
            raise UsageError(f"properties: no property file or folder {name.partition('::')[0]!r}")


def run_phases(
    run: Run,
    started: float,
    *,
    derandomized: bool,
    rerun: bool,
    seed: int | None,
    model: str | None,
    required: list[str],
    selected: list[str] | None,
    selftests: bool,
) -> int:
    """The phases, the report written into `run.staging` and swapped in whole; returns the verdict's exit status."""
    staging, impl, profile = run.staging, run.impl, run.profile
    say(
        f"run {run.run_id}: implementation {run.implementation['module']} ({run.implementation['path']}), "
        f"profile {profile}"
    )
    say(
        f"suite: properties and self-tests from {ROOT}; cache {run.cache}; reports to {run.reports}, every test's "
        f"line in {VERIFY_LOG} there when the run ends (until then {run.log})"
    )
    env = subprocess_environment(profile)
    # a seed redraws a derandomized profile's examples reproducibly; a random profile's never repeat
    key = suite_key()  # one key for the whole run: the reference evidence and the self-tests are filed under it
    # another checkpoint's model-level evidence is not the default one's: filed apart
    checkpoint = describe_checkpoint(model)
    evidence_key = key if model is None else f"{key}-model-{checkpoint['sha256'][:16]}"
    kept_path = reference_evidence_path(run.cache, evidence_key, profile, seed)
    say(f"[1/4] properties: model-level path (b) judges {judged_line(checkpoint)}")
    reuse = plan_reuse(run.module, staging, kept_path, derandomized=derandomized, rerun=rerun, selected=selected)
    if reuse["reused"] or run.module.__name__ != DEFAULT_IMPLEMENTATION:  # the reference's: said in its summary
        say(f"[1/4] properties: {reuse['why']}")
    command = pytest_command(
        *(selected or ["properties"]),
        "-q",
        *QUIET_FAILURES,
        f"--impl={impl}",
        f"--ncm-report-dir={staging}",
        f"--ncm-run-id={run.run_id}",
        *([f"--hypothesis-seed={seed}"] if seed is not None else []),
        *([f"--ncm-model={Path(model).expanduser().resolve()}"] if model is not None else []),
        *([f"--ncm-reuse={reuse['file']}"] if reuse.get("file") else []),
        *([f"--ncm-planned-tests={reuse['planned_tests']}"] if reuse.get("planned_tests") else []),
        jobs=run.jobs,
    )
    ran = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    start_s = time.monotonic() - started
    phases = [run_phase("properties", "1/4", command, env, run.log)]
    say(f"[1/4] properties: {properties_line(staging, phases[0])}")
    if phases[0].problem:  # no evidence tells why: say how to see the tracebacks this phase did not print
        traced = f"cd {ROOT} && HYPOTHESIS_PROFILE={profile} {sys.executable} -m pytest properties -q -p no:xdist"
        say(f"[1/4] properties: {phases[0].problem}; its last lines (the rest in the log); tracebacks:")
        say(f"  {traced} --impl={impl}")
        print("\n".join(run.log.read_text(encoding="utf-8").splitlines()[-20:]), flush=True)
    completed = phases[0].exit_status in (PYTEST_PASSED, PYTEST_FAILED)
    if run.module.__name__ == DEFAULT_IMPLEMENTATION and derandomized and completed:
        keep_reference_evidence(staging, kept_path, run.run_id, ran)
    # the self-tests choose the profiles of their nested runs themselves; PROFILE does not reach them
    selftest_env = {k: v for k, v in env.items() if k != "HYPOTHESIS_PROFILE"}
    selftest_cache: dict = {"key": key, "ran": None, "reused": False}
    if selftests:
        selftest_phases, selftest_cache = cached_selftests(
            staging, run.cache, key, run.jobs, selftest_env, rerun=rerun, log=run.log
        )
        phases += selftest_phases
        copy_selftest_results(staging, selftest_cache)
    else:
        say("[2-3/4] self-tests: skipped (--no-selftests): the verdict fails, the suite's teeth unproven here")
    say("[4/4] report")
    report_started = time.monotonic()
    facts = RunRecord(
        run_id=run.run_id,
        phases=phases,
        suite_commit=git_commit(ROOT),
        suite_dirty=git_dirty(ROOT),
        selftests={k: selftest_cache[k] for k in ("key", "ran", "reused")},
        reuse={k: v for k, v in reuse.items() if k != "file"},
        ledger_problems=ledger_against_run(staging, selected=bool(selected)),
        required=required,
        rerun_from={"root": str(ROOT), "python": sys.executable, **rerun_pythonpath(impl, Path.cwd(), ROOT)},
    )
    (staging / RUN_FILE).write_text(json.dumps(facts.to_json(), indent=1) + "\n")
    if (run.reports / BENCH_FILE).is_file():  # the last `make bench`'s figures, read by the report (not swapped)
        shutil.copyfile(run.reports / BENCH_FILE, staging / BENCH_FILE)
    document = write_reports(staging)  # from the files alone, as `ncm-verify report` rebuilds it
    swap_in(staging, run.reports)
    print_report(document, run.reports)
    spent = {"start": start_s, **{p.name: p.seconds or 0.0 for p in phases}}
    if not selftest_cache["ran"] or selftest_cache.get("reused"):  # reused or skipped: no time spent on them
        spent.update({"planted bugs": 0.0, "calibration and power": 0.0})
    print("\n".join(budget_lines({**spent, "report": time.monotonic() - report_started})), flush=True)
    return document.verdict.exit_status


READ_AS = {"failed": "FAILED", "error": "ERROR", "xfailed": "known upstream bugs (strict xfail)"}
"""The properties phase's outcomes as its terminal line names them."""


def properties_line(staging: Path, phase: Phase) -> str:
    """The properties phase in one line from its evidence: runs by outcome, refuted hypotheses as findings (a
    result, not a failure), its time."""
    took = f"{phase.seconds or 0:.0f} s ({phase.cpu_s or 0:.0f} CPU s)"
    evidence = Evidence.from_json(read_json(staging / EVIDENCE_FILE))
    if evidence is None:
        return f"no evidence after {took} (pytest exit status {phase.exit_status})"
    ledger, _ = read_ledger(ROOT / "ledger.json")
    hypotheses = frozenset(claim["id"] for claim in ledger["claims"] if claim.get("hypothesis"))
    tally: dict[str, int] = {}
    for node in evidence.properties:
        said = READ_AS.get(node.outcome.value, node.outcome.value)
        if refutes_a_hypothesis(node, hypotheses):  # a result of the run, not a failure
            said = "findings refuting " if node.outcome.value == "failed" else "inconclusive findings on "
            said += ", ".join(node.claims)
        tally[said] = tally.get(said, 0) + 1
    parts = [f"{number} {said}" for said, number in sorted(tally.items(), key=lambda item: item[0] != "passed")]
    return f"{len(evidence.properties)} property runs in {took}: {', '.join(parts) or 'none'}"
