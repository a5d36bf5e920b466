"""C7: greedy verification reproduces the target's greedy decoding exactly."""

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from ncm_verify import checks, drivers, exact
from ncm_verify.strategies import autoregressive_fixtures, draft_lengths, seeds

pytestmark = pytest.mark.claim("C7")

GREEDY_BATCH = 256


@given(fixture=autoregressive_fixtures(), max_draft=draft_lengths, mixed=st.booleans(), seed=seeds)
def test_greedy_verification_reproduces_target_argmax_decoding(impl, fixture, max_draft, mixed, seed):
    call = f"run_chain(greedy=True, V={fixture.vocab}, T={fixture.length}, G={max_draft}, mixed={mixed}, seed={seed})"
    note(call)
    run = drivers.run_chain(impl, fixture, batch=GREEDY_BATCH, max_draft=max_draft, mixed=mixed, seed=seed, greedy=True)
    expected = np.broadcast_to(np.array(exact.greedy_decoding(fixture)), run.sequences.shape)
    checks.assert_equal(run.sequences, expected, label="greedy-verified tokens vs target argmax decoding", call=call)
