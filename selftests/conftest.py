"""Self-test helpers: where the self-tests leave their verdicts (`ncm_verify.run` reads them).

`make verify` names the folder (``--ncm-selftest-dir``, its self-test cache); xdist workers are handed it by the
controller, so no environment variable carries it.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from planted_sweep import SWEEP

SELFTEST_DIR = pytest.StashKey[Path]()
OWN_SELFTEST_DIR = pytest.StashKey[Path]()
WORKER_INPUT = "ncm_selftest_dir"


def pytest_addoption(parser):
    parser.addoption(
        "--ncm-selftest-dir",
        default=None,
        help="folder for the self-tests' verdicts (mutants.json, calibration.json); default: a fresh one",
    )
    parser.addoption(
        "--ncm-sweep-workers",
        type=int,
        default=2,
        help="processes the planted-bug sweep deals its planted modules to (default: %(default)s)",
    )


def pytest_configure(config):
    """A session `make verify` did not start gets a fresh folder: merging parts left under reports/ by an earlier
    session would overwrite the last run's mutants.json with stale verdicts."""
    if hasattr(config, "workerinput"):
        config.stash[SELFTEST_DIR] = Path(config.workerinput[WORKER_INPUT])
    elif config.getoption("--ncm-selftest-dir"):
        config.stash[SELFTEST_DIR] = Path(config.getoption("--ncm-selftest-dir"))
    else:
        config.stash[SELFTEST_DIR] = config.stash[OWN_SELFTEST_DIR] = Path(
            tempfile.mkdtemp(prefix="ncm-verify-selftests-")
        )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Each xdist worker leaves its parts in the controller's folder."""
    node.workerinput[WORKER_INPUT] = str(node.config.stash[SELFTEST_DIR])


def pytest_unconfigure(config):
    """The fresh folder holds nothing anyone reads once the session's verdicts are printed."""
    sweep = config.stash.get(SWEEP, None)
    if sweep is not None:
        sweep.stop()
    for key in (OWN_SELFTEST_DIR, SWEEP_SCRATCH):
        folder = config.stash.get(key, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def nested_environment_under(profile: str) -> dict[str, str]:
    """The environment for a nested pytest run under a profile, free of this run's report and worker settings."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("NCM_VERIFY_", "PYTEST_XDIST"))}
    return {**kept, "HYPOTHESIS_PROFILE": profile}


@pytest.fixture
def nested_environment():
    return nested_environment_under


SWEEP_SCRATCH = pytest.StashKey[Path]()


def pytest_collection_modifyitems(items):
    """The tests that wait for the planted-bug sweep run last: the others run while its processes work."""
    items.sort(key=lambda item: "sweep" in getattr(item, "fixturenames", ()))


def pytest_collection_finish(session):
    """A collected module that sweeps planted bugs in processes of its own (`start_planted_sweep`) starts them
    now, so that they work while the session's other tests run."""
    if hasattr(session.config, "workerinput") or session.config.option.collectonly:
        return
    users = [item for item in session.items if "sweep" in getattr(item, "fixturenames", ())]
    for module in {id(item.module): item.module for item in users}.values():
        start = getattr(module, "start_planted_sweep", None)
        if start is not None:
            scratch = session.config.stash[SWEEP_SCRATCH] = Path(tempfile.mkdtemp(prefix="ncm-verify-sweep-"))
            workers = session.config.option.ncm_sweep_workers
            session.config.stash[SWEEP] = start(scratch, nested_environment_under("selftest"), workers)


def parts(folder: Path, name: str) -> dict[str, dict]:
    """The JSON parts the self-tests left under `folder`/<name>/, by file stem."""
    folder = folder / name
    return (
        {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
    )


def pytest_sessionfinish(session):
    """Merge the self-tests' verdicts into mutants.json and calibration.json (controller only)."""
    if hasattr(session.config, "workerinput"):
        return
    folder = session.config.stash[SELFTEST_DIR]
    mutants, calibration = parts(folder, "mutants"), parts(folder, "calibration")
    if mutants:
        summary = {"profile": "selftest", "mutants": list(mutants.values())}
        (folder / "mutants.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if calibration:
        planted = [part for stem, part in calibration.items() if stem.startswith("planted")]
        # The report shows one planted deviation in its summary: the one with the most outcomes.
        merged = {
            **calibration.get("nominal", {}),
            "planted": max(planted, key=lambda p: p["df"], default=None),
            "power_cases": planted,
            "size": calibration.get("size"),
            "size_large_df": calibration.get("size large df"),
        }
        (folder / "calibration.json").write_text(json.dumps(merged, indent=2) + "\n")


@pytest.fixture
def reports(request) -> Path:
    folder = request.config.stash[SELFTEST_DIR]
    folder.mkdir(parents=True, exist_ok=True)
    return folder
