"""The planted-bug sweep without a fresh interpreter per planted bug: each judged in a forked pytest session.

A subprocess per planted bug paid its start-up (Python, MLX, Hypothesis, scipy, the plugin: about 5 s of CPU) before
any property ran, most of a mutant's cost. Here one process pays it: it imports what every pytest process imports
before its first test (the plugin and what it reads), evaluates nothing in MLX, and forks one child per planted
module, `workers` at a time; each child runs ``pytest.main`` with the arguments a subprocess was given. A child starts
from the state a subprocess has after loading its plugins, and nothing one child does reaches another. That matters
beyond isolation: Hypothesis draws some choices from constants it finds in the project's loaded modules, so a
session that had imported other planted modules, or the sweep's own code, would draw other examples than the run it
replaces; a child drops the sweep's own module first.

What broke the sweep still breaks it: a pytest exit status other than 0 or 1, a child past `JOB_CPU_LIMIT` of CPU or
`JOB_TIMEOUT` of wall time (killed), a child that died by a signal. Run as
``python selftests/planted_sweep.py PLAN.json`` it is that forking process.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import os
import resource
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOB_CPU_LIMIT = 600
"""CPU seconds one planted module's session may use before the system stops it and the sweep breaks: a limit of
its own work, where a wall clock would count a loaded machine's other work."""
JOB_TIMEOUT = 1800
"""Wall seconds one planted module's session may take before it is killed (a session that waits forever)."""
THIRD_PARTY_PRELOAD = ("mlx_lm.models.cache", "mlx_lm.models.llama", "mlx_lm.generate")
"""Installed modules every child imports (the reference's drafting loop and mlx-lm's models)."""
THIRD_PARTY_PRELOAD_SKIP = ("ncm_verify",)
"""pytest plugins named by entry points that are this project's own (already imported, and local)."""
RESULT_FILE, LOG_FILE = "session.json", "pytest.log"
SWEEP = pytest.StashKey["Sweep"]()
"""The sweep a self-test session started (selftests/conftest.py), stopped at the session's end."""


def session_arguments(job: dict) -> list[str]:
    """The pytest arguments of one job, as a subprocess of the sweep was given them."""
    return [
        *job["files"],
        f"--impl={job['module']}",
        "-q",
        "-p",
        "no:xdist",
        f"--ncm-report-dir={job['report_dir']}",
        *(["--ncm-stop-when-caught"] if job["stop_when_caught"] else []),
        *(f"--ncm-first={named}" for named in job["first"]),
    ]


def judge(job: dict) -> None:
    """In a forked child: one pytest session, its output in its own log; never returns."""
    folder = Path(job["report_dir"])
    exit_status = 3
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (JOB_CPU_LIMIT, resource.RLIM_INFINITY))
        sys.modules["__main__"] = types.ModuleType("__main__")  # as `python -m pytest`'s: no constants of ours
        log = os.open(folder / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        exit_status = int(pytest.main(session_arguments(job)))
        (folder / RESULT_FILE).write_text(json.dumps({"exit_status": exit_status}) + "\n")
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_status)


def write_result(job: dict, **result) -> None:
    (Path(job["report_dir"]) / RESULT_FILE).write_text(json.dumps(result) + "\n")


def record_cost(job: dict, seconds: float, cpu: float) -> None:
    """Add the session's wall and CPU seconds (its own process, from the kernel's accounting) to its result."""
    path = Path(job["report_dir"]) / RESULT_FILE
    if path.is_file():  # a session with no result says why elsewhere (see read_job)
        result = json.loads(path.read_text())
        path.write_text(json.dumps({**result, "wall_seconds": seconds, "cpu_seconds": cpu}) + "\n")


def preload_third_party() -> None:
    """Import, once for every child, the installed packages each child would import itself: pytest's plugins, the
    mlx-lm modules the reference loads and scipy.stats (about 2.3 s of CPU per child). Hypothesis mines
    constants only from modules outside site-packages, so a child draws the examples a subprocess draws."""
    for entry in importlib.metadata.entry_points(group="pytest11"):
        if entry.module.split(".")[0] in THIRD_PARTY_PRELOAD_SKIP:
            continue
        importlib.import_module(entry.module)
    for name in THIRD_PARTY_PRELOAD:
        importlib.import_module(name)
    from ncm_verify.harness import stats  # imported by the plugin already, scipy's statistics left to first use
    from ncm_verify.harness.hypothesis_internals import mines_constants_from

    stats.scipy_stats()

    local = [name for name in THIRD_PARTY_PRELOAD if mines_constants_from(sys.modules[name].__file__ or "")]
    assert not local, f"preloaded modules {local} are local: they would change the examples Hypothesis draws"


def serve(plan_path: Path) -> int:
    """The forking process: every job of the plan in a child of its own, `workers` at a time."""
    plan = json.loads(plan_path.read_text())
    sys.path[0] = str(ROOT)  # what `python -m pytest` run in ROOT has first
    os.chdir(ROOT)
    import ncm_verify.pytest_plugin.plugin  # noqa: F401  # what each pytest process imports as it starts

    preload_third_party()
    # Every child inherits this heap, and each full collection in it (pytest runs three as a session ends) walked
    # all of it again: about 0.09 s each. Frozen, a child's collector sees only what the child made.
    gc.collect()
    gc.freeze()

    pending, running = list(plan["jobs"]), {}
    while pending or running:
        while pending and len(running) < plan["workers"]:
            job = pending.pop(0)
            Path(job["report_dir"]).mkdir(parents=True, exist_ok=True)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                judge(job)
            running[pid] = (job, time.monotonic())
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid:
            job, started = running.pop(pid)
            seconds = round(time.monotonic() - started, 2)
            cpu = round(usage.ru_utime + usage.ru_stime, 2)
            if os.WIFSIGNALED(status) and not (Path(job["report_dir"]) / RESULT_FILE).is_file():
                write_result(job, exit_status=None, signal=os.WTERMSIG(status), seconds=seconds)
            record_cost(job, seconds, cpu)
            exit_status = os.waitstatus_to_exitcode(status)
            print(f"planted sweep: {job['name']}: exit status {exit_status} after {seconds} s ({cpu} s of CPU)")
            continue
        for pid, (job, started) in list(running.items()):
            if time.monotonic() - started > plan["timeout"]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                running.pop(pid)
                write_result(job, exit_status=None, timed_out=plan["timeout"])
        time.sleep(0.05)
    return 0


def order(jobs: list[dict]) -> list[dict]:
    """The jobs with the most property files first, so that the longest do not start last."""
    return sorted(jobs, key=lambda job: -len(job["files"]))


class Sweep:
    """The sweep's forking process, started at once; `results` waits for it and reads what each job left."""

    def __init__(self, jobs: list[dict], scratch: Path, env: dict, workers: int, *, timeout: float = JOB_TIMEOUT):
        self.jobs, self.scratch = jobs, scratch
        scratch.mkdir(parents=True, exist_ok=True)
        plan_path = scratch / "plan.json"
        plan = {"jobs": order(jobs), "workers": max(workers, 1), "timeout": timeout}
        plan_path.write_text(json.dumps(plan, indent=1) + "\n")
        self.log = (scratch / "sweep.log").open("w")
        command = [sys.executable, str(Path(__file__).resolve()), str(plan_path)]
        self.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self._results: dict[str, tuple[dict, str | None]] | None = None

    def results(self) -> dict[str, tuple[dict, str | None]]:
        """Job name -> (its evidence.json, why the sweep broke on it or None)."""
        if self._results is None:
            exit_status = self.process.wait()
            self.log.close()
            self._results = {job["name"]: read_job(job, exit_status, self.scratch) for job in self.jobs}
        return self._results

    def cost(self, name: str) -> dict[str, float]:
        """The wall and CPU seconds job `name`'s session took ({} when it left no result)."""
        job = next(job for job in self.jobs if job["name"] == name)
        from ncm_verify.evidence import read_json

        result = read_json(Path(job["report_dir"]) / RESULT_FILE) or {}
        return {key: result[key] for key in ("wall_seconds", "cpu_seconds") if key in result}

    def stop(self) -> None:
        """Kill the sweep if it still runs (a session that ends before it asked for the results)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def read_job(job: dict, sweep_exit: int, scratch: Path) -> tuple[dict, str | None]:
    """What one job left: its evidence, and why the sweep broke on it (None when its session gave a verdict)."""
    from ncm_verify.evidence import EVIDENCE_FILE, read_json

    folder = Path(job["report_dir"])
    evidence = read_json(folder / EVIDENCE_FILE) or {}
    result = read_json(folder / RESULT_FILE)
    if result is None:
        return evidence, f"not judged: the sweep exited {sweep_exit} before it (see {scratch / 'sweep.log'})"
    if result.get("timed_out"):
        return evidence, f"timed out after {result['timed_out']:g} s"
    if result.get("signal") == signal.SIGXCPU:
        return evidence, f"used more than {JOB_CPU_LIMIT} s of CPU"
    if result.get("signal"):
        return evidence, f"its pytest session died by signal {result['signal']} (see {folder / LOG_FILE})"
    if result["exit_status"] not in (0, 1):
        return evidence, f"pytest exited {result['exit_status']} (not a verdict)"
    return evidence, None


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
