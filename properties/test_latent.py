"""C6: latent-conditioned factorised proposals preserve the exact latent marginal."""

import numpy as np
import pytest
from hypothesis import find, given, note, settings, target
from hypothesis import strategies as st

from ncm_verify.harness import checks, drivers
from ncm_verify.harness.strategies import (
    REJECTING_RELATIONS,
    fresh_law_settings,
    latent_fixtures,
    mean_total_variation,
    seeds,
)
from ncm_verify.oracles import exact

pytestmark = pytest.mark.claim("C6")

FLAWED_DEVIATION = 0.05
"""TV by which the flawed variant must visibly miss the marginal on some fixture."""


def target_level_joint(fixture) -> dict:
    """p(z) prod_i p(x_i | z) over (latent, tokens) outcomes."""
    joint = {}
    for z in np.flatnonzero(fixture.target_latent > 0):
        for tokens, probability in exact.product_distribution(list(fixture.target_tokens[z])).items():
            joint[(int(z),) + tokens] = fixture.target_latent[z] * probability
    return joint


def steer(fixture) -> None:
    target(mean_total_variation(fixture.target_latent, fixture.draft_latent), label="latent TV(p, q)")
    target(mean_total_variation(fixture.target_tokens, fixture.draft_tokens), label="token TV(p, q)")


@given(fixture=latent_fixtures())
def test_factorized_verification_enumerates_to_the_target_rows(fixture):
    steer(fixture)
    for z in range(len(fixture.target_latent)):
        checks.assert_distributions_equal(
            exact.factorized_output_distribution(fixture.target_tokens[z], fixture.draft_tokens[z]),
            exact.product_distribution(list(fixture.target_tokens[z])),
            label=f"factorised output given latent {z}",
            call="factorized_output_distribution",
        )


@given(fixture=latent_fixtures())
def test_latent_chain_enumerates_to_the_target_level_joint_and_its_marginal(fixture):
    steer(fixture)
    produced = exact.latent_chain_output_distribution(fixture)
    checks.assert_distributions_equal(
        produced,
        target_level_joint(fixture),
        label="latent chain (z, x) vs p(z) p(x|z)",
        call="latent_chain_output_distribution",
    )
    checks.assert_distributions_equal(
        exact.tokens_marginal(produced),
        exact.latent_marginal(fixture),
        label="latent chain tokens vs latent marginal",
        call="latent_chain_output_distribution",
    )


def test_tokens_verified_under_the_wrong_latent_miss_the_latent_marginal():
    """The flawed variant: tokens drafted under the draft's latent, verified against the target's."""

    def misses(fixture):
        flawed = exact.tokens_marginal(exact.latent_chain_output_distribution(fixture, flawed=True))
        return exact.total_variation(flawed, exact.latent_marginal(fixture)) > FLAWED_DEVIATION

    found = find(latent_fixtures(), misses, settings=settings(derandomize=True, max_examples=2000, database=None))
    deviation = exact.total_variation(
        exact.tokens_marginal(exact.latent_chain_output_distribution(found, flawed=True)),
        exact.latent_marginal(found),
    )
    checks.assert_distributions_equal(
        exact.tokens_marginal(exact.latent_chain_output_distribution(found)),
        exact.latent_marginal(found),
        label="the correct procedure on the flawed variant's counterexample",
        call=f"flawed TV {deviation:.3f}",
    )


def sampled_fixtures(seed: int):
    """Levels whose drafts reject by construction (the residual draws are exercised), salted by the seed."""
    return latent_fixtures(relations=st.sampled_from(REJECTING_RELATIONS), salt=(seed,))


def assert_level_sampled(name: str, run, fixture, seed: int) -> None:
    """`run(n)` samples n (latent, tokens) of a level: they follow p(z) prod_i p(x_i | z)."""
    codes, positions, vocab = fixture.target_tokens.shape
    shape = (codes,) + (vocab,) * positions
    call = f"{run.__name__}(K={codes}, N={positions}, V={vocab}, seed={seed})"
    note(call)

    def sample(n):
        drawn = run(n)
        return np.ravel_multi_index((drawn.latents,) + tuple(drawn.tokens.T), shape)

    probs = exact.as_vector(target_level_joint(fixture), shape)
    labels = checks.outcome_labels(shape, "latent", "tokens")
    checks.assert_sampler_matches(name, probs, sample, seed=seed, call=call, label_outcome=labels)


@pytest.mark.statistical(tests=1)
@fresh_law_settings()
@given(seed=seeds, data=st.data())
def test_latent_chain_samples_the_target_level_joint(impl, seed, data):
    fixture = data.draw(sampled_fixtures(seed), label="fixture")

    def run_latent_chain(n):
        return drivers.run_latent_chain(impl, fixture, batch=n, seed=seed)

    assert_level_sampled("latent chain (z, x)", run_latent_chain, fixture, seed)


@pytest.mark.statistical(tests=1)
@fresh_law_settings()
@given(seed=seeds, data=st.data())
def test_factorized_verification_samples_the_target_level_joint(impl, seed, data):
    """The latent each batch row was drafted under is part of the outcome."""
    fixture = data.draw(sampled_fixtures(seed), label="fixture")

    def run_factorized(n):
        return drivers.run_factorized(impl, fixture, batch=n, seed=seed)

    assert_level_sampled("factorised (z, x)", run_factorized, fixture, seed)
