"""The text drafting loop's input contract, and the tiny test drafters' own consistency."""

from __future__ import annotations

import mlx.core as mx
import pytest

from ncm_verify.mlx_lm_real.models import TinySpec, make_tiny_model
from ncm_verify.mlx_lm_real.text_drafters import DRAFTER_KINDS, make_drafter
from ncm_verify.reference.drafting import generate_drafted

SPEC = TinySpec(vocab_size=8, seed=1)


@pytest.fixture(scope="module")
def target():
    return make_tiny_model(SPEC)


@pytest.mark.parametrize(
    "arguments, drafter_kind, named",
    [
        (dict(max_tokens=-1), "block", "max_tokens"),
        (dict(num_draft=0), "block", "num_draft"),
        (dict(num_draft=5), "block", "num_draft"),  # past the block drafter's max_block of 4
        (dict(temperature=0.0), "block", "temperature"),
        (dict(prompt=[]), "block", "prompt"),
        (dict(prompt=[8]), "block", "prompt"),
        (dict(prompt=[1]), "block reading features", "prompt"),
    ],
)
def test_bad_input_is_refused_with_a_value_error_naming_the_argument(target, arguments, drafter_kind, named):
    call = dict(prompt=[1, 2], max_tokens=3, num_draft=2, temperature=1.0) | arguments
    drafter = make_drafter(drafter_kind, SPEC, 2)
    with pytest.raises(ValueError, match=f"^{named}"):
        generate_drafted(target, drafter, call.pop("prompt"), call.pop("max_tokens"), key=mx.random.key(0), **call)


def test_a_drafter_over_another_vocabulary_is_refused(target):
    other = make_drafter("autoregressive", TinySpec(vocab_size=16), 2)
    with pytest.raises(ValueError, match="^drafter"):
        generate_drafted(target, other, [1, 2], 3, num_draft=2, key=mx.random.key(0))


@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_a_drafters_proposal_rows_are_its_uncached_rows_and_its_cache_holds_what_it_read(kind):
    drafter = make_drafter(kind, SPEC, 3)
    context = mx.array([[1, 2, 3]], dtype=mx.int32)
    features = mx.ones((1, SPEC.hidden_size)) if drafter.reads_features else None
    cache = drafter.make_cache()
    block = drafter.propose(cache, context, 3, mx.random.key(4), temperature=0.7, features=features)
    again = drafter.block_probs(context, block.tokens, block.codes, temperature=0.7, features=features)
    assert mx.allclose(block.probs, again, atol=1e-5).item()
    assert cache[0].offset >= 3
