"""Hypothesis profiles, registered once: `dev` (default), `ci`, `thorough`, `selftest`."""

import os

from hypothesis import HealthCheck, Phase, settings

_common = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=10, **_common)
# `make verify`: derandomized so that a report reproduces from its commit.
settings.register_profile("ci", max_examples=30, derandomize=True, database=None, **_common)
settings.register_profile("thorough", max_examples=300, database=None, **_common)
# Self-tests run the properties against planted bugs: a failure is the expected
# verdict, so skip shrinking to keep `make test` fast.
settings.register_profile(
    "selftest",
    max_examples=30,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.target],
    **_common,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config):
    """`make verify SEED=123` (`--hypothesis-seed=123`): a derandomized profile draws that seed's examples instead."""
    if config.getoption("--hypothesis-seed", None) is not None and settings.default.derandomize:
        settings.register_profile("seeded", settings.default, derandomize=False)
        settings.load_profile("seeded")
