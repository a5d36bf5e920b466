"""The helpers of the mlx-lm properties: outcome indices of token sequences, and the sampler-call record."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ncm_verify.mlx_lm_real.exact_verifier import DistributionSampler
from ncm_verify.mlx_lm_real.models import TinySpec, first_tokens_law, make_tiny_model, outcome_index
from ncm_verify.mlx_lm_real.recording import CallLog, check_sampler_calls, sampler_match


def test_outcome_index_orders_sequences_as_first_tokens_law_does():
    model = make_tiny_model(TinySpec(vocab_size=8, seed=3))
    law = first_tokens_law(model, [1, 2], 2, DistributionSampler(1.0).probs)
    first = np.exp(np.array(model(mx.array([[1, 2]]))[0, -1].astype(mx.float32)))
    first /= first.sum()
    # the first token's marginal: summing the law over the second token of each index
    assert np.allclose([law[[outcome_index([a, b], 8) for b in range(8)]].sum() for a in range(8)], first, atol=1e-6)
    assert outcome_index([7, 7], 8) == 63 and outcome_index([0], 8) == 0


@pytest.mark.parametrize(
    ("tokens", "vocab", "named"),
    [
        ([-1], 8, "tokens"),  # would wrap to the last outcome
        ([8], 8, "tokens"),  # would carry into the next position's index
        ([1, 9], 8, "tokens"),
        ([2.5], 8, "tokens"),
        ([], 8, "tokens"),
        ([1], 0, "vocab"),
        ([1], True, "vocab"),
    ],
)
def test_outcome_index_refuses_a_token_outside_the_vocabulary_naming_the_argument(tokens, vocab, named):
    with pytest.raises(ValueError, match=rf"^{named}:"):
        outcome_index(tokens, vocab)


def test_a_sampler_handed_a_row_of_another_prefix_fails_the_sampler_call_check():
    target = make_tiny_model(TinySpec(vocab_size=8, seed=1))
    log = CallLog()
    model = log.model(target, "target")
    sampler = log.sampler(DistributionSampler(1.0))
    mx.random.seed(0)
    prompt, steps = [1, 2], []
    for _ in range(3):
        # the row after the prompt alone, at every step: a conditional that ignores what was emitted
        logits = model(mx.array([prompt]))[0, -1:].astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        steps.append((int(sampler(logprobs).item()), logprobs[0], False))
    with pytest.raises(AssertionError, match=r"rows handed to the target sampler vs (.|\n)*# target sampler call 1,"):
        check_sampler_calls(log, steps, target, prompt, sampler_match, lookahead=0, label="stale loop", call="")


def test_a_sampler_called_before_any_forward_pass_is_refused():
    sampler = CallLog().sampler(DistributionSampler(1.0))
    with pytest.raises(AssertionError, match="before any model forward pass"):
        sampler(mx.zeros((1, 8)))
