"""Declared capabilities: a property marked ``needs(...)`` reads 'not applicable: <reason>' for a module that declares
it lacks the capability, and the verdict counts that as neither a pass nor a failure."""

import json

import pytest
from hypothesis import strategies as st
from synthetic import node

from ncm_verify.evidence import Evidence, PropertyRecord
from ncm_verify.protocol import lacked_capabilities
from ncm_verify.report import status

PEER = """
from ncm_verify.reference import *

CAPABILITIES = {"traceable": "a PyTorch function: mx.compile cannot trace it", "apply": True}


def verify_greedy(target, draft_tokens, *, num_draft=None, validate=True):
    return "mine"
"""

PEER_SUITE = """
import pytest
from hypothesis import strategies as st

@pytest.mark.claim("C11")
@pytest.mark.needs("traceable")
def test_is_traced_by_mx_compile(impl):
    raise AssertionError("must not run: the module cannot be traced")

@pytest.mark.claim("C11")
@pytest.mark.needs("apply")
def test_takes_given_uniforms(impl):
    assert impl.verify_greedy(None, None) == "mine"

@pytest.mark.claim("C7")
def test_needs_nothing(impl):
    assert impl.verify_greedy(None, None) == "mine"
"""


def run_peer_suite(tmp_path, run_pytest, suite: str = PEER_SUITE):
    (tmp_path / "my_peer.py").write_text(PEER)
    (tmp_path / "test_peer.py").write_text(suite)
    (tmp_path / "conftest.py").write_text(
        "def pytest_configure(config):\n    config.addinivalue_line('markers', 'needs: n')\n"
    )
    return run_pytest(
        tmp_path, "-p", "no:xdist", "test_peer.py", f"--impl={tmp_path / 'my_peer.py'}", f"--ncm-report-dir={tmp_path}"
    )


def test_a_property_needing_a_capability_the_module_lacks_is_not_applicable_with_its_reason(
    tmp_path, run_pytest_inprocess
):
    result = run_peer_suite(tmp_path, run_pytest_inprocess)
    assert result.returncode == 0, result.stdout + result.stderr
    nodes = {n["nodeid"].split("::")[1]: n for n in json.loads((tmp_path / "evidence.json").read_text())["properties"]}
    traced = nodes["test_is_traced_by_mx_compile"]
    assert traced["outcome"] == "not applicable", traced
    assert "not applicable: a PyTorch function: mx.compile cannot trace it" in traced["skip_reason"]
    assert nodes["test_takes_given_uniforms"]["outcome"] == "passed", "a capability declared True is had"
    assert nodes["test_needs_nothing"]["outcome"] == "passed"
    assert "1 property runs need what the module declares it cannot do" in result.stdout


def test_a_misspelt_capability_stops_the_run_with_the_known_names(tmp_path, run_pytest_inprocess):
    suite = "import pytest\n\n@pytest.mark.needs('tracable')\ndef test_x(impl):\n    pass\n"
    result = run_peer_suite(tmp_path, run_pytest_inprocess, suite)
    assert result.returncode != 0
    assert "unknown capability tracable" in result.stdout + result.stderr


def test_a_module_without_capabilities_lacks_none():
    import ncm_verify.reference as reference

    assert lacked_capabilities(reference, ("traceable", "apply", "value_error_contract")) == {}
    with pytest.raises(ValueError, match="^needs: unknown capability"):
        lacked_capabilities(reference, ("teleport",))


def test_a_not_applicable_property_is_neither_a_pass_nor_a_failure_of_its_claim_or_the_run():
    claim = {"id": "C11", "statement": "s", "properties": ["t.py::test_a", "t.py::test_b"], "sources": [], "paths": []}
    passed = node("t.py::test_a", claims=["C11"])
    skipped = node("t.py::test_b", claims=["C11"], outcome="not applicable")
    skipped["skip_reason"] = "Skipped: not applicable: a PyTorch function: mx.compile cannot trace it"
    summaries = [
        status.property_summary(PropertyRecord.from_json(n), {"impl": "peer"}, "C11") for n in (passed, skipped)
    ]
    verdict, reason = status.derive_status(claim, summaries)
    assert verdict == status.PARTLY_PROVIDED and verdict in status.ACCEPTABLE_CLAIM_STATUSES, reason
    assert "not applicable to it" in reason and "mx.compile cannot trace it" in reason
    assert status.properties_part(Evidence.from_json({"properties": [passed, skipped], "budget": {}})) == []


def test_a_chain_only_module_is_known_to_provide_only_the_chain_kernel():
    from ncm_verify.protocol import load_implementation
    from ncm_verify.pytest_plugin.implementation import provided_kernels

    assert provided_kernels(load_implementation("ncm_verify.peers.numpy_chain")) == ("chain",)
    assert provided_kernels(load_implementation("ncm_verify.reference")) is None, (
        "a module with every kernel leaves the strategies alone"
    )


def test_kernel_strategies_draw_only_the_kernels_the_module_provides():
    from hypothesis import given, settings

    from ncm_verify.harness.kernels import SAMPLING_KERNELS, SINGLE_ROW_KERNELS
    from ncm_verify.harness.run_state import run_state
    from ncm_verify.harness.strategies import kernel_cases, provided_kernels

    @settings(max_examples=20, database=None)
    @given(
        kernel=provided_kernels(SINGLE_ROW_KERNELS),
        case=kernel_cases(SAMPLING_KERNELS, batch=2, large_vocab=st.just(False)),
    )
    def draws(kernel, case):
        assert kernel.name == "chain" and case.spec.name == "chain"

    state = run_state()
    saved, state.kernels = state.kernels, ("chain",)
    try:
        draws()
    finally:
        state.kernels = saved
