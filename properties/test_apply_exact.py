"""Exact checks where sampling is blind: each apply_* step equals a float64 oracle given the same uniforms.

A bias of 1e-4 in an acceptance probability needs ~1e9 samples to see; here the
kernel's decisions are compared one by one with the float64 step (`exact`) on
Hypothesis-drawn uniforms, many placed a few ulps from their decision's boundary.
A decision within float32 rounding of its boundary is excused and counted (the rule:
`tolerances.ACCEPT_BOUNDARY_ULPS`, `tolerances.CDF_BOUNDARY_TERMS`). Each verify_*
must then equal its apply_* on the uniforms it draws, so a bug in one entry point
cannot hide behind the other.
"""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import event, given, note, reject, settings
from hypothesis import strategies as st

from ncm_verify.evidence.thresholds import MIN_DISTINCT_EXAMPLES
from ncm_verify.harness import checks
from ncm_verify.harness.exact_steps import exact_step_cases
from ncm_verify.harness.kernels import BLOCK, CHAIN, FACTORIZED, LATENT_CHAIN, STEP_KERNELS, TREE
from ncm_verify.harness.strategies import seeds, step_cases
from ncm_verify.oracles import exact
from ncm_verify.tolerances import EXACT_SUM_ULPS, normalisation_for


def outcome_arrays(kernel, outcome, uniforms: np.ndarray, call: str) -> tuple[np.ndarray, ...]:
    """The outcome's fields as NumPy arrays, after checking each one's shape."""
    batch, _, columns = uniforms.shape
    arrays = []
    for field, shape in kernel.outcome_shapes(batch, columns).items():
        array = np.array(getattr(outcome, field))
        assert array.shape == shape, f"{field}: shape {array.shape}, expected {shape}\n  call: {call}"
        arrays.append(array)
    return tuple(arrays)


def compare_step(step, outcome) -> exact.StepComparison:
    """The kernel's outcome against its float64 step on the same inputs and uniforms."""
    kernel = step.case.spec
    fields = outcome_arrays(kernel, outcome, step.uniforms, step.describe())
    return kernel.compare_step(*step.exact_args, step.uniforms.astype(np.float64), *fields, **step.case.options)


def vocabulary_band(vocab: int) -> str:
    return "V > 2^16" if vocab > 2**16 else "V = 2^16" if vocab == 2**16 else "V <= 8" if vocab <= 8 else "8 < V < 2^16"


def check_apply_step(impl, step) -> None:
    call, apply = step.describe(), step.case.spec.apply
    event("vocabulary", vocabulary_band(step.case.vocab))
    event("dtype", step.dtype)
    note(f"{apply}: {step.dtype}, shapes {[tuple(a.shape) for a in step.case.args]}")
    outcome = step.case.apply(impl, mx.array(step.uniforms))
    checks.assert_step_matches(compare_step(step, outcome), label=f"{apply} vs float64 step", call=call)


@pytest.mark.claim("C5")
@pytest.mark.needs("apply")
@given(step=step_cases(CHAIN))
def test_apply_chain_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, step):
    check_apply_step(impl, step)


@pytest.mark.claim("C6")
@pytest.mark.needs("apply")
@given(step=step_cases(FACTORIZED))
def test_apply_factorized_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, step):
    check_apply_step(impl, step)


@pytest.mark.claim("C6")
@pytest.mark.needs("apply")
@given(step=step_cases(LATENT_CHAIN))
def test_apply_latent_chain_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, step):
    check_apply_step(impl, step)


@pytest.mark.claim("C13")
@pytest.mark.parametrize("mode", TREE.argument("mode").values)
@given(data=st.data())
def test_apply_tree_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, mode, data):
    """Each mode; excused near a boundary only within float32 rounding and the residual's drift before it."""
    check_apply_step(impl, data.draw(step_cases(TREE, options={"mode": mode}), label="step"))


@pytest.mark.claim("C16")
@pytest.mark.needs("apply")
@given(step=step_cases(BLOCK))
def test_apply_block_takes_the_float64_steps_decisions_on_drawn_uniforms(impl, step):
    """Near u, a threshold is excused only within float32 rounding of w and rho (`threshold_boundary_slack`)."""
    check_apply_step(impl, step)


REAL_VOCAB = 128_256
"""Llama 3's vocabulary: where the any-order bound excuses draws within 1.5e-2 of the total."""
EXACTLY_SUMMED_KERNELS = (CHAIN, FACTORIZED, LATENT_CHAIN)
"""Kernels that draw from one residual or target row: exactly summed inputs keep every weight they draw from exact."""
PAST_EXACT_SLACK = st.builds(
    lambda ulps, sign: sign * ulps, st.integers(EXACT_SUM_ULPS + 1, 16), st.sampled_from([1, -1])
)
"""float32 ulps below or above a boundary: past `EXACT_SUM_ULPS`, within a threshold moved by 1e-6 (8-16 ulps)."""
EXACTLY_SUMMED_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""Each example reads rows of 128 256 entries (about 0.1 s), its kernel drawn: the distinct examples a claim's
property must show, two more."""


@pytest.mark.claim("C5", "C6")
@pytest.mark.needs("apply")
@settings(max_examples=EXACTLY_SUMMED_EXAMPLES)
@given(data=st.data())
def test_apply_steps_draw_to_two_ulps_of_the_float64_boundaries_of_exactly_summed_rows_at_V_128256(impl, data):
    """Rows of multiples of 2^-24 whose residual mass is 2^-m: every order of float32 sums is exact, so a draw is
    excused only within `tolerances.EXACT_SUM_ULPS` of its boundary (not the any-order (m + 2) eps32, 1.5e-2 here).

    q is 0, tiny or a share smaller where p is largest; uniforms sit 3-16 float32 ulps below or above a boundary, so
    a threshold moved by 1e-6 (8-16 ulps) decides otherwise.
    """
    kernel = data.draw(st.sampled_from(EXACTLY_SUMMED_KERNELS), label="kernel")
    step = data.draw(
        step_cases(
            kernel,
            vocabs=st.just(REAL_VOCAB),
            row_kinds=("exactly_summed",),
            relations=st.just("exact_mass_moved"),
            dtypes=("float32",),
            uniform_kinds=("boundary", "boundary", "boundary", "random"),
            offsets=PAST_EXACT_SLACK,
            real_rows=st.just(False),
        ),
        label="step",
    )
    check_apply_step(impl, step)


EXACT_ROW_EXAMPLES = EXACTLY_SUMMED_EXAMPLES
"""A block example reads up to 9 rows of 128 256 entries, a tree's up to 7 (about 0.2-0.4 s each)."""


def check_exact_row_step(impl, kernel, data, options: dict | None = None) -> None:
    step = data.draw(
        exact_step_cases(kernel, options, vocab=REAL_VOCAB, offsets=PAST_EXACT_SLACK), label="step on exact rows"
    )
    check_apply_step(impl, step)


@pytest.mark.claim("C16")
@pytest.mark.needs("apply")
@settings(max_examples=EXACT_ROW_EXAMPLES)
@given(data=st.data())
def test_apply_block_takes_the_float64_thresholds_to_two_ulps_on_rows_exact_in_float32_at_V_128256(impl, data):
    """Rows whose prefix weights (1, 1/2, 1/4), weighted residuals ``max(w p - q, 0)`` and masses (2^-m) float32
    computes exactly in any order, in float32, float16 or bfloat16 (`harness.exact_steps`): each threshold
    ``rho / (rho + 1 - w)``, ``h_g = w_g`` and the last draw is excused only within two ulps (the any-order slack
    excused 3e-2 of a threshold here), and uniforms sit 3-16 ulps from them: a w, rho or h moved by 1e-6 decides
    otherwise."""
    check_exact_row_step(impl, BLOCK, data)


@pytest.mark.claim("C13")
@pytest.mark.needs("apply")
@pytest.mark.parametrize("mode", TREE.argument("mode").values)
@settings(max_examples=EXACT_ROW_EXAMPLES)
@given(data=st.data())
def test_apply_tree_takes_the_float64_sibling_decisions_to_two_ulps_on_rows_exact_in_float32_at_V_128256(
    impl, mode, data
):
    """Each mode, on rows whose sibling residuals ``norm(max(r - q_i, 0))`` float32 computes exactly in any order (a
    power-of-two mass) or to one division's rounding (`exact_tree.residual_drift`), in float32 or half: each
    sibling's acceptance and the last draw are excused only within that (the any-order drift excused 1.5e-2 of
    the residual here), uniforms 3-16 ulps from their boundaries."""
    check_exact_row_step(impl, TREE, data, {"mode": mode})


HALF_KERNELS = (CHAIN, FACTORIZED, LATENT_CHAIN, BLOCK, TREE)
"""Every kernel with uniforms, the tree's mode drawn (greedy's half scores meet ties in test_greedy.py)."""
HALF_EXAMPLES = min(settings.default.max_examples, MIN_DISTINCT_EXAMPLES + 2)
"""The distinct examples a claim's property must show, two more: a tree example costs about 0.15 s here."""
HALF_OFFSETS = st.sampled_from([-4096, -256, -32, -8, -3, 3, 8, 32, 256, 4096])
"""float32 ulps from a boundary, just below or above it: past the float32 slack (2 ulps of an acceptance, (m + 2) of a
small row's draw) yet within a half rounding (2^11-2^16 ulps), so a step kept in half precision decides otherwise."""
HALF_RELATIONS = st.sampled_from(("tiny_q_where_p_large", "nearly_equal", "independent", "argmax_of_target"))
"""Rows where half precision bites: q a sliver of p (a ratio far above 1, a peaked residual), nearly equal rows."""


@pytest.mark.claim("C5", "C6", "C13", "C16")
@pytest.mark.needs("apply")
@pytest.mark.parametrize("kernel", HALF_KERNELS, ids=lambda kernel: kernel.name)
@settings(max_examples=HALF_EXAMPLES)
@given(data=st.data())
def test_half_precision_steps_take_the_float64_decisions_just_below_and_above_every_boundary(impl, kernel, data):
    """float16 and bfloat16 rows, every uniform placed at a float64 boundary of the rounded rows (each acceptance
    threshold, each cumulative step of a residual or target row) and moved just below or above it.

    A half-precision input is exact in float32, so the kernel must decide as float64 does on those values; a ratio,
    weight or cumulative sum kept in half precision moves its boundary by 2^11-2^16 ulps and decides otherwise.
    """
    step = data.draw(
        step_cases(
            kernel,
            vocabs=st.one_of(st.integers(2, 8), st.just(300)),
            relations=HALF_RELATIONS,
            dtypes=("float16", "bfloat16"),
            uniform_kinds=("boundary",),
            offsets=HALF_OFFSETS,
            real_rows=st.just(False),
        ),
        label="step",
    )
    check_apply_step(impl, step)


@pytest.mark.claim("C5", "C6")
@given(step=step_cases(FACTORIZED), swapped=st.booleans())
def test_residual_distribution_equals_the_float64_residual_of_the_same_rounded_rows(impl, step, swapped):
    """Half, one-hot, nearly equal (mass down to 1e-6) and equal rows, vocabularies past 2^16."""
    target, draft = step.case.args[:2]
    p, q = (draft, target) if swapped else (target, draft)
    exact_p, exact_q = (step.exact_args[1], step.exact_args[0]) if swapped else step.exact_args[:2]
    gap = max(np.abs(exact_p.sum(axis=-1) - 1).max(), np.abs(exact_q.sum(axis=-1) - 1).max())
    if gap > normalisation_for("p", p.dtype, p.shape[-1]):
        # Flat rows of 70 001 float16 subnormals round ~0.1% high together: invalid input, rightly refused.
        with pytest.raises(ValueError, match=r"^[pq]: "):
            impl.residual_distribution(p, q)
        reject()
    got = np.array(impl.residual_distribution(p, q).astype(mx.float32))
    expected = exact.residual(exact_p, exact_q)
    assert np.isfinite(got).all(), f"residual_distribution gave NaN or inf\n  call: {step.describe()}"
    checks.assert_close(got, expected, dtype=mx.float32, label="residual_distribution vs float64", call=step.describe())


@pytest.mark.claim("C11")
@pytest.mark.needs("apply")
@pytest.mark.parametrize("kernel", STEP_KERNELS, ids=lambda kernel: kernel.name)
@given(data=st.data(), seed=seeds)
def test_verify_equals_apply_on_the_uniforms_it_draws(impl, kernel, data, seed):
    """A bug in one entry point alone shows: verify_*(key) == apply_*(draw_uniforms(key))."""
    step = data.draw(step_cases(kernel), label="step")
    key = mx.random.key(seed)
    uniforms = impl.draw_uniforms(key, step.case.batch, step.uniforms.shape[1:])
    call = f"{kernel.verify}(key=mx.random.key({seed})) vs {kernel.apply}(draw_uniforms(key, ...)) on {step.describe()}"
    note(call)
    # Half and near-equal rows need not pass float32's input checks: this property is about the uniforms.
    verified = step.case.call(impl, key, validate=False)
    applied = step.case.apply(impl, uniforms)
    for field in applied._fields:
        label = f"verify vs apply: {field}"
        checks.assert_equal(getattr(verified, field), getattr(applied, field), label=label, call=call)
