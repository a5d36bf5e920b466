"""The tree bench's exact figures and drawn trees: what `make bench` reports for trees rests on these."""

import numpy as np
import pytest

from ncm_verify.bench.trees import BUDGET_SHAPES, exact_tokens_per_pass, truncated
from ncm_verify.harness.strategies import make_autoregressive_fixture
from ncm_verify.oracles.exact import chain_round

FIXTURE = make_autoregressive_fixture(4, 5, "independent", False, 3)


def test_the_chain_of_the_budget_has_the_chain_enumerators_tokens_per_pass():
    # The chain oracle is a separate enumeration: its mean round length is the chain's tokens per pass.
    law = chain_round(FIXTURE, (), 4)
    expected = sum(len(tokens) * probability for tokens, probability in law.items())
    assert exact_tokens_per_pass(FIXTURE, BUDGET_SHAPES["chain 1-1-1-1"], "with_replacement") == pytest.approx(
        expected, abs=1e-12
    )


def test_truncated_fixtures_keep_the_rows_of_the_shorter_contexts():
    short = truncated(FIXTURE, 2)
    assert short.length == 2 and short.target.shape == (1 + 4, 4)
    assert np.array_equal(short.row(short.draft, (3,)), FIXTURE.row(FIXTURE.draft, (3,)))
