"""Planted bugs must make the suite fail: each mutant is caught by some property."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from ncm_verify.mutants import MUTANTS, PREFIX_CACHE_MUTANTS

pytestmark = pytest.mark.teeth

ROOT = Path(__file__).resolve().parent.parent
PROPERTY_FILES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "properties").glob("test_*.py"))
PREFIX_PROPERTIES = [path for path in PROPERTY_FILES if "test_prefix" in path]
# test_mlx_lm_loop.py judges mlx-lm's code and the exact verifier, never --impl: a mutant cannot change it
KERNEL_PROPERTIES = [path for path in PROPERTY_FILES if "test_prefix" not in path and "test_mlx_lm_loop" not in path]
SWEEP_TIMEOUT = 600


def run_properties(module: str, files: list[str], scratch: Path, env: dict) -> tuple[list[str], list[str]]:
    """Run the properties in `files` against `module`; return (failed, passed) node ids."""
    junit = scratch / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", *files, f"--impl={module}", "-q", "-p", "no:xdist",
         f"--junitxml={junit}", f"--ncm-report-dir={scratch}"],
        cwd=ROOT, env=env, capture_output=True, timeout=SWEEP_TIMEOUT, check=False,
    )
    failed, passed = [], []
    for case in ElementTree.parse(junit).iter("testcase"):
        node = case.get("classname").replace(".", "/") + ".py::" + case.get("name")
        broken = case.find("failure") is not None or case.find("error") is not None
        (failed if broken else passed).append(node)
    return failed, passed


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_planted_bug_is_caught_by_some_property(name, tmp_path, reports, nested_environment):
    module = f"ncm_verify.mutants.{name}"
    files = PREFIX_PROPERTIES if name in PREFIX_CACHE_MUTANTS else KERNEL_PROPERTIES
    failed, passed = run_properties(module, files, tmp_path, nested_environment("selftest"))
    verdict = {
        "name": name, "module": module, "description": MUTANTS[name],
        "caught": bool(failed), "caught_by": failed, "failed": failed, "passed": passed,
    }
    (reports / "mutants").mkdir(exist_ok=True)
    (reports / "mutants" / f"{name}.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    assert passed or failed, f"no property ran against {module}"
    assert failed, f"planted bug {name} ({MUTANTS[name]}) passed every property: {passed}"
