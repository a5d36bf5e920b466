"""The suite used from another repository: a wheel built from this checkout, installed into a fresh venv outside it,
judges a user's own module with the properties, self-tests and report it carries, writing into the user's folder.

uv builds and installs the wheel offline. Its dependencies are the ones this checkout's venv already holds (a .pth
line, after the fresh venv's own site-packages), with their bytecode: installing and compiling MLX, scipy and
transformers again would be most of the test's time and test nothing of the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PORT = ROOT / "selftests" / "ports" / "plain_cumsum_chain.py"
PROPERTY = "properties/test_apply_exact.py::test_apply_chain_takes_the_float64_steps_decisions_on_drawn_uniforms"


def uv() -> str:
    """The uv `make install` put beside the venv, else one on PATH."""
    found = ROOT / ".venv" / "uv" / "bin" / "uv"
    if found.is_file():
        return str(found)
    on_path = shutil.which("uv")
    assert on_path, "uv is needed to build and install the wheel offline: run `make install`"
    return on_path


def run(command: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def test_a_wheel_installed_in_another_project_judges_its_module_from_there(tmp_path):
    # the user's environment: nothing of this checkout's venv but its dependencies (never its editable install)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "NCM_VERIFY_", "UV_"))}
    env.update(UV_OFFLINE="1", PYTHONPYCACHEPREFIX=str(ROOT / ".venv" / "pycache"))
    wheels, venv, project = tmp_path / "wheels", tmp_path / "venv", tmp_path / "project"
    built = run([uv(), "build", "--wheel", "--quiet", "--out-dir", str(wheels), str(ROOT)], ROOT, env)
    wheel = next(wheels.glob("ncm_verify-*.whl"), None)
    assert wheel is not None, built.stderr
    run([uv(), "venv", "--quiet", "--python", sys.executable, str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    run([uv(), "pip", "install", "--quiet", "--no-deps", "--python", python, str(wheel)], tmp_path, env)
    (site,) = (venv / "lib").glob("python*/site-packages")
    (dependencies,) = (ROOT / ".venv" / "lib").glob("python*/site-packages")
    (site / "checkout_dependencies.pth").write_text(f"{dependencies}\n")  # nested .pth files (the editable
    # install's finder) are not read from a path a .pth adds: ncm_verify comes from the wheel alone
    (project / "mypkg").mkdir(parents=True)
    (project / "mypkg" / "__init__.py").write_text("")
    shutil.copy(PORT, project / "mypkg" / "kernels.py")

    verify = [str(venv / "bin" / "ncm-verify"), "verify", "--impl", "mypkg.kernels", "--profile", "dev", "--jobs", "1"]
    done = run([*verify, "--properties", PROPERTY, "--no-selftests"], project, env)

    installed = site / "ncm_verify" / "data"
    assert f"suite: properties and self-tests from {installed}" in done.stdout, done.stdout
    report = json.loads((project / "reports" / "verify.json").read_text())
    (claim,) = [claim for claim in report["claims"] if claim["id"] == "C5"]
    (judged,) = [p for p in claim["properties"] if p["nodeid"] == PROPERTY]
    assert judged["outcome"] == "passed" and judged["calls"]["apply_chain"]["own"], judged["calls"]
    assert report["run_facts"]["implementation"]["path"] == str(project / "mypkg" / "kernels.py")
    # a narrowed run is no pass: the verdict fails for exactly what it left out, and for nothing else
    parts = report["run"]["parts"]
    assert {name for name, part in parts.items() if not part["passed"]} == {"claims", "planted bugs", "calibration"}
    assert parts["planted bugs"]["reasons"] == ["not run: no mutants.json"] and done.returncode == 1
    assert str(ROOT) not in (project / "reports" / "verify.md").read_text(), "nothing read from the checkout"
    # the self-tests ship too, and collect where the installed suite runs them
    selftests = run([python, "-m", "pytest", "selftests", "--collect-only", "-q"], installed, env)
    assert selftests.returncode == 0 and " collected" in selftests.stdout.splitlines()[-1], selftests.stdout[-500:]
