"""The protocol written once as Protocol classes: the name lists, the reference's exports, a partial port."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import ncm_verify.reference as reference
from ncm_verify.protocol import (
    LEVEL_DRAFT_NAMES,
    NCM_NAMES,
    PROTOCOL_NAMES,
    PROTOCOLS,
    BlockVerification,
    SpeculativeKernels,
    TreeVerification,
    protocol_members,
)
from ncm_verify.report.ledger import kernel_claims, load_ledger

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda protocol: protocol.__name__)
def test_the_reference_exports_every_name_of_each_protocol_family(protocol):
    missing = [name for name in protocol_members(protocol) if getattr(reference, name, None) is None]
    assert not missing, f"{protocol.__name__} names ncm_verify.reference lacks: {missing}"


def test_the_reference_exports_exactly_the_protocol_names_and_level_drafting_is_one_of_them():
    assert set(LEVEL_DRAFT_NAMES) <= set(PROTOCOL_NAMES), "level drafting is part of the protocol"
    assert len(set(PROTOCOL_NAMES)) == len(PROTOCOL_NAMES), f"a name in two families: {PROTOCOL_NAMES}"
    assert sorted(reference.__all__) == sorted(PROTOCOL_NAMES), "reference.__all__ against the Protocol classes"


KERNEL_FAMILIES = (SpeculativeKernels, TreeVerification, BlockVerification)


@pytest.mark.parametrize("protocol", KERNEL_FAMILIES, ids=lambda protocol: protocol.__name__)
def test_the_reference_kernels_take_exactly_the_protocols_parameters(protocol):
    """A port reads the reference as the contract: no parameter beyond the protocol's (the seams are private)."""
    for name in protocol_members(protocol):
        wanted = [(p.name, p.kind) for p in inspect.signature(getattr(protocol, name)).parameters.values()][1:]
        given = [(p.name, p.kind) for p in inspect.signature(getattr(reference, name)).parameters.values()]
        assert given == wanted, f"reference.{name}{inspect.signature(getattr(reference, name))} against the protocol"


def test_every_protocol_member_says_what_it_is_in_one_line():
    for protocol in PROTOCOLS:
        for name in protocol_members(protocol):
            doc = (getattr(protocol, name).__doc__ or "").strip()
            assert doc and "\n" not in doc, f"{protocol.__name__}.{name}: docstring {doc!r}"


def test_each_kernel_the_ledger_attributes_to_a_claim_is_a_protocol_name():
    claims = kernel_claims(load_ledger(ROOT / "ledger.json"))
    assert claims, "the ledger lists no claim's kernels"
    assert set(claims) <= set(PROTOCOL_NAMES), sorted(set(claims) - set(PROTOCOL_NAMES))


LEVEL_LESS_PORT = f'''
"""A port of the NCM model and cache, re-exported from the reference, without level drafting."""
from ncm_verify.reference import {", ".join(NCM_NAMES)}
'''


def test_a_port_without_level_drafting_gets_not_provided_for_the_level_drafting_properties(tmp_path, in_process_pytest):
    (tmp_path / "level_less_port.py").write_text(LEVEL_LESS_PORT)
    result = in_process_pytest(
        ROOT,
        *("properties/test_level_drafting.py", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-x"),
        f"--impl={tmp_path / 'level_less_port.py'}",
        f"--ncm-report-dir={tmp_path / 'r'}",
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    nodes = json.loads((tmp_path / "r" / "evidence.json").read_text())["properties"]
    outcomes = {node["nodeid"]: node["outcome"] for node in nodes}
    assert outcomes and set(outcomes.values()) == {"not provided"}, outcomes
