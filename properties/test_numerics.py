"""Numerics the kernels keep: float32 arithmetic for half inputs, p(x) = 0 never emitted, p == q safe."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.harness import checks, drivers
from ncm_verify.harness.kernels import CHAIN, SAMPLING_KERNELS, SINGLE_ROW_KERNELS
from ncm_verify.harness.strategies import (
    RESIDUAL_MASSES,
    autoregressive_fixtures,
    kernel_cases,
    provided_kernels,
    seeds,
)
from ncm_verify.oracles import exact

pytestmark = pytest.mark.claim("C5", "C6")

ACCEPTANCE_KERNELS = tuple(kernel for kernel in SAMPLING_KERNELS if kernel.acceptance_view)
"""Kernels that judge each draft against p itself (a tree's later siblings meet a residual instead)."""
HALF_DTYPES = st.sampled_from([mx.float16, mx.bfloat16])
LARGEST_UNIFORM = 1.0 - 2.0**-24
"""The largest uniform the kernels draw (the last centre of the 2^-23 grid)."""
EXTREME_UNIFORMS = (0.0, 2.0**-24, 0.5, LARGEST_UNIFORM)
"""Zero is outside the generator's range, but float32 generators have produced it (vLLM)."""


@pytest.mark.claim("C5", "C6", "C13", "C16")
@given(case=kernel_cases(SAMPLING_KERNELS), dtype=HALF_DTYPES, seed=seeds)
def test_half_precision_inputs_give_the_result_of_their_float32_values(impl, case, dtype, seed):
    half = case.cast(dtype)
    widened = half.cast(mx.float32)  # the same numbers, exactly, in float32
    call = f"{case.spec.verify}({dtype}) vs float32 of the same values, key({seed})"
    note(call)
    # Widened half rows sum to 1 only within half precision: skip float32's stricter input check.
    first, second = half.call(impl, mx.random.key(seed)), widened.call(impl, mx.random.key(seed), validate=False)
    for field in first._fields:
        checks.assert_equal(getattr(first, field), getattr(second, field), label=f"{field}", call=call)


VOCABULARIES = {"small": st.just(False), "above 65 536": st.just(True)}
"""Both sizes in every run: a large-vocabulary case costs little at a batch of 8."""


@pytest.mark.claim("C5", "C6", "C13", "C16")
@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
@given(data=st.data(), dtype=st.sampled_from([mx.float32, mx.float16, mx.bfloat16]), seed=seeds)
def test_a_token_the_target_rules_out_is_never_emitted(impl, vocabulary, data, dtype, seed):
    case = data.draw(kernel_cases(SAMPLING_KERNELS, batch=2048, large_vocab=VOCABULARIES[vocabulary]), label="case")
    cased = case.cast(dtype)
    outcome = cased.call(impl, mx.random.key(seed))
    probability = cased.emitted_target_probability(outcome)
    note(f"{case.spec.verify}({dtype}, key({seed}))")
    assert (probability > 0).all(), f"{int((probability <= 0).sum())} emitted ids have target probability 0"


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@pytest.mark.needs("apply")
@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
@given(data=st.data(), uniform=st.sampled_from(EXTREME_UNIFORMS))
def test_acceptance_follows_u_times_q_below_p_at_every_uniform(impl, vocabulary, data, uniform):
    """Drafts with p(x) = 0 are rejected and drafts with p(x) >= q(x) accepted, whatever u."""
    case = data.draw(kernel_cases(ACCEPTANCE_KERNELS, large_vocab=VOCABULARIES[vocabulary]), label="case")
    uniforms = mx.full(case.uniform_shape(), uniform, dtype=mx.float32)
    outcome = case.apply(impl, uniforms)
    call = f"{case.spec.apply}(uniforms = {uniform!r})"
    note(call)
    if case.spec.well_formed is not None:
        case.spec.well_formed(case, outcome)
    p_x, q_x, eligible, accepted = case.spec.acceptance_view(case, outcome)
    must_reject = eligible & (p_x <= 0)
    must_accept = eligible & (p_x > 0) & (p_x >= q_x)
    assert not (accepted & must_reject).any(), f"{call}: accepted a draft with p(x) = 0"
    assert accepted[must_accept].all(), f"{call}: rejected a draft with p(x) >= q(x)"


@pytest.mark.needs("apply")
@given(
    kernel=provided_kernels(SINGLE_ROW_KERNELS),
    batch=st.integers(1, 8),
    positions=st.integers(1, 4),
    vocab=st.sampled_from([2, 3, 8, 1000, 2**16 + 5]),
    mass=st.sampled_from(RESIDUAL_MASSES),
    seed=seeds,
    data=st.data(),
)
def test_a_rejected_draft_is_corrected_from_the_residual_even_when_its_mass_is_tiny(
    impl, kernel, batch, positions, vocab, mass, seed, data
):
    """With p and q nearly equal the residual max(p - q, 0) is tiny but not zero: it, not p or q, is sampled."""
    case, source = drivers.make_nearly_equal_rejection(
        kernel, batch=batch, positions=positions, vocab=vocab, mass=mass, seed=seed
    )
    shape = case.uniform_shape()
    corrections = data.draw(
        st.lists(st.integers(0, 2**23 - 1), min_size=batch * shape[2], max_size=batch * shape[2]),
        label="correction uniforms on the 2^-23 grid",
    )
    uniforms = np.full(shape, LARGEST_UNIFORM, dtype=np.float32)
    uniforms[:, 1] = (np.array(corrections, dtype=np.float32).reshape(batch, shape[2]) + 0.5) / 2**23
    outcome = case.apply(impl, mx.array(uniforms))
    call = f"{kernel.apply}(B={batch}, N={positions}, V={vocab}, residual mass {mass}, seed={seed})"
    note(call)
    _, _, judged, accepted = kernel.acceptance_view(case, outcome)
    checks.assert_equal(
        accepted[judged], np.zeros(judged.sum(), bool), label="drafts accepted at u = 1 - 2^-24", call=call
    )
    corrected = kernel.corrections(case, outcome)
    drawn = corrected >= 0
    assert drawn.any(axis=1).all(), f"{call}: a sequence drew no correction after its drafts were rejected"
    checks.assert_equal(corrected[drawn], source[drawn], label="corrections vs the residual's only id", call=call)


@given(fixture=autoregressive_fixtures(min_length=2, max_outcomes=512), seed=seeds)
def test_a_draft_equal_to_the_target_is_always_accepted_without_nan(impl, fixture, seed):
    equal = exact.AutoregressiveFixture(fixture.target, fixture.target.copy(), fixture.vocab, fixture.length)
    case = drivers.make_kernel_case(CHAIN, equal, batch=256, seed=seed, max_draft=fixture.length - 1)
    outcome = case.call(impl, mx.random.key(seed))
    checks.assert_equal(outcome.num_accepted, case.num_draft, label="accepted drafts when p == q", call=f"seed {seed}")
    residual = np.array(impl.residual_distribution(case.args[0][:, 0], case.args[0][:, 0]))
    assert np.isfinite(residual).all(), "residual_distribution(p, p) produced NaN or inf"
    checks.assert_close(
        residual, np.array(case.args[0][:, 0]), dtype=mx.float32, label="residual(p, p) falls back to p"
    )


@given(fixture=autoregressive_fixtures(), scale=st.sampled_from([1e-7, 1e-6, 1e-3]), seed=seeds)
def test_the_residual_distribution_matches_float64_and_is_finite_when_p_nearly_equals_q(impl, fixture, scale, seed):
    rng = np.random.default_rng(seed)
    p = fixture.target.astype(np.float32)
    q = np.abs(p + scale * rng.standard_normal(p.shape)).astype(np.float32)
    q /= q.sum(axis=1, keepdims=True)
    got = np.array(impl.residual_distribution(mx.array(p), mx.array(q)))
    assert np.isfinite(got).all(), f"residual_distribution gave NaN or inf at |p - q| ~ {scale}"
    # Differences of float32 values within a factor 2 are exact (Sterbenz), so even a tiny
    # residual agrees with the float64 one computed from the same float32 rows.
    expected = exact.residual(p, q)
    checks.assert_close(got, expected, dtype=mx.float32, label="residual vs float64", call=f"scale {scale}")
    checks.assert_close(got.sum(axis=1), np.ones(len(p)), dtype=mx.float32, label="residual rows sum to 1")
