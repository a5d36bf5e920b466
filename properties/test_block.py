"""C16: block verification (Sun et al., arXiv 2403.10444) keeps the target's law and never accepts fewer drafts.

What every kernel keeps (same key, batch, compiled, half precision, impossible tokens, bad input, verify ==
apply) is judged by the generic properties through the block's spec; here: the rule's law enumerated in
float64, Theorem 2 exactly and the kernel's sampled round law (its apply step: `test_apply_exact.py`).
"""

import functools

import numpy as np
import pytest
from hypothesis import event, given, note, settings, target
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
from ncm_verify.report.status import MIN_DISTINCT_EXAMPLES
from ncm_verify.tolerances import EXACT_IDENTITY

pytestmark = pytest.mark.claim("C16")

ENUMERATED_OUTCOMES = 512
"""Largest V^T enumerated: every block of every round's context, in pure Python."""
LAW_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example samples ~1e5 rounds: the distinct laws the claim needs, two more (the first derandomized
examples can repeat a law), and no more; the exact checks carry the rest."""


def draft_length_rule(max_draft: int, length: int):
    return lambda context: min(max_draft, length - len(context) - 1)


@given(fixture=autoregressive_fixtures(max_outcomes=ENUMERATED_OUTCOMES), max_draft=draft_lengths)
def test_block_verification_enumerates_to_the_target_joint(fixture, max_draft):
    """Every block, every tau, every last token, over repeated rounds: the target's joint to 1e-12 (Theorem 1)."""
    target(mean_total_variation(fixture.target, fixture.draft), label="mean TV(p, q)")
    produced = exact_block.output_distribution(
        exact_block.PAPER_RULE, fixture, draft_length_rule(max_draft, fixture.length)
    )
    checks.assert_distributions_equal(
        produced,
        exact.target_joint(fixture),
        label="enumerated block output vs target joint",
        call=f"exact_block.output_distribution(V={fixture.vocab}, T={fixture.length}, G={max_draft})",
    )


@given(fixture=autoregressive_fixtures(min_length=2, max_length=5, max_outcomes=8**4), max_draft=drafting_lengths)
def test_block_verification_never_accepts_fewer_drafts_than_the_chain_in_expectation(fixture, max_draft):
    """Theorem 2, exactly: E[tau] of the block rule >= the chain rule's on the same p, q and G."""
    max_draft = min(max_draft, fixture.length - 1)
    block = exact_block.accepted_length_law(exact_block.PAPER_RULE, fixture, (), max_draft)
    chain = exact_block.chain_accepted_length_law(fixture, (), max_draft)
    call = f"accepted_length_law(V={fixture.vocab}, G={max_draft})"
    assert abs(block.sum() - 1) <= EXACT_IDENTITY, f"{call}: the accepted-count law sums to {block.sum()!r}"
    gain = exact_block.expected_accepted(block) - exact_block.expected_accepted(chain)
    target(gain, label="E[tau] block - chain")
    event("block gains", "more than 0.01" if gain > 0.01 else "at most 0.01")
    note(f"{call}: E[tau] block {exact_block.expected_accepted(block):.6f}, chain {gain:+.6f} behind")
    assert gain >= -EXACT_IDENTITY, f"{call}: block accepts {gain:.3g} fewer drafts than the chain"


@pytest.mark.statistical(tests=1)
@settings(fresh_law_settings(), max_examples=LAW_EXAMPLES)
@given(max_draft=drafting_lengths, seed=seeds, data=st.data())
def test_block_accepted_counts_and_emitted_tokens_follow_their_exact_joint_law(impl, max_draft, seed, data):
    """Per sequence a uniform 0..G drafts; the outcome (drafts, accepted, last token) against its enumerated law."""
    fixture = data.draw(
        autoregressive_fixtures(
            min_length=2,
            max_length=4,
            max_outcomes=ENUMERATED_OUTCOMES,
            one_hot_targets=st.just(False),
            relations=st.sampled_from(REJECTING_RELATIONS),
            salt=(max_draft, seed),
        ),
        label="fixture",
    )
    max_draft = min(max_draft, fixture.length - 1)
    law = exact_block.round_outcome_law(
        functools.partial(exact_block.round_law, exact_block.PAPER_RULE), fixture, max_draft
    )
    call = f"run_first_round(verify_block, V={fixture.vocab}, G={max_draft}, seed={seed})"
    note(call)

    def sample(n):
        run = drivers.run_first_round(impl, fixture, batch=n, max_draft=max_draft, seed=seed, verify="verify_block")
        return np.ravel_multi_index((run.num_draft, run.num_accepted, run.emitted), law.shape)

    checks.assert_sampler_matches(
        "block: drafts, accepted count and emitted token",
        law.ravel(),
        sample,
        seed=seed,
        call=call,
        label_outcome=checks.outcome_labels(law.shape, "drafts", "accepted", "emitted"),
    )
