"""The pytest plugin: the implementation option and fixture, the evidence it writes, the chi-square tests it plans
from the statistical markers, and the run state it gives the harness; in-process through pytester, and in a pytest
subprocess where xdist workers are involved."""

import json
import shlex
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# pytester's in-process runs drop the modules they imported, and MLX aborts when imported twice in one process:
# whatever the suites below import is imported here first, so that it stays.
import ncm_verify.mutants.ratio_inverted  # noqa: F401
import ncm_verify.reference  # noqa: F401
from ncm_verify.harness import (
    checks,  # noqa: F401
    hypothesis_internals,  # noqa: F401
)
from ncm_verify.harness.run_state import RECORDS_FILE, run_state

MARKERS = """
[pytest]
markers =
    claim: c
    statistical: s
    experiment: e
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


EXPERIMENT = """
import pytest

@pytest.mark.experiment
def test_an_experiment_on_the_suites_own_models():
    assert False, "the data refute the hypothesis"

def test_a_property_of_the_module(impl):
    assert callable(impl.verify_chain)
"""


@pytest.mark.parametrize("module", ["ncm_verify.reference", "ncm_verify.mutants.ratio_inverted"])
def test_an_experiment_runs_on_the_references_run_and_is_left_out_of_a_ports(suite, module):
    """An experiment never calls the module: its refutation is the reference run's finding, never a port's failure
    (a port's `pytest -x` must not stop there)."""
    result = suite(EXPERIMENT, f"--impl={module}", "-x")
    if module == "ncm_verify.reference":  # the suite judging itself: a refutation stops `-x` there
        result.assert_outcomes(failed=1)
    else:
        result.assert_outcomes(passed=1, deselected=1)


EVIDENCE = """
import numpy as np
import pytest
from ncm_verify.harness import checks, evidence, stats

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


def test_a_session_stopping_at_its_first_catch_meets_the_exact_properties_before_the_sampled_ones(suite, pytester):
    failing_exact = STATISTICAL.replace(
        "def test_not_statistical(x):\n    pass", "def test_not_statistical(x):\n    assert x < 0"
    )
    reports = pytester.path / "reports"
    suite(failing_exact, f"--ncm-report-dir={reports}", "--ncm-stop-when-caught").assert_outcomes(failed=1)
    assert [node["nodeid"] for node in evidence_of(pytester)["properties"]] == ["test_suite.py::test_not_statistical"]
    suite(failing_exact, f"--ncm-report-dir={reports}").assert_outcomes(passed=2, failed=1)  # in file order, to the end


def test_a_session_stopping_at_its_first_catch_runs_the_properties_it_names_first_and_refuses_an_unknown_name(
    suite, pytester
):
    failing_both = STATISTICAL
    for name in ("test_one_test_an_example", "test_not_statistical"):
        failing_both = failing_both.replace(f"def {name}(x):\n    pass", f"def {name}(x):\n    assert x < 0")
    reports = pytester.path / "reports"
    first = "--ncm-first=test_suite.py::test_one_test_an_example"
    suite(failing_both, f"--ncm-report-dir={reports}", "--ncm-stop-when-caught", first).assert_outcomes(failed=1)
    assert [node["nodeid"] for node in evidence_of(pytester)["properties"]] == [first.split("=")[1]]
    result = suite(STATISTICAL, "--ncm-stop-when-caught", "--ncm-first=test_suite.py::test_renamed")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ncm-first: no collected property is named test_suite.py::test_renamed" in result.stderr.str()


def test_the_planned_count_can_be_fixed_and_must_be_positive(suite, pytester):
    suite(STATISTICAL, f"--ncm-report-dir={pytester.path / 'reports'}", "--ncm-planned-tests=7")
    assert evidence_of(pytester)["policy"]["planned_tests"] == 7
    result = suite(STATISTICAL, "--ncm-planned-tests=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "must be a positive count" in result.stderr.str()


NESTED = """
from ncm_verify.harness.run_state import run_state

def test_sees_its_own_session_state():
    assert run_state().records == [] and run_state().policy is not None and run_state().policy.planned_tests == 1
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
    seen: list[dict] = []
    with hypothesis_internals.statistics_reported_to(seen.append):
        _random()
    assert len(seen) == 1 and "generate-phase" in seen[0], "a run's engine statistics reach the callback"
    assert isinstance(hypothesis_internals.generated_seed(_random), int), "a random test's seed is kept"
    assert hypothesis_internals.explicit_examples(_random) == 0
    with hypothesis_internals.settings_replaced(_random, settings(own, max_examples=1)):
        assert hypothesis_internals.settings_of(_random).max_examples == 1
    assert hypothesis_internals.settings_of(_random) is own
    assert (
        hypothesis_internals.settings_of(test_the_hypothesis_internals_the_suite_reads_are_still_where_it_reads_them)
        is None
    )


# --- the plugin over a folder of its own (a subprocess for xdist workers): implementation files, reproduction ---

SUITE = """
import pytest
from hypothesis import example, given, settings, strategies as st

@pytest.mark.claim("C1")
@settings(max_examples=7, derandomize=True, database=None)
@given(x=st.integers(0, 10))
@example(x=3)
def test_counts_examples(x):
    pass

@pytest.mark.claim("C2")
@settings(max_examples=50, derandomize=True, database=None, print_blob=True)
@given(x=st.integers(0, 100))
def test_fails(x):
    assert x < 50
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_plugin_writes_evidence_with_examples_and_reproduction(tmp_path, workers, run_pytest_with):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    result = run_pytest_with(workers)(tmp_path, *workers, f"--ncm-report-dir={tmp_path / 'reports'}")
    assert result.returncode == 1, result.stdout + result.stderr
    evidence = json.loads((tmp_path / "reports" / "evidence.json").read_text())
    nodes = {n["nodeid"]: n for n in evidence["properties"]}
    counted = nodes["test_suite.py::test_counts_examples"]
    assert counted["outcome"] == "passed" and counted["claims"] == ["C1"]
    assert counted["hypothesis"]["examples"] == 8  # 7 generated + 1 explicit
    failed = nodes["test_suite.py::test_fails"]
    assert failed["outcome"] == "failed"
    assert failed["failure"]["reproduce_failure"].startswith("@reproduce_failure(")
    assert "x=50" in failed["failure"]["falsifying_example"]
    assert evidence["environment"]["mlx_default_device"]
    assert evidence["policy"]["family_budget"] == 1e-3
    timing = evidence["timing"]  # every process that ran tests, by part, in CPU seconds
    assert sum(p["tests"] for p in timing["processes"]) == 2
    assert [p["role"] for p in timing["processes"]].count("worker") == (2 if workers else 0)
    assert all(p["parts_cpu_s"]["start-up"] > 0 for p in timing["processes"])
    for process in timing["processes"]:
        assert sum(process["parts_cpu_s"].values()) == pytest.approx(process["cpu_s"], abs=0.1)


OVERSPENT = """
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from ncm_verify.harness import checks, stats

@pytest.mark.claim("C5")
@pytest.mark.statistical(tests=1)
@settings(max_examples=2, derandomize=True, database=None, deadline=None)
@given(seed=st.integers(0, 1000))
def test_runs_two_tests_but_plans_one(seed):
    probs = np.array([0.5, 0.5])
    plan = stats.make_plan(probs)
    for offset in range(2):
        outcomes = np.random.default_rng(seed + offset).choice(2, size=plan.n, p=probs)
        checks.assert_fits(stats.chi_square_test("coin", outcomes, plan))
"""


def test_more_chi_square_tests_than_planned_fail_a_run_without_failures(tmp_path, run_pytest_inprocess):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(OVERSPENT))
    result = run_pytest_inprocess(tmp_path, f"--ncm-report-dir={tmp_path / 'r'}")
    budget = json.loads((tmp_path / "r" / "evidence.json").read_text())["budget"]
    assert result.returncode == 1 and "more chi-square tests than planned" in result.stdout, result.stdout
    assert budget["chi_square_tests_run"] == 4 and budget["planned_tests"] == 2
    assert budget["run_failed_by_budget"]


PORT = '''
"""A partial port: its own greedy verifier, the reference's residual, no model or cache."""
from ncm_verify.reference.speculative import residual_distribution

def verify_greedy(target, draft_tokens, *, num_draft=None):
    return "mine"
'''

PORT_SUITE = """
import mlx.core as mx
import pytest
from hypothesis import given, settings, strategies as st

@pytest.mark.claim("C5")
@settings(database=None, derandomize=True, max_examples=100, print_blob=True)
@given(st.integers(0, 100))
def test_fails_two_distinct_ways(impl, x):
    if x % 2:
        assert x < 3, "the odd check"
    assert x < 4, "the even check"

@pytest.mark.claim("C7")
def test_calls_its_own_kernel(impl):
    assert impl.verify_greedy(None, None) == "mine"

@pytest.mark.claim("C5")
def test_calls_an_inherited_kernel(impl):
    impl.residual_distribution(mx.array([0.5, 0.5]), mx.array([0.25, 0.75]))

@pytest.mark.claim("C2")
def test_needs_the_cache(impl):
    impl.PrefixCache()

@pytest.mark.claim("C5")
def test_enumerates_without_the_implementation():
    assert 1 + 1 == 2

@pytest.mark.claim("C5")
def test_raises_an_error_that_is_not_a_check(impl):
    raise TypeError("not a verdict")

@pytest.mark.claim("C7")
def test_fails_a_check(impl):
    with pytest.raises(ValueError):
        impl.verify_greedy(None, None)
"""


def test_the_plugin_records_calls_provision_failure_kinds_and_the_planned_count(tmp_path, run_pytest_inprocess):
    (tmp_path / "my_port.py").write_text(PORT)
    (tmp_path / "test_port.py").write_text(PORT_SUITE)
    result = run_pytest_inprocess(
        tmp_path,
        "-p",
        "no:xdist",
        "test_port.py",
        f"--impl={tmp_path / 'my_port.py'}",
        "--ncm-planned-tests=7",
        f"--ncm-report-dir={tmp_path / 'r'}",
        "--ncm-run-id=run-1",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    evidence = json.loads((tmp_path / "r" / "evidence.json").read_text())
    assert evidence["run_id"] == "run-1" and evidence["policy"]["planned_tests"] == 7
    assert evidence["implementation"]["defines"] == ["verify_greedy"]
    assert evidence["implementation"]["inherits"] == ["residual_distribution (from ncm_verify.reference.speculative)"]
    assert len(evidence["implementation"]["sha256"]) == 64
    nodes = {n["nodeid"].split("::")[1]: n for n in evidence["properties"]}
    assert nodes["test_calls_its_own_kernel"]["calls"]["verify_greedy"] == {
        "calls": 1,
        "own": True,
        "origin": "my_port",
    }
    assert nodes["test_calls_an_inherited_kernel"]["calls"]["residual_distribution"]["own"] is False
    assert nodes["test_needs_the_cache"]["outcome"] == "not provided"
    assert nodes["test_enumerates_without_the_implementation"]["calls"] == {}
    assert nodes["test_raises_an_error_that_is_not_a_check"]["outcome"] == "error"
    assert nodes["test_raises_an_error_that_is_not_a_check"]["failure"]["kind"] == "TypeError"
    assert nodes["test_fails_a_check"]["outcome"] == "failed"
    assert nodes["test_fails_a_check"]["failure"]["kind"] == "assertion"
    assert nodes["test_fails_a_check"]["failure"]["kernels"] == ["verify_greedy"]
    group = nodes["test_fails_two_distinct_ways"]["failure"]
    assert group["kind"] == "assertion" and "Failure 2 of 2" in group["message"], group["message"]
    assert "the odd check" in group["message"] and "the even check" in group["message"]
    assert "x=" in (group["falsifying_example"] or ""), "the first failure's example is shown, not the group's header"
    assert (group["reproduce_failure"] or "").startswith("@reproduce_failure("), "each member carries its blob"


def test_an_implementation_that_does_not_import_stops_pytest_with_one_message(tmp_path, run_pytest_inprocess):
    (tmp_path / "test_port.py").write_text(PORT_SUITE)
    result = run_pytest_inprocess(tmp_path, "-p", "no:xdist", "test_port.py", "--impl=ncm_verify.mutants.ratio_invrted")
    assert result.returncode == 4
    output = result.stdout + result.stderr
    assert output.count("cannot import implementation module") == 1
    assert "Did you mean 'ncm_verify.mutants.ratio_inverted'?" in output


def test_a_ports_workers_each_start_on_the_exact_properties(monkeypatch):
    from ncm_verify.pytest_plugin import planning

    planned = dict(zip("abcdefghi", [0, 60, 0, 30, 0, 120, 0, 90, 0]))
    monkeypatch.setattr(planning, "planned_tests_of", planned.get)
    assert "".join(planning.balanced_order(list("abcdefghi"), 2, exact_first=True)) == "aeih" + "cgfbd"


FIRST_FAILURE = """
import pytest

def test_passes(impl):
    impl.verify_chain

def test_suite_identity_fails():
    assert 1 == 2, "the suite's own check"

@pytest.mark.claim("C5")
def test_first(impl):
    impl.verify_chain
    assert 1 == 2, "the first failure of the module"

@pytest.mark.claim("C5")
def test_second(impl):
    impl.verify_chain
    assert 1 == 3, "the second failure"
"""


def test_the_first_failure_that_reaches_the_module_is_printed_as_it_is_found_with_its_rerun_line(suite, pytester):
    result = suite(FIRST_FAILURE, f"--ncm-report-dir={pytester.path / 'reports'}", "--tb=no", "-q")
    result.assert_outcomes(passed=1, failed=3)
    printed = result.stdout.str()
    assert printed.count("FIRST FAILURE") == 1, "once, for the first failure only"
    block = printed.split("FIRST FAILURE", 1)[1]
    assert block.startswith(": test_suite.py::test_first (C5), failed by assertion"), block[:200]
    assert "the first failure of the module" in block and "the second failure" not in block.split("rerun:", 1)[0]
    rerun = f"rerun: cd {shlex.quote(str(pytester.path))} && HYPOTHESIS_PROFILE="  # runnable from any folder
    assert rerun in block and "'test_suite.py::test_first' -p no:xdist" in block
    assert printed.index("FIRST FAILURE") < printed.index("evidence written to"), "before the session's summary"


def test_the_longest_properties_start_at_once_on_different_workers(monkeypatch):
    """xdist's work stealing hands each worker a contiguous block first (4 then 5 of 9): each starts with a long one."""
    from ncm_verify.pytest_plugin import planning

    planned = dict(zip("abcdefghi", [0, 60, 0, 30, 0, 120, 0, 90, 0]))
    monkeypatch.setattr(planning, "planned_tests_of", planned.get)
    assert "".join(planning.balanced_order(list("abcdefghi"), 2)) == "fbae" + "hdcgi"
    assert "".join(planning.balanced_order(list("abcdefghi"), 3)) == "fde" + "hag" + "bci"


def noted(error: Exception, *notes: str) -> Exception:
    error.__notes__ = list(notes)  # what Hypothesis attaches to each failure of a group
    return error


class FoundTwoFailures(Exception):
    """Stands in for the ExceptionGroup Hypothesis raises when it found several distinct failures."""

    exceptions = (
        noted(
            AssertionError("chain output: chi-square rejects the exact distribution"),
            "Failing test case: example(\n    max_draft=1,\n    seed=0,\n)",
            "You can reproduce this test case by temporarily adding @reproduce_failure('6.170.17', b'AEEB') as a "
            "decorator",
        ),
        noted(ValueError("draft_tokens: q(x) = 0"), "Failing test case: example(\n    max_draft=2,\n)"),
    )


def test_a_property_that_found_several_failures_reports_each_message_and_the_first_example_and_reproduction():
    from ncm_verify.pytest_plugin.failures import failure_details, group_message

    message = group_message(FoundTwoFailures())
    assert "Failure 1 of 2: AssertionError: chain output" in message and "Failure 2 of 2: ValueError" in message
    details = failure_details(message)
    assert details["falsifying_example"] == "Failing test case: example(\n    max_draft=1,\n    seed=0,\n)"
    assert details["reproduce_failure"] == "@reproduce_failure('6.170.17', b'AEEB')"
    assert group_message(AssertionError("one failure")) is None, "a single failure keeps pytest's own text"


def test_an_implementation_file_named_like_another_module_is_refused_not_imported_over_it(tmp_path):
    from ncm_verify.protocol import ImplementationError, load_implementation

    (tmp_path / "json.py").write_text(PORT)
    with pytest.raises(ImplementationError, match="impl: .* would be imported as 'json', which names another module"):
        load_implementation(str(tmp_path / "json.py"))
    (tmp_path / "my_port.py").write_text(PORT)
    assert load_implementation(str(tmp_path / "my_port.py")) is load_implementation(str(tmp_path / "my_port.py"))
