"""The ledger check: ledger.json conforms to its schema and agrees with what pytest collects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ncm_verify.report.ledger import (
    collect_properties,
    load_ledger,
    repository_problems,
    schema_problems,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ledger() -> dict:
    """The raw JSON, so that each test reports its own problems."""
    return json.loads((ROOT / "ledger.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def inventory() -> list[dict]:
    return collect_properties(ROOT)


def test_ledger_parses_against_its_schema(ledger):
    problems = schema_problems(ledger)
    assert problems == [], "\n".join(problems)
    assert load_ledger(ROOT / "ledger.json") == ledger


def test_ledger_names_sources_s01_onwards_and_claims_c1_onwards_in_order(ledger):
    """S01-S20 and C1-C10 of DESIGN.md, then the sources and claims added since (C11, the protocol contract, ...)."""
    sources = [s["id"] for s in ledger["sources"]]
    assert len(sources) >= 20 and sources == [f"S{i:02d}" for i in range(1, len(sources) + 1)]
    ids = [c["id"] for c in ledger["claims"]]
    assert len(ids) >= 11 and ids == [f"C{i}" for i in range(1, len(ids) + 1)]
    assert "protocol contract" in ledger["claims"][10]["statement"]


def test_every_claim_is_checked_by_a_property_or_says_why_not(ledger):
    for claim in ledger["claims"]:
        assert claim["properties"] or claim.get("not_checkable"), claim["id"]


def test_ledger_agrees_with_the_properties_pytest_collects(ledger, inventory):
    """Listed ids are collected, collected properties are listed, markers match, paths exist."""
    assert inventory, "pytest collected no property"
    problems = repository_problems(ledger, ROOT, inventory)
    assert problems == [], "\n".join(problems)


def valid_ledger() -> dict:
    return {
        "schema": "ncm-verify/ledger/1",
        "sources": [
            {
                "id": "S01",
                "title": "t",
                "url": "https://example.org/a",
                "kind": "paper",
                "read_scope": "abstract",
                "supports": "s",
            }
        ],
        "claims": [
            {
                "id": "C1",
                "statement": "s",
                "sources": ["S01"],
                "paths": [],
                "properties": ["properties/test_a.py::test_b"],
            },
            {
                "id": "C2",
                "statement": "s",
                "sources": [],
                "paths": [],
                "properties": [],
                "not_checkable": "a hypothesis",
            },
        ],
    }


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (lambda d: d["claims"][0].update(status="shown"), "unknown field 'status'"),
        (lambda d: d["claims"][0]["sources"].append("S99"), "source 'S99' is not in sources"),
        (lambda d: d["claims"][0]["properties"].append("properties/test_a.py::test_c[1]"), "without parametrization"),
        (lambda d: d["claims"][1].pop("not_checkable"), "no not_checkable reason says why"),
        (lambda d: d["sources"][0].pop("supports"), "missing 'supports'"),
        (lambda d: d["sources"].append(dict(d["sources"][0])), "appears more than once"),
        (lambda d: d["sources"][0].update(url="example.org"), "not an http(s) URL"),
        (lambda d: d.update(schema="other"), "ledger.schema"),
        (lambda d: d["claims"][0].update(kernels=["verify_chian"]), "kernel 'verify_chian' is not a protocol name"),
        (
            lambda d: [claim.update(kernels=["verify_chain"]) for claim in d["claims"]],
            "kernel 'verify_chain' is listed under more than one claim",
        ),
    ],
)
def test_schema_check_names_what_is_wrong(break_it, expected):
    ledger = copy.deepcopy(valid_ledger())
    assert schema_problems(ledger) == []
    break_it(ledger)
    problems = schema_problems(ledger)
    assert any(expected in problem for problem in problems), problems


def test_repository_check_finds_unlisted_uncollected_and_mismatched_properties(tmp_path):
    (tmp_path / "properties").mkdir()
    (tmp_path / "properties" / "test_x.py").write_text("")
    ledger = valid_ledger()
    inventory = [
        {"nodeid": "properties/test_a.py::test_b[1]", "property": "properties/test_a.py::test_b", "claims": ["C2"]},
        {"nodeid": "properties/test_a.py::test_new", "property": "properties/test_a.py::test_new", "claims": []},
    ]
    ledger["claims"][0]["properties"].append("properties/test_a.py::test_gone")
    ledger["claims"][0]["paths"].append("src/missing.py")
    problems = "\n".join(repository_problems(ledger, tmp_path, inventory))
    assert "test_gone: listed under C1 but pytest does not collect it" in problems
    assert "test_new: collected but listed under no claim" in problems
    assert "test_b: its claim markers say ['C2'], the ledger lists it under ['C1']" in problems
    assert "properties/test_x.py: no property of this file is named" in problems
    assert "path src/missing.py does not exist" in problems
