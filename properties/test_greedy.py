"""C7: greedy verification reproduces the target's greedy decoding exactly."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify.harness import checks, drivers
from ncm_verify.harness.strategies import autoregressive_fixtures, draft_lengths, greedy_steps, seeds
from ncm_verify.oracles import exact, numpy_steps

pytestmark = pytest.mark.claim("C7")

GREEDY_BATCH = 256


@given(fixture=autoregressive_fixtures(), max_draft=draft_lengths, mixed=st.booleans(), seed=seeds)
def test_greedy_verification_reproduces_target_argmax_decoding(impl, fixture, max_draft, mixed, seed):
    call = f"run_chain(greedy=True, V={fixture.vocab}, T={fixture.length}, G={max_draft}, mixed={mixed}, seed={seed})"
    note(call)
    run = drivers.run_chain(impl, fixture, batch=GREEDY_BATCH, max_draft=max_draft, mixed=mixed, seed=seed, greedy=True)
    expected = np.broadcast_to(np.array(exact.greedy_decoding(fixture)), run.sequences.shape)
    checks.assert_equal(run.sequences, expected, label="greedy-verified tokens vs target argmax decoding", call=call)


@given(step=greedy_steps())
def test_greedy_verification_takes_each_rows_first_maximum_on_ties_masks_and_high_ids(impl, step):
    """Exact, not sampled: every accepted draft and emitted token is the first index of its row's maximum."""
    scores, dtype, drafts, num_draft = step
    batch, rows, vocab = scores.shape
    call = f"verify_greedy(V={vocab}, B={batch}, G={rows - 1}, dtype={dtype}, num_draft={num_draft.tolist()})"
    note(call)
    outcome = impl.verify_greedy(
        mx.array(scores.astype(np.float32)).astype(getattr(mx, dtype)),
        mx.array(drafts.astype(np.int32)),
        num_draft=mx.array(num_draft.astype(np.int32)),
    )
    tokens, counts = numpy_steps.numpy_greedy_step(scores, drafts, num_draft)  # NumPy's argmax on the float64 values
    checks.assert_equal(outcome.num_accepted, counts, label="accepted drafts vs NumPy's first-argmax step", call=call)
    checks.assert_equal(outcome.tokens, tokens, label="emitted tokens vs NumPy's first-argmax step", call=call)
