"""The assert helpers fail the way a reader needs: by assertion, with labelled, short messages."""

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.harness import checks, stats


def raise_value_error(message: str):
    def call():
        raise ValueError(message)

    return call


def test_a_value_error_naming_the_argument_passes():
    checks.assert_raises_naming(raise_value_error("draft_probs: contains NaN"), ["draft_probs"], description="d")


def test_a_value_error_naming_another_argument_fails_by_assertion():
    with pytest.raises(AssertionError, match="does not start with 'draft_probs:'"):
        checks.assert_raises_naming(raise_value_error("target_probs: bad"), ["draft_probs"], description="d")


def test_a_silent_nan_answer_fails_by_assertion_and_says_it_was_nan():
    with pytest.raises(AssertionError, match=r"silent answer \(result \(2,\) with 2 NaN\)"):
        checks.assert_raises_naming(lambda: mx.array([np.nan, np.nan]), ["p"], description="d")


def test_another_exception_type_fails_by_assertion_not_error():
    def index_error():
        raise IndexError("out of bounds")

    with pytest.raises(AssertionError, match=r"raised IndexError\(out of bounds\)"):
        checks.assert_raises_naming(index_error, ["draft_tokens"], description="d")


def test_outcome_labels_name_the_leading_axes_and_group_the_rest():
    label = checks.outcome_labels((3, 4, 4), "latent", "tokens")
    assert label(np.ravel_multi_index((1, 2, 3), (3, 4, 4))) == "latent 1, tokens (2, 3)"
    assert checks.outcome_labels((2, 3, 5), "drafts", "accepted", "emitted")(7) == "drafts 0, accepted 1, emitted 2"


def test_a_rejecting_chi_square_prints_its_worst_bins_labelled_and_stays_short():
    probs = np.full(40, 1 / 40)
    plan = stats.make_plan(probs, alpha=1e-6)  # more samples than the run's own plan needs
    skewed = np.r_[np.full(20, 0.03), np.full(20, 0.02)]
    outcomes = np.random.default_rng(0).choice(40, size=plan.n, p=skewed)
    label = checks.outcome_labels((40,), "token")

    with pytest.raises(AssertionError) as failure:
        checks.assert_sampler_matches("uniform", probs, lambda n: outcomes[:n], seed=0, label_outcome=label)
    message = str(failure.value)
    assert "token " in message and "total" in message, message
    assert len(message.splitlines()) <= checks.WORST_BINS + 4, message
