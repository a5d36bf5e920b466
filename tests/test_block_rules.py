"""Block verification's oracle and published rules: the paper's own example, and the judgement's verdicts."""

import numpy as np

from ncm_verify.oracles import exact, exact_block
from ncm_verify.peers import block_judgement


def context_free_fixture(target_row, draft_row, length: int) -> exact.AutoregressiveFixture:
    rows = int(exact.context_offsets(len(target_row), length)[length])
    return exact.AutoregressiveFixture(
        np.tile(target_row, (rows, 1)), np.tile(draft_row, (rows, 1)), len(target_row), length
    )


def test_the_papers_two_token_example_accepts_eleven_ninths_where_the_chain_accepts_ten():
    """Sun et al. section 2: target (1/3, 2/3), draft (2/3, 1/3), two drafts: 10/9 token-wise, 11/9 by blocks."""
    fixture = context_free_fixture([1 / 3, 2 / 3], [2 / 3, 1 / 3], 3)
    block = exact_block.accepted_length_law(exact_block.PAPER_RULE, fixture, (), 2)
    chain = exact_block.chain_accepted_length_law(fixture, (), 2)
    assert abs(exact_block.expected_accepted(block) - 11 / 9) < 1e-12
    assert abs(exact_block.expected_accepted(chain) - 10 / 9) < 1e-12


def test_the_float64_step_at_given_uniforms_follows_the_enumerated_length_law():
    """The step's tau, over a fine grid of uniforms, has the law `last_passing_law` enumerates."""
    fixture = context_free_fixture([0.2, 0.5, 0.3], [0.6, 0.1, 0.3], 3)
    target, draft = np.tile(fixture.target[0], (1, 3, 1)), np.tile(fixture.draft[0], (1, 2, 1))
    drafts = np.array([[0, 2]])
    grid = (np.arange(40) + 0.5) / 40
    counts = np.zeros(3)
    for u1 in grid:
        for u2 in grid:
            uniforms = np.array([[[u1, u2, 0.5], [0.5, 0.5, 0.5]]])
            counts[exact_block.step(target, draft, drafts, [2], uniforms)[1][0]] += 1
    law = exact_block.PAPER_RULE.length_law(target[0], draft[0], drafts[0])
    assert np.abs(counts / counts.sum() - law).max() < 0.03


def test_the_judgement_calls_the_paper_and_vllm_exact_and_the_shipped_mistakes_not():
    findings = {
        f.algorithm: f for f in block_judgement.judgement_table(drafters=("sampled",), max_drafts=2, per_size=3)
    }
    assert findings["paper (Sun et al. Alg. 2)"].exact and findings["vllm #46781"].exact
    assert findings["vllm-ascend before #15673"].exact  # token-wise: exact, fewer drafts accepted
    assert findings["vllm-ascend before #15673"].accepted_gap < 0
    for mistaken in ("vllm-ascend before #7808", "vllm-ascend #11985 review"):
        assert not findings[mistaken].exact and findings[mistaken].drafts == 2
