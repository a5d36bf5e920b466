"""The pytest plugin, run in-process by pytester: the implementation option and fixture, the evidence it writes,
the chi-square tests it plans from the statistical markers, and the run state it gives the harness."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# pytester's in-process runs drop the modules they imported, and MLX aborts when imported twice in one process:
# whatever the suites below import is imported here first, so that it stays.
import ncm_verify.mutants.ratio_inverted  # noqa: F401
import ncm_verify.reference  # noqa: F401
from ncm_verify import checks, hypothesis_internals  # noqa: F401
from ncm_verify.run_state import RECORDS_FILE, run_state

MARKERS = """
[pytest]
markers =
    claim: c
    statistical: s
"""


@pytest.fixture
def suite(pytester):
    """Write a test file into pytester's folder, with the suite's markers registered; returns the runner."""
    pytester.makeini(MARKERS)

    def run(source: str, *args: str) -> pytest.RunResult:
        pytester.makepyfile(test_suite=source)
        return pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", *args)

    return run


def evidence_of(pytester) -> dict:
    return json.loads((pytester.path / "reports" / "evidence.json").read_text())


IMPL_NAME = """
def test_sees_the_module_under_test(impl):
    assert impl.__name__ == "{module}" and callable(impl.verify_chain)
"""


@pytest.mark.parametrize("module", ["ncm_verify.reference", "ncm_verify.mutants.ratio_inverted"])
def test_the_impl_fixture_is_the_module_the_impl_option_names(suite, module):
    result = suite(IMPL_NAME.format(module=module), f"--impl={module}")
    result.assert_outcomes(passed=1)
    assert f"implementation under test {module}" in result.stdout.str()


def test_an_impl_that_cannot_be_imported_stops_the_session_before_any_test(suite):
    result = suite(IMPL_NAME, "--impl=ncm_verify.mutants.no_such_mutant")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot import" in result.stderr.str() and "test_sees_the_module_under_test" not in result.stdout.str()


EVIDENCE = """
import numpy as np
import pytest
from ncm_verify import checks, evidence, stats

@pytest.mark.claim("C1")
def test_records_a_difference_and_a_chi_square_result():
    evidence.record_difference("gap", 0.25, 1.0)
    evidence.record_difference("gap", 0.5, 1.0)
    evidence.record_difference("gap", 0.125, 1.0)
    plan = stats.make_plan(np.array([0.5, 0.5]))
    outcomes = np.random.default_rng(0).choice(2, size=plan.n, p=[0.5, 0.5])
    checks.assert_fits(stats.chi_square_test("coin", outcomes, plan))

@pytest.mark.claim("C2")
def test_fails_a_check(impl):
    impl.verify_chain
    assert 1 == 2, "the check that failed"
"""


def test_each_test_leaves_its_largest_difference_its_records_and_its_outcome_in_the_evidence(suite, pytester):
    result = suite(EVIDENCE, f"--ncm-report-dir={pytester.path / 'reports'}", "--ncm-run-id=r1")
    result.assert_outcomes(passed=1, failed=1)
    evidence = evidence_of(pytester)
    assert evidence["run_id"] == "r1" and evidence["impl"] == "ncm_verify.reference"
    nodes = {node["nodeid"]: node for node in evidence["properties"]}
    recorded = nodes["test_suite.py::test_records_a_difference_and_a_chi_square_result"]
    assert recorded["outcome"] == "passed" and recorded["claims"] == ["C1"]
    assert [(d["check"], d["difference"]) for d in recorded["differences"]] == [("gap", 0.5)]
    assert [r["test"] for r in recorded["stats"]] == [recorded["nodeid"]]
    assert recorded["calls"] == {}, "a test without the impl fixture called no kernel"
    failed = nodes["test_suite.py::test_fails_a_check"]
    assert failed["outcome"] == "failed" and failed["failure"]["kind"] == "assertion"
    assert "the check that failed" in failed["failure"]["message"]
    assert failed["looked_up"] == ["verify_chain"] and failed["differences"] == [] and failed["stats"] == []
    lines = (pytester.path / "reports" / RECORDS_FILE).read_text().splitlines()
    assert [json.loads(line)["test"] for line in lines] == [recorded["nodeid"]], "stats.jsonl: one line per record"


def test_without_a_report_folder_no_evidence_is_written(suite, pytester):
    suite(EVIDENCE).assert_outcomes(passed=1, failed=1)
    assert not (pytester.path / "reports").exists()


STATISTICAL = """
import pytest
from hypothesis import example, given, settings, strategies as st

@pytest.mark.statistical(tests=3)
@settings(max_examples=5, database=None)
@example(x=0)
@given(x=st.integers(0, 9))
def test_three_tests_an_example(x):
    pass

@pytest.mark.statistical
@settings(max_examples=4, database=None)
@given(x=st.integers(0, 9))
def test_one_test_an_example(x):
    pass

@settings(max_examples=50, database=None)
@given(x=st.integers(0, 9))
def test_not_statistical(x):
    pass
"""


def test_the_policy_plans_each_statistical_markers_tests_per_example_explicit_ones_included(suite, pytester):
    suite(STATISTICAL, f"--ncm-report-dir={pytester.path / 'reports'}").assert_outcomes(passed=3)
    policy = evidence_of(pytester)["policy"]
    assert policy["planned_tests"] == 3 * (5 + 1) + 1 * 4


def test_the_planned_count_can_be_fixed_and_must_be_positive(suite, pytester):
    suite(STATISTICAL, f"--ncm-report-dir={pytester.path / 'reports'}", "--ncm-planned-tests=7")
    assert evidence_of(pytester)["policy"]["planned_tests"] == 7
    result = suite(STATISTICAL, "--ncm-planned-tests=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "must be a positive count" in result.stderr.str()


NESTED = """
from ncm_verify.run_state import run_state

def test_sees_its_own_session_state():
    assert run_state().records == [] and run_state().policy.planned_tests == 1
    run_state().records.append({"test": "inner"})
"""


def test_a_nested_session_has_its_own_run_state_and_leaves_the_outer_one_as_it_was(suite, request):
    outer = run_state()
    assert outer is run_state(request.config) and outer.test == request.node.nodeid
    before = list(outer.records)
    suite(NESTED).assert_outcomes(passed=1)
    assert run_state() is outer and outer.records == before and outer.test == request.node.nodeid


@settings(max_examples=3, database=None, derandomize=False)
@given(x=st.integers())
def _random(x):
    pass


def test_the_hypothesis_internals_the_suite_reads_are_still_where_it_reads_them():
    own = hypothesis_internals.settings_of(_random)
    assert own is not None and own.max_examples == 3
    _random()
    assert isinstance(hypothesis_internals.generated_seed(_random), int), "a random test's seed is kept"
    with hypothesis_internals.settings_replaced(_random, settings(own, max_examples=1)):
        assert hypothesis_internals.settings_of(_random).max_examples == 1
    assert hypothesis_internals.settings_of(_random) is own
    assert (
        hypothesis_internals.settings_of(test_the_hypothesis_internals_the_suite_reads_are_still_where_it_reads_them)
        is None
    )
