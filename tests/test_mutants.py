"""Planted bugs must make the suite fail: each mutant is caught by some property."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from ncm_verify.mutants import MUTANTS

pytestmark = pytest.mark.teeth

ROOT = Path(__file__).resolve().parent.parent
KERNEL_PROPERTIES = sorted(
    str(path.relative_to(ROOT)) for path in (ROOT / "properties").glob("test_*.py") if not path.name.startswith("test_prefix")
)
SWEEP_TIMEOUT = 600


def run_properties(module: str, scratch: Path) -> tuple[list[str], list[str]]:
    """Run the kernel properties against `module`; return (failed, passed) node ids."""
    junit = scratch / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCM_VERIFY_", "PYTEST_XDIST"))}
    env["HYPOTHESIS_PROFILE"] = "selftest"
    subprocess.run(
        [sys.executable, "-m", "pytest", *KERNEL_PROPERTIES, f"--impl={module}", "-q", "-p", "no:xdist",
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
def test_every_planted_bug_is_caught_by_some_property(name, tmp_path, reports):
    module = f"ncm_verify.mutants.{name}"
    failed, passed = run_properties(module, tmp_path)
    verdict = {
        "name": name, "module": module, "description": MUTANTS[name],
        "caught": bool(failed), "caught_by": failed, "failed": failed, "passed": passed,
    }
    (reports / "mutants").mkdir(exist_ok=True)
    (reports / "mutants" / f"{name}.json").write_text(json.dumps(verdict, indent=2, sort_keys=True) + "\n")
    assert passed or failed, f"no property ran against {module}"
    assert failed, f"planted bug {name} ({MUTANTS[name]}) passed every property: {passed}"
