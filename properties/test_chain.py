"""C5: chain acceptance with residual correction preserves the target distribution."""

import numpy as np
import pytest
from hypothesis import given, note, target
from hypothesis import strategies as st

from ncm_verify.harness import checks, drivers
from ncm_verify.harness.strategies import (
    REJECTING_RELATIONS,
    autoregressive_fixtures,
    draft_lengths,
    drafting_lengths,
    fresh_law_settings,
    mean_total_variation,
    seeds,
)
from ncm_verify.oracles import exact, exact_block

pytestmark = pytest.mark.claim("C5")

SAMPLED_OUTCOMES = 512
"""Largest V^T a sampling property tests: keeps n near 1e5 at TV 0.02."""


def draft_length_rule(max_draft: int, length: int):
    return lambda context: min(max_draft, length - len(context) - 1)


@given(fixture=autoregressive_fixtures(), max_draft=draft_lengths)
def test_chain_verification_enumerates_to_the_target_joint(fixture, max_draft):
    target(mean_total_variation(fixture.target, fixture.draft), label="mean TV(p, q)")
    produced = exact.chain_output_distribution(fixture, draft_length_rule(max_draft, fixture.length))
    checks.assert_distributions_equal(
        produced,
        exact.target_joint(fixture),
        label="enumerated chain output vs target joint",
        call=f"chain_output_distribution(V={fixture.vocab}, T={fixture.length}, G={max_draft})",
    )


@pytest.mark.statistical(tests=1)
@fresh_law_settings()
@given(max_draft=drafting_lengths, mixed=st.booleans(), seed=seeds, data=st.data())
def test_chain_verification_samples_the_target_joint(impl, max_draft, mixed, seed, data):
    # One-hot targets make the joint a single outcome: the enumeration and greedy properties cover them.
    fixture = data.draw(
        autoregressive_fixtures(
            max_outcomes=SAMPLED_OUTCOMES,
            min_length=2,
            one_hot_targets=st.just(False),
            relations=st.sampled_from(REJECTING_RELATIONS),
            salt=(max_draft, mixed, seed),
        ),
        label="fixture",
    )
    shape = (fixture.vocab,) * fixture.length
    probs = exact.as_vector(exact.target_joint(fixture), shape)
    call = f"run_chain(V={fixture.vocab}, T={fixture.length}, G={max_draft}, mixed={mixed}, seed={seed})"
    note(call)

    def sample(n):
        run = drivers.run_chain(impl, fixture, batch=n, max_draft=max_draft, mixed=mixed, seed=seed)
        return np.ravel_multi_index(tuple(run.sequences.T), shape)

    checks.assert_sampler_matches(
        "chain output", probs, sample, seed=seed, call=call, label_outcome=checks.outcome_labels(shape, "tokens")
    )


@pytest.mark.statistical(tests=1)
@fresh_law_settings()
@given(max_draft=drafting_lengths, seed=seeds, data=st.data())
def test_accepted_counts_and_emitted_tokens_follow_their_exact_joint_law(impl, max_draft, seed, data):
    """Per sequence a uniform 0..G drafts (mixed lengths); the outcome is (drafts, accepted, emitted token)."""
    # Only the first round is sampled, so the fixture may be long: up to 4 drafts and a bonus row.
    fixture = data.draw(
        autoregressive_fixtures(
            min_length=2,
            max_length=5,
            max_outcomes=8**5,
            one_hot_targets=st.just(False),
            relations=st.sampled_from(REJECTING_RELATIONS),
            salt=(max_draft, seed),
        ),
        label="fixture",
    )
    max_draft = min(max_draft, fixture.length - 1)
    law = exact_block.round_outcome_law(exact.chain_round, fixture, max_draft)
    call = f"run_first_round(V={fixture.vocab}, G={max_draft}, seed={seed})"
    note(call)

    def sample(n):
        run = drivers.run_first_round(impl, fixture, batch=n, max_draft=max_draft, seed=seed)
        return np.ravel_multi_index((run.num_draft, run.num_accepted, run.emitted), law.shape)

    checks.assert_sampler_matches(
        "drafts, accepted count and emitted token",
        law.ravel(),
        sample,
        seed=seed,
        call=call,
        label_outcome=checks.outcome_labels(law.shape, "drafts", "accepted", "emitted"),
    )
