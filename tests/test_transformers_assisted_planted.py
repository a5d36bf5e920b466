"""The properties of transformers' assisted generation have teeth: each planted bug fails those aimed at it.

A planted step (`peers.transformers_assisted.PLANTED_STEPS`) replaces transformers'
`_speculative_sampling`, or a planted loop change (`PLANTED_LOOPS`) is in force,
while a property of peer_properties/ runs in-process under fixed derandomized
settings. The failure must be the property's own assertion (the chi-square
test's rejection, the step handed a wrong conditional), never an error. Needs the peers
(torch, transformers: `make install-peers`); skipped without them.
"""

from __future__ import annotations

import importlib.util
import inspect
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the peers (torch, transformers) are not installed: make install-peers")
transformers = pytest.importorskip("transformers", reason="the peers are not installed: make install-peers")

from ncm_verify.harness import stats  # noqa: E402
from ncm_verify.harness.run_state import run_state  # noqa: E402
from ncm_verify.peers import transformers_assisted as peer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLANTED_SETTINGS = settings(
    max_examples=6,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
"""At most 6 examples (about 6 s each), unshrunk: the first failing example is the verdict."""
PROPERTIES = ROOT / "peer_properties" / "test_transformers_assisted.py"
LAW = "test_assisted_sampling_emits_the_target_law_and_first_drafts_stand_at_the_optimal_rules_rate"
AFTER_REJECTION = "test_after_a_rejected_first_draft_the_tokens_follow_the_residual_then_the_target"
EXACT = "test_every_verification_step_is_handed_the_exact_conditionals_of_the_tokens_before_it"
AIMED_AT = {
    "draft_logits_sharpened_behind_the_verifiers_back": {LAW: "chi-square rejects"},
    "correction_drawn_from_the_target": {AFTER_REJECTION: "chi-square rejects"},
    "caches_cropped_one_short": {EXACT: "p handed to the step"},
}
"""Planted step -> each property that must fail on it, and how its failure message starts to say why."""


def load_properties() -> types.ModuleType:
    """The peer property module under a private name, so nothing it defines is collected here."""
    spec = importlib.util.spec_from_file_location("_planted_transformers_assisted", PROPERTIES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_property(name: str, verifier: str) -> None:
    """Property `name` on `verifier`, on the llama where it also takes a model kind."""
    inner = getattr(load_properties(), name).hypothesis.inner_test
    kind = {"kind": "llama"} if "kind" in inspect.signature(inner).parameters else {}
    PLANTED_SETTINGS(given(data=st.data())(inner))(verifier=verifier, **kind)


def test_every_planted_step_is_aimed_at_by_a_property():
    assert set(AIMED_AT) == set(peer.PLANTED)


@pytest.fixture
def strictest_alpha():
    """The policy of the largest run any profile may plan (alpha `stats.MIN_ALPHA`, about 4e-8): a bug caught here
    is caught at every alpha, not only at the lenient one of this session's single planned test."""
    state = run_state()
    saved, state.policy = state.policy, stats.Policy(planned_tests=stats.MAX_PLANNED_TESTS)
    yield
    state.policy = saved


@pytest.mark.usefixtures("strictest_alpha")
@pytest.mark.parametrize(
    ("planted", "prop"), [pytest.param(p, prop, id=f"{p}-{prop}") for p in sorted(AIMED_AT) for prop in AIMED_AT[p]]
)
def test_each_planted_verification_step_fails_every_property_aimed_at_it(planted, prop):
    torch.set_num_threads(1)  # tiny models: a second thread only adds contention
    transformers.logging.set_verbosity_error()
    with pytest.raises(AssertionError, match=AIMED_AT[planted][prop]):
        run_property(prop, planted)
