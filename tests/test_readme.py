"""The README says what the code does: its port is the file the suite ships, and it names no development history."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readmes_complete_port_is_the_shipped_port_file_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    port = (ROOT / "selftests" / "ports" / "my_residual.py").read_text()
    assert port in blocks, "README's port and selftests/ports/my_residual.py differ: edit both"


def test_the_readme_names_no_issue_numbers_and_ci_runs_its_test_command():
    assert not re.search(r"\bissue #?\d+", README, re.I)
    assert "make test" in README and (ROOT / ".ci" / "run").read_text().rstrip().endswith("make test")


def test_the_readmes_prefix_cache_adapter_is_the_shipped_example_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    example = (ROOT / "src" / "ncm_verify" / "peers" / "prefix_example.py").read_text()
    assert example in blocks, "README's adapter and src/ncm_verify/peers/prefix_example.py differ: edit both"
