"""Hypothesis profiles, registered once: `dev` (default), `ci`, `thorough`, `selftest`."""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

from ncm_verify.harness.hypothesis_internals import (
    set_shrink_time_limit,
    settings_of,
    settings_replaced,
    shrink_time_limit,
)

_common = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILES = {
    "dev": dict(max_examples=10),
    # `make verify`: derandomized so that a report reproduces from its commit.
    "ci": dict(max_examples=30, derandomize=True, database=None),
    # Random by design: said explicitly, as Hypothesis derandomizes its defaults whenever the CI variable is set
    # and a profile inherits them (`thorough` under CI=true would repeat fixed examples).
    "thorough": dict(max_examples=300, derandomize=False, database=None),
    # Self-tests run the properties against planted bugs: a failure is the expected
    # verdict, so skip shrinking to keep `make test` fast.
    "selftest": dict(
        max_examples=30, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate, Phase.target]
    ),
}
"""The profiles a run may name (`ncm_verify.run` lists them: Hypothesis has no public list of profiles)."""
for _name, _options in PROFILES.items():
    settings.register_profile(_name, **_options, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SHRINK_SECONDS = {"dev": 10, "ci": 10, "selftest": 10, "thorough": 300}
"""Time Hypothesis may spend shrinking one failure, per profile: a failing statistical property draws 50-100k
samples per example and shrank for 4 minutes under `ci`, and a port that fails a dozen properties waited for
each; `thorough` keeps Hypothesis's own 300 s for the most minimal counterexample."""


def apply_shrink_budget(profile: str) -> float:
    """Set Hypothesis's shrink time limit for `profile`."""
    return set_shrink_time_limit(SHRINK_SECONDS.get(profile, 300))


apply_shrink_budget(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SHRINK_WARNING = "WARNING: Hypothesis has spent more than five minutes working to shrink"
"""How Hypothesis's warning starts when its shrink time limit runs out: fixed text, whatever the limit."""


def budget_reporter(outer):
    """Hypothesis's reporter `outer`, with its five-minute warning replaced by what happened: our budget ran out.

    Hypothesis has no setting for that one warning (its verbosity would hide the falsifying example too), and its
    text is wrong here: it names five minutes and asks for a bug report about a limit this suite chose.
    """

    def report(text):
        if isinstance(text, str) and text.startswith(SHRINK_WARNING):
            text = (
                f"ncm-verify: shrinking stopped at this profile's {shrink_time_limit():g} s budget "
                "(SHRINK_SECONDS in properties/conftest.py): the failing example is less shrunk, not minimal"
            )
        outer(text)

    return report


def pytest_configure(config):
    """`make verify SEED=123` (`--hypothesis-seed=123`): a derandomized profile draws that seed's examples instead."""
    if config.getoption("--hypothesis-seed", None) is not None and settings.default.derandomize:
        settings.register_profile("seeded", settings.default, derandomize=False)
        settings.load_profile("seeded")


@pytest.hookimpl(hookwrapper=True, trylast=True)  # inside Hypothesis's own wrapper, which sets its reporter
def pytest_runtest_call(item):
    """Every property reports through `budget_reporter`. A known upstream bug (a strict xfail) is confirmed by its
    first falsifying example: no shrinking (its reason carries a minimal reproduction already)."""
    from hypothesis.reporting import current_reporter, with_reporter

    test = getattr(item, "obj", None)
    current = settings_of(test)
    with with_reporter(budget_reporter(current_reporter())):
        if item.get_closest_marker("xfail") is None or current is None:
            yield
            return
        with settings_replaced(test, settings(current, phases=[p for p in current.phases if p != Phase.shrink])):
            yield
