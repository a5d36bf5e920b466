"""Properties of the MLX speculative decoders, run in each package's own environment (`make verify-peers PEERS=...`).

Never collected by `make verify` or `make test` (they collect properties/, selftests/ and tests/ only). With
``--mlx-peers-results=PATH`` each run appends one JSON line per property run to PATH for `run_mlx_peers` to decide
the report: passed, finding (a strict expected failure of `peers.mlx_findings`), planted control caught, or not
applicable. ``--mlx-peers-examples=N`` sets the examples per property (default 3; some properties ask for more).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from ncm_verify.harness import run_state, stats
from ncm_verify.peers import reach
from ncm_verify.peers.mlx_findings import FINDING_RAISES, KNOWN_PEER_FINDINGS, PLANTED

REACH = pytest.StashKey[object]()
"""The running coverage.py measurement of the package's speculative files (`peers.reach`), when asked for."""

LAW_TESTS = 20
"""Chi-square tests one `make verify-peers PEERS=all` plans at most (one per `peer_law` test and example: 17 now,
the first five environments' 14, mlx-dspark 2, nunspark 1): the family-wise budget
`stats.FAMILY_BUDGET` is split over them (Sidak)."""


def pytest_addoption(parser):
    group = parser.getgroup("mlx-peers", "the MLX speculative decoders (issue 40)")
    group.addoption("--mlx-peers-results", default=None, help="append one JSON line per property run to this file")
    group.addoption("--mlx-peers-examples", type=int, default=3, help="Hypothesis examples per property")
    group.addoption(
        "--mlx-peers-reach", default=None, help="write the branch coverage of the --mlx-peers-reach-file files here"
    )
    group.addoption("--mlx-peers-reach-file", action="append", default=[], help="a file whose branches are measured")


def pytest_configure(config):
    files = config.getoption("--mlx-peers-reach-file")
    if config.getoption("--mlx-peers-reach") and files:  # before any test module imports the package
        config.stash[REACH] = reach.measure(files)
    config.addinivalue_line("markers", "peer_property(*numbers): which of issue 40's six properties a test states")
    config.addinivalue_line("markers", "prefix_rule(*numbers): which rules of prefix_cache_machine a test states")
    config.addinivalue_line("markers", "peer_law: a chi-square test of a sampled law, one per example (`LAW_TESTS`)")
    run_state.install(config, policy=stats.Policy(planned_tests=LAW_TESTS, selftest_budget=0.0))
    settings.register_profile(
        "mlx-peers",
        max_examples=config.getoption("--mlx-peers-examples"),
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        phases=[Phase.explicit, Phase.generate],  # a finding's repro script is the minimal case; shrinking is minutes
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    settings.load_profile("mlx-peers")


def pytest_unconfigure(config):
    if REACH in config.stash:
        reach.dump(
            config.stash[REACH], config.getoption("--mlx-peers-reach-file"), Path(config.getoption("--mlx-peers-reach"))
        )
    run_state.uninstall(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    laws = [item for item in items if item.get_closest_marker("peer_law")]
    if len(laws) > LAW_TESTS:
        raise pytest.UsageError(f"{len(laws)} peer_law tests here, more than the {LAW_TESTS} the budget is split over")
    for item in items:
        reason = KNOWN_PEER_FINDINGS.get(item.nodeid)
        if reason is None and "planted" in item.nodeid:
            reason = PLANTED
        if reason is not None:
            raises = FINDING_RAISES.get(reason, (AssertionError,))
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason, raises=raises))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    path = item.config.getoption("--mlx-peers-results")
    if not path or (report.when != "call" and not (report.when == "setup" and report.outcome != "passed")):
        return
    marker = item.get_closest_marker("peer_property")
    if report.skipped and not hasattr(report, "wasxfail"):
        status, detail = "not applicable", str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
    elif hasattr(report, "wasxfail"):
        status = ("planted caught" if "planted" in item.nodeid else "finding") if report.skipped else "xpassed"
        detail = report.wasxfail
        if call.excinfo is not None:  # the evidence: what differed, first lines of the failure
            evidence = " / ".join(str(call.excinfo.value).strip().splitlines()[:2])[:400]
            detail = f"{detail} EVIDENCE: {evidence}"
    else:
        status, detail = report.outcome, (str(report.longrepr)[-1500:] if report.failed else "")
    record = dict(
        nodeid=item.nodeid,
        property=list(marker.args) if marker else [],
        rule=list(rule.args) if (rule := item.get_closest_marker("prefix_rule")) else [],
        status=status,
        detail=detail.removeprefix("Skipped: ").removeprefix("reason: "),
        seconds=round(report.duration, 2),
    )
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """For the prefix-cache files: a maker of model folders, ``(family, dtype) -> EngineModel``, under one temporary
    folder (each written once, seed 0; `prefix_engines.make_model_folder`)."""
    from ncm_verify.peers.prefix_engines import make_model_folder

    folder = tmp_path_factory.mktemp("prefix-models")
    return lambda family, dtype: make_model_folder(folder / f"{family}-{dtype}", family, dtype)


@pytest.fixture
def quiet():
    """Engines log every lookup and recover from their errors with a warning: the verdict is the properties'."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
