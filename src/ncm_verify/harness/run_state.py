"""The state of one pytest run in one object, kept in the session's ``config.stash`` and read through `run_state`.

The pytest plugin installs it at configure time (each xdist worker has its own); the harness reads it where a
property runs: `stats.make_plan` takes the run's alpha from its policy (`stats.current_policy`), `stats.record`
keeps chi-square results in it, `evidence.record_difference` keeps the largest differences. Outside any pytest
session (a script calling the harness) a default state stands in: the default policy, nothing written to disk.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ncm_verify.evidence import RECORDS_FILE


@dataclasses.dataclass
class RunState:
    """What one run's properties share with the plugin that collects their evidence."""

    policy: Any = None  # a stats.Policy; typed loosely because stats imports this module
    """The statistical policy: the plugin plans it over the collected properties; None (the default policy,
    `stats.current_policy`) before that or outside pytest. Not made here: stats reads this module."""
    report_dir: Path | None = None
    """Where evidence and records go (``--ncm-report-dir``); None: kept in memory only."""
    records: list[dict] = dataclasses.field(default_factory=list)
    """Every chi-square result of this process, in order."""
    differences: dict[str, dict] = dataclasses.field(default_factory=dict)
    """The largest difference per test and check, until the plugin takes the test's evidence."""
    test: str = ""
    """The node id of the test running now ("" between tests)."""
    kernels: tuple[str, ...] | None = None
    """The sampling kernels the module provides, when it lacks some (a chain-only peer): the kernel a property
    draws by default is one of them, so a property over every kernel judges what is there. None: all."""

    @property
    def records_path(self) -> Path | None:
        return self.report_dir / RECORDS_FILE if self.report_dir is not None else None


_KEY = pytest.StashKey[RunState]()
_SESSIONS: list[Any] = []
"""The configs of the sessions running in this process, innermost last (pytester nests one in another)."""
_OUTSIDE: list[RunState] = []
"""The state harness calls read outside any pytest session, made on first use."""


def install(config, **fields) -> RunState:
    """Give `config`'s session its run state; harness calls read it until `uninstall`."""
    state = config.stash[_KEY] = RunState(**fields)
    _SESSIONS.append(config)
    return state


def uninstall(config) -> None:
    if config in _SESSIONS:
        _SESSIONS.remove(config)


def run_state(config=None) -> RunState:
    """The run state of `config`'s session, or of the innermost session running (a default one outside pytest)."""
    if config is not None:
        return config.stash[_KEY]
    if _SESSIONS:
        return _SESSIONS[-1].stash[_KEY]
    if not _OUTSIDE:
        _OUTSIDE.append(RunState())
    return _OUTSIDE[0]
