"""The README says what the code does: its port is the file the suite ships, its figures are generated from the
ledger and a real run (`make readme`), and it, docs/ and ledger.json name no machine path or development history."""

import re
from pathlib import Path

import pytest

from ncm_verify import readme
from ncm_verify.report.document import registered_mutants
from ncm_verify.report.ledger import read_ledger

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LEDGER, _ = read_ledger(ROOT / "ledger.json")
SAMPLE = readme.blocks(README).get("sample-run", "")
PROGRESS_LINE = re.compile(r"ncm-verify: \[\d/4\] [a-z ]+: \d+% after \d+ s, about \d+ s left$")
PRINTED = re.findall(r"```\n(.*?)```", SAMPLE, re.S)


def test_the_readmes_complete_port_is_the_shipped_port_file_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    port = (ROOT / "selftests" / "ports" / "my_residual.py").read_text()
    assert port in blocks, "README's port and selftests/ports/my_residual.py differ: edit both"


def test_the_readme_names_no_issue_numbers_and_ci_runs_its_test_command():
    assert not re.search(r"\bissue #?\d+", README, re.I)
    assert "make test" in README and (ROOT / ".ci" / "run").read_text().rstrip().endswith("make test")


def test_the_readmes_claim_count_is_the_ledgers():
    assert readme.blocks(README)["claims"] == readme.claims_sentence(LEDGER), "run `python -m ncm_verify.readme`"


def claim_ids_named(text: str) -> set[str]:
    """Claim ids a text names, ranges ('C1–C4') expanded."""
    named = set()
    for first, last in re.findall(r"\bC(\d+)(?:[–-]C(\d+))?\b", text):
        named.update(f"C{i}" for i in range(int(first), int(last or first) + 1))
    return named


def test_the_readmes_overview_places_every_claim_of_the_ledger():
    overview = README.split("## What it checks", 1)[1].split("\n\n", 2)[1]
    missing = [claim for claim in readme.claim_ids(LEDGER) if claim not in claim_ids_named(overview)]
    assert not missing, f"README's overview of the claims leaves out {missing}: place them in its groups"


def test_the_readmes_sample_run_is_a_passing_run_of_todays_ledger_and_planted_bugs():
    assert len(PRINTED) == 1, "README has no generated sample run: `make readme`"
    lines = PRINTED[0].splitlines()
    stated = int(re.search(r"prints (\d+) lines", SAMPLE)[1])
    assert stated == len(lines), "the README says how many lines its sample run printed"
    # a phase's progress lines (after 2, 4, 8... minutes) are the machine's speed: the rest is the summary
    summary = [line for line in lines if not PROGRESS_LINE.match(line)]
    assert len(summary) <= 60, f"a passing run's summary is {len(summary)} lines, not at most 60"
    assert "ncm-verify: run passed (exit status 0)" in lines
    printed_claims = [m[1] for line in lines if (m := re.match(r"    (C\d+) ", line))]
    assert printed_claims == readme.claim_ids(LEDGER), "the sample run's claims are not the ledger's: `make readme`"
    mutants = len(registered_mutants())
    assert f"  planted bugs: {mutants} of {mutants} caught" in lines, "the planted bugs changed: `make readme`"
    said = [line for line in lines if re.search(r"\bfailed\b", line, re.I)]
    assert not said, f"a passing run's lines say 'failed': {said}"


def test_the_readmes_rerun_example_plans_as_its_sample_run_did():
    planned = re.search(r"over (\d+) planned chi-square tests", PRINTED[0] if PRINTED else "")
    example = re.search(r"--ncm-planned-tests=(\d+)", README.split("## Reproducing a failure", 1)[1])
    assert planned and example and example[1] == planned[1], "the rerun example's planned tests are not the run's"


MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|home|root|Users)/[\w./-]*|\bissues? #?\d+", re.I)
PUBLISHED = ["README.md", "ledger.json", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_page_names_no_machine_path_and_no_tracker_issue(name):
    text = (ROOT / name).read_text()
    found = [f"line {text.count(chr(10), 0, match.start()) + 1}: {match[0]}" for match in MACHINE_PATH.finditer(text)]
    assert not found, f"{name} names machine paths or tracker issues a stranger cannot follow: {found}"


def test_the_machine_path_check_sees_what_it_forbids():
    for text in ("see /work/notes/x.md", "cd /tmp/fresh", "(issue 40)", "Issue #44 found"):
        assert MACHINE_PATH.search(text), text
    for text in ("reports/verify.md", "docs/peers-mlx.md", "a/tmp/b", "tissue 4"):
        assert not MACHINE_PATH.search(text), text


def test_the_sample_is_made_repo_relative_and_only_from_a_make_verify_run():
    root = Path("/somewhere/checkout")
    line = f"    rerun: cd {root} && HYPOTHESIS_PROFILE=ci {root}/.venv/bin/python -m pytest 'properties/a.py::t'"
    assert (
        readme.machine_free(line, root)
        == "    rerun: HYPOTHESIS_PROFILE=ci .venv/bin/python -m pytest 'properties/a.py::t'"
    )
    assert readme.machine_free(f"suite: properties from {root}; reports to {root}/reports", root) == (
        "suite: properties from .; reports to reports"
    )
    block = readme.sample_block(
        "make's echo\nncm-verify: run 1: implementation x\n  claims:\n", "abc1234", "2026-12-07"
    )
    assert "prints 2 lines (commit abc1234, 2026-12-07" in block and "make's echo" not in block
    with pytest.raises(ValueError, match="sample"):
        readme.sample_block("pytest: 3 passed\n", "abc1234", "2026-12-07")


def test_the_readmes_prefix_cache_adapter_is_the_shipped_example_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    example = (ROOT / "src" / "ncm_verify" / "peers" / "prefix_example.py").read_text()
    assert example in blocks, "README's adapter and src/ncm_verify/peers/prefix_example.py differ: edit both"
