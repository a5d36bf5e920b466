"""An installed package carries the ledger and fixtures: its data/ links resolve to the checkout's files."""

from pathlib import Path

from ncm_verify.environment import suite_root
from ncm_verify.reference.ncm.config import FIXTURES
from ncm_verify.report.ledger import PACKAGED_LEDGER

ROOT = Path(__file__).resolve().parents[1]


def test_the_packaged_ledger_is_the_checkouts_ledger():
    assert PACKAGED_LEDGER.read_bytes() == (ROOT / "ledger.json").read_bytes(), f"{PACKAGED_LEDGER} differs"


def test_the_packaged_fixtures_are_the_checkouts_fixtures():
    packaged = {path.name: path.read_bytes() for path in FIXTURES.glob("*.json")}
    checkout = {path.name: path.read_bytes() for path in (ROOT / "fixtures").glob("*.json")}
    assert packaged and packaged == checkout, f"packaged {sorted(packaged)} vs checkout {sorted(checkout)}"


def test_the_suite_runs_from_the_checkout_holding_the_package():
    assert suite_root() == ROOT
