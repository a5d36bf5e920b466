"""C10: distillation and feature conditioning lengthen an NCM text drafter's accepted blocks.

On 128 held-out contexts, each shipped drafter's expected accepted length of a 2-token block is computed
exactly from the target's and the drafter's rows (`oracles.exact_acceptance`, every block enumerated; not
sampled), and each direction must beat the undistilled NCM drafter of the same size by a one-sided paired
t-test over the contexts at `stats.DIRECTION_ALPHA`. A direction that does not beat the baseline fails this
property, with the table: the claim is tested, not assumed.
"""

import pytest

from ncm_verify.evidence import INCONCLUSIVE
from ncm_verify.harness import drafting_acceptance as c10
from ncm_verify.harness import smollm2_acceptance

pytestmark = pytest.mark.experiment  # never calls the module: a port's run leaves it out


@pytest.fixture(scope="module")
def directions():
    return c10.c10()


@pytest.mark.claim("C10")
@pytest.mark.parametrize("direction", c10.DIRECTIONS)
def test_direction_lengthens_the_exact_expected_accepted_block_over_the_undistilled_drafter(directions, direction):
    table, results = directions
    result = next(r for r in results if r.direction == direction)
    assert result.shown, (
        f"{direction} does not accept longer blocks than {c10.BASELINE} at alpha {result.alpha:g}\n"
        f"{c10.describe(table, results)}\n"
        f"reproduce: .venv/bin/python -m ncm_verify.harness.drafting_acceptance"
    )


@pytest.fixture(scope="module")
def smollm2_directions():
    return smollm2_acceptance.c10()


# ~15 s of CPU (the drafters' rows at 128 contexts x 32 first tokens), once a run: the realistic row of C10
@pytest.mark.claim("C10")
@pytest.mark.parametrize("challenger", [d[0] for d in smollm2_acceptance.DIRECTIONS])
def test_on_smollm2_the_direction_lengthens_the_exact_expected_accepted_block(smollm2_directions, challenger):
    """The same claim on SmolLM2-135M (the AR drafter's distillation is the positive control): shown passes, refuted
    (not shown, though the test detects less than the literature's effect) fails, and inconclusive at this scale (the
    test could not have seen the literature's effect) is its own outcome (`Outcome.INCONCLUSIVE`), with the table."""
    table, results = smollm2_directions
    result = next(r for r in results if r.challenger == challenger)
    text = (
        f"{challenger} vs {result.baseline}: {result.verdict}\n{smollm2_acceptance.describe(table, results)}\n"
        "reproduce: .venv/bin/python -m ncm_verify.harness.smollm2_acceptance"
    )
    if result.verdict == INCONCLUSIVE:
        pytest.skip(f"{INCONCLUSIVE}: {text}")  # read as Outcome.INCONCLUSIVE: a finding, with its table
    assert result.verdict == "shown", text
