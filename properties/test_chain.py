"""C5: chain acceptance with residual correction preserves the target distribution."""

import numpy as np
import pytest
from hypothesis import given, note, target
from hypothesis import strategies as st

from ncm_verify import checks, drivers, exact
from ncm_verify.strategies import (
    autoregressive_fixtures,
    draft_lengths,
    mean_total_variation,
    seeds,
)

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
@given(
    fixture=autoregressive_fixtures(max_outcomes=SAMPLED_OUTCOMES),
    max_draft=draft_lengths,
    mixed=st.booleans(),
    seed=seeds,
)
def test_chain_verification_samples_the_target_joint(impl, fixture, max_draft, mixed, seed):
    target(mean_total_variation(fixture.target, fixture.draft), label="mean TV(p, q)")
    shape = (fixture.vocab,) * fixture.length
    probs = exact.as_vector(exact.target_joint(fixture), shape)
    call = f"run_chain(V={fixture.vocab}, T={fixture.length}, G={max_draft}, mixed={mixed}, seed={seed})"
    note(call)

    def sample(n):
        run = drivers.run_chain(impl, fixture, batch=n, max_draft=max_draft, mixed=mixed, seed=seed)
        return np.ravel_multi_index(tuple(run.sequences.T), shape)

    checks.assert_sampler_matches("chain output", probs, sample, seed=seed, call=call)


@pytest.mark.statistical(tests=1)
@given(
    # Only the first round is sampled, so the fixture may be long: up to 4 drafts and a bonus row.
    # Equal, greedy or one-hot drafts make the law a single count: other properties cover those.
    fixture=autoregressive_fixtures(
        min_length=2, max_length=5, max_outcomes=8**5, one_hot_targets=st.just(False),
        relations=st.sampled_from(["independent", "some_rows_equal", "disjoint_support"]),
    ),
    max_draft=st.integers(1, 4),
    seed=seeds,
)
def test_accepted_draft_counts_follow_their_exact_law(impl, fixture, max_draft, seed):
    num_draft = min(max_draft, fixture.length - 1)
    law = exact.acceptance_law(fixture, (), num_draft)
    # Steer towards laws spread over many counts (large rejection mass makes them degenerate).
    target(float(num_draft), label="drafts judged")
    target(1.0 - float(law.max()), label="mass off the likeliest count")
    call = f"run_first_round(V={fixture.vocab}, G={num_draft}, seed={seed}); exact law {law.round(4).tolist()}"
    note(call)
    checks.assert_sampler_matches(
        "accepted draft count",
        law,
        lambda n: drivers.run_first_round(impl, fixture, batch=n, num_draft=num_draft, seed=seed),
        seed=seed,
        call=call,
    )
