"""The chain == tree relation judges a partial port by the exact checks' boundary rule, not bit for bit."""

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncm_verify.harness.drivers import make_step_case
from ncm_verify.harness.kernels import TREE
from ncm_verify.harness.tree_driver import assert_chain_tree_agree
from ncm_verify.protocol import import_implementation
from ncm_verify.pytest_plugin.implementation import RecordingImplementation

PORT = Path(__file__).resolve().parent.parent / "selftests" / "ports" / "plain_cumsum_chain.py"
VOCAB = 65_541
"""Past 2^16, where the two-level sampler's block sums and one plain cumulative sum round apart."""


def inside_hypothesis(test):
    return settings(max_examples=1, database=None, deadline=None)(given(st.just(None))(test))


"""The checkers note what they excuse, which Hypothesis allows only inside a test it runs."""


def rejected_chain_step(uniform: np.float32, p=None, q=None):
    """One drafted node that is rejected (its q/p the row's largest), the correction drawn at `uniform`.

    Rows p and q default to flat Dirichlet draws over `VOCAB` ids.
    """
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(VOCAB)) if p is None else np.asarray(p, np.float64)
    q = rng.dirichlet(np.ones(VOCAB)) if q is None else np.asarray(q, np.float64)
    drafted = int(np.argmax(q / np.maximum(p, 1e-300)))
    arrays = (np.stack([p, p])[None], np.stack([q, q])[None], np.array([[drafted]]), np.array([[-1]]), np.array([1]))
    step = make_step_case(TREE, arrays, "float32", options={"mode": "with_replacement"})
    step.uniforms = np.array([[[np.float32(1 - 2**-24), 0.5], [uniform, 0.5]]], dtype=np.float32)
    residual = np.maximum(step.exact_args[0][0, 0] - step.exact_args[1][0, 0], 0.0)
    return step, residual


def uniforms_near_the_first_boundaries(residual: np.ndarray, ulps: int = 8) -> list[np.float32]:
    """Uniforms within `ulps` float32 ulps of the first boundary ``S_0 / S_V`` of the residual's CDF."""
    cdf = np.cumsum(residual)
    bases = np.array(cdf[:1] / cdf[-1], np.float32).view(np.int32)
    return [np.array([base + k], np.int32).view(np.float32)[0] for base in bases for k in range(-ulps, ulps + 1)]


def implementation(name: str) -> RecordingImplementation:
    return RecordingImplementation(import_implementation(name))


@inside_hypothesis
def test_a_port_whose_chain_rounds_a_draw_apart_from_the_inherited_tree_passes_the_relation(_):
    """The issue's case: V = 65 541, a correction uniform near 2e-5, ids one apart; both kernels are exact."""
    port = implementation(str(PORT))
    _, residual = rejected_chain_step(np.float32(0.5))
    apart = 0
    for uniform in uniforms_near_the_first_boundaries(residual):
        step, _ = rejected_chain_step(uniform)
        u = mx.array(step.uniforms)
        tree = port.apply_tree(*step.case.args[:4], step.case.num_draft, u)
        target, draft, tokens = step.case.args[:3]
        chain = port.apply_chain(target, draft[:, :-1], tokens, step.case.num_draft, u)
        if np.array(tree.tokens).tolist() != np.array(chain.tokens).tolist():
            apart += 1
            assert_chain_tree_agree(port, step, mx.random.key(0), provenance=port.provenance)
    assert apart, "no uniform drew the two kernels apart: this test no longer exercises the boundary rule"


@inside_hypothesis
def test_a_tree_kernel_that_disagrees_with_the_chain_beyond_rounding_fails_the_relation_naming_it_inherited(_):
    """A tree correcting from p instead of the residual, the chain inherited: an assertion naming both origins."""
    mutant = implementation("ncm_verify.mutants.tree_correction_from_target")
    # p = (0.5, 0.3, 0.2), q = (0.1, 0.1, 0.8): the residual is (0.6, 0.4, 0) and p's CDF passes 0.55 at id 1.
    step, _ = rejected_chain_step(np.float32(0.55), p=[0.5, 0.3, 0.2], q=[0.1, 0.1, 0.8])
    with pytest.raises(AssertionError, match="beyond float32 rounding") as failure:
        assert_chain_tree_agree(mutant, step, mx.random.key(0), provenance=mutant.provenance)
    message = str(failure.value)
    assert "apply_tree is the module's own" in message
    assert "apply_chain inherited from ncm_verify.reference" in message
