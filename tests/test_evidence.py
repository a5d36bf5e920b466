"""The evidence model (`ncm_verify.evidence`): what the plugin writes reads back as written, partial or older
documents read with their defaults, and outcomes print as their plain words."""

from __future__ import annotations

import json

import pytest
from synthetic import POLICY, chi_square_record, node

from ncm_verify.evidence import (
    NOT_APPLICABLE,
    NOT_PROVIDED,
    Evidence,
    Outcome,
    Phase,
    PropertyRecord,
    RunRecord,
    read_json,
)

FAILURE = {
    "phase": "call",
    "kind": "assertion",
    "claims": ["C1"],
    "kernels": ["verify_chain"],
    "message": "the check that failed",
    "falsifying_example": "Falsifying example: test(x=1)",
    "reproduce_failure": None,
    "seed": None,
}


def full_record(nodeid: str, **extra) -> dict:
    """A record with every field the plugin writes for a property that reached its call, in the plugin's order."""
    entry = node(nodeid, ["C1"], **extra)
    entry["hypothesis"] = {
        "examples": 30,
        "failing_examples": 0,
        "invalid_examples": 0,
        "test_cases_per_phase": {"generate": 30},
        "stopped_because": "settings.max_examples=30",
        "explicit_examples": 0,
        "generated_seed": None,
    }
    order = ("nodeid", "property", "outcome", "duration_s", "claims", "hypothesis", "stats", "differences")
    order += ("failure", "skip_reason", "calls", "looked_up", "statistical_tests_per_example")
    return {key: entry.get(key) for key in order} | {k: v for k, v in extra.items() if k not in order}


def test_a_document_as_the_plugin_writes_it_reads_back_key_for_key_in_order():
    document = {
        "schema": "ncm-verify/evidence/1",
        "run_id": "r1",
        "impl": "ncm_verify.reference",
        "implementation": {"module": "ncm_verify.reference"},
        "checkpoint": {"path": "x", "sha256": "0"},
        "profile": "ci",
        "exit_status": 1,
        "environment": {"commit": "c"},
        "policy": POLICY,
        "budget": {
            "planned_tests": 60,
            "chi_square_tests_run": 1,
            "within_plan": True,
            "run_failed_by_budget": False,
            "note": "1 chi-square tests run of 60 planned",
        },
        "properties": [
            full_record("t.py::a", stats=[chi_square_record("t.py::a", 0.5)], looked_up=["verify_chain"]),
            full_record("t.py::b", outcome="failed", failure=FAILURE, looked_up=[]),
            full_record("t.py::c", outcome="xfailed", looked_up=[], xfail_reason="upstream bug #1"),
            {**full_record("t.py::d", looked_up=[]), "reused": {"run_id": "r0", "ran": "then", "key": "k"}},
        ],
        "timing": {"processes": [], "parts_cpu_s": {}, "unit": "CPU seconds"},
    }
    back = Evidence.from_json(json.loads(json.dumps(document)))
    assert back is not None
    assert json.dumps(back.to_json()) == json.dumps(document), "same keys, same order, same values"
    assert [p.outcome for p in back.properties] == [Outcome.PASSED, Outcome.FAILED, Outcome.XFAILED, Outcome.PASSED]
    assert back.properties[1].failing and back.properties[1].failure.kernels == ["verify_chain"]


def test_a_property_that_never_reached_its_call_writes_no_call_fields():
    skipped = {
        "nodeid": "t.py::s[x]",
        "property": "t.py::s",
        "outcome": "not provided",
        "duration_s": 0.0,
        "claims": [],
        "hypothesis": None,
        "stats": [],
        "differences": [],
        "failure": None,
        "skip_reason": f"Skipped: {NOT_PROVIDED} m: it has no verify_tree",
    }
    record = PropertyRecord.from_json(skipped)
    assert record.calls is None and record.to_json() == skipped


def test_partial_documents_read_with_their_defaults():
    record = PropertyRecord.from_json({"nodeid": "t.py::p[a]", "outcome": "passed"})
    assert record.property == "t.py::p" and record.claims == [] and record.hypothesis is None
    assert Evidence.from_json(None) is None
    assert Evidence.from_json({"properties": []}).budget is None
    assert RunRecord.from_json(None).phases is None, "no run.json: the phases are unknown"
    phase = RunRecord.from_json({"phases": [{"name": "properties", "exit_status": 0}]}).phases[0]
    assert phase == Phase("properties", 0)


def test_an_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="'finished'"):
        PropertyRecord.from_json({"nodeid": "t.py::p", "outcome": "finished"})


def test_an_outcome_prints_as_its_word():
    assert f"{Outcome.NOT_APPLICABLE}" == str(Outcome.NOT_APPLICABLE) == "not applicable"
    assert Outcome.NOT_PROVIDED == "not provided" and NOT_APPLICABLE.startswith(Outcome.NOT_APPLICABLE.value)


def test_read_json_is_none_for_a_file_that_is_not_there(tmp_path):
    assert read_json(tmp_path / "absent.json") is None
    (tmp_path / "there.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "there.json") == {"a": 1}


def test_the_worst_bins_are_ranked_by_their_part_of_the_statistic_ties_in_bin_order():
    import numpy as np

    from ncm_verify.evidence.chi_square import WORST_BINS, worst_bin_parts

    expected, observed = [4.0, 0.0, 4.0, 1.0, 2.0, 9.0, 4.0], [6.0, 3.0, 2.0, 2.0, 2.0, 3.0, 6.0]
    parts = worst_bin_parts(expected, observed)
    assert parts == [(5, 4.0), (0, 1.0), (2, 1.0), (3, 1.0), (6, 1.0)], "largest first, equal parts in bin order"
    assert len(parts) == WORST_BINS and (1, 0.0) not in parts, "an empty expected bin counts 0, never inf"
    assert worst_bin_parts(np.array(expected), np.array(observed)) == parts, "the harness passes NumPy arrays"
