"""dfly-mlx 0.1.0 judged on its DFly drafter and backend inside dflash-mlx 0.1.8's engine (`peers.dfly_mlx_spec`).

make install-peers PEER=dfly-mlx && make verify-peers PEERS=dfly-mlx
"""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import Decoding, assert_greedy_equals_plain

from ncm_verify.peers import dfly_mlx_spec as peer

MORE = settings(max_examples=5)


@st.composite
def cases(draw, kind: str):
    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    max_tokens = draw(st.integers(4, 20), label="max_tokens")
    block = draw(st.integers(2, 6), label="block_size")
    correction = draw(st.booleans(), label="hidden correction")
    target = peer.make_target(kind, seed, vocab)
    drafter = peer.make_drafter(target, seed + 1, block, correction)
    call = (
        f"target = make_target({kind!r}, {seed}, {vocab}); "
        f"drafter = make_drafter(target, {seed + 1}, {block}, {correction}); "
        f"generate(target, drafter, {prompt}, {max_tokens})"
    )
    note(f"from ncm_verify.peers.dfly_mlx_spec import *; {call}")
    return Decoding(target, drafter, prompt, max_tokens, call)


def drafted(target, drafter, prompt, max_tokens, **options):
    """The engine's tokens, and how many blocks dfly-mlx's `DFlyDraftBackend.draft_greedy` drafted."""
    from dfly_mlx.backend import DFlyDraftBackend

    own, calls = DFlyDraftBackend.draft_greedy, []

    def counted(self, **kwargs):
        calls.append(kwargs["block_len"])
        return own(self, **kwargs)

    with mock.patch.object(DFlyDraftBackend, "draft_greedy", counted):
        tokens, events, _ = peer.generate(target, drafter, prompt, max_tokens, **options)
    return tokens, events, calls


@pytest.mark.peer_property(1, 5)
@pytest.mark.parametrize("variant", ["own", "planted"])
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@MORE
@given(data=st.data())
def test_greedy_dfly_decoding_emits_plain_greedy_decoding(kind, variant, data):
    """dflash-mlx's engine drafting with dfly-mlx's backend and drafter (as `dfly_mlx.generate` runs it) emits
    plain greedy decoding token for token, each token the argmax of one uncached forward pass; dfly-mlx's backend
    drafted the blocks (not a fallback)."""
    target, drafter, prompt, max_tokens, call = data.draw(cases(kind))
    if variant == "planted":
        with peer.planted():
            spec, events, blocks = drafted(target, drafter, prompt, max_tokens)
    else:
        spec, events, blocks = drafted(target, drafter, prompt, max_tokens)
    note(f"emitted {spec}; dfly drafted {len(blocks)} blocks")
    assert events and not any(e.fallback_ar for e in events), "the engine fell back to plain decoding"
    assert blocks or len(spec) <= 1, f"dfly-mlx's backend drafted nothing in {len(spec)} tokens"
    plain = peer.plain(target, prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"greedy ({call})")


@pytest.mark.peer_property(4)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@settings(max_examples=3)
@given(data=st.data())
def test_suppressed_tokens_act_on_the_dfly_path_as_on_plain_decoding(kind, data):
    """`suppress_token_ids`, the engine's one decoding option, reaches dfly-mlx's drafter (`greedy_tokens_with_mask`
    on its corrected hidden states) and the verifier alike: the same tokens as plain decoding, none suppressed."""
    target, drafter, prompt, max_tokens, call = data.draw(cases(kind))
    vocab = int(peer.conditional(target, prompt).shape[-1])
    suppressed = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=vocab - 1, unique=True))
    spec, _, _ = drafted(target, drafter, prompt, max_tokens, suppress_token_ids=suppressed)
    plain = peer.plain(target, prompt, max_tokens, suppress_token_ids=suppressed)
    assert spec == plain, f"suppressing {suppressed}: dfly {spec} != plain {plain}\n  {call}"
    assert not set(spec) & set(suppressed), f"suppressed tokens {set(spec) & set(suppressed)} emitted"


@pytest.mark.peer_property(1)
def test_a_hybrid_target():
    pytest.skip(
        "not applicable: DFly checkpoints target Qwen3 (attention); on a qwen3_next target the engine's rollback is "
        "dflash-mlx's own, whose tape finding (dflash-mlx, off Metal) would repeat here"
    )


@pytest.mark.peer_property(2, 3, 6)
@pytest.mark.parametrize("what", ["sampled law", "batch", "request parameters"])
def test_what_dfly_does_not_offer(what):
    pytest.skip(
        "not applicable: DFlyDraftBackend implements draft_greedy only and dflash-mlx's engine decodes greedily, "
        "one request at a time; dfly_mlx.generate.generate takes max_tokens and stream only (no server)"
    )


@pytest.mark.peer_property(1)
@settings(max_examples=3)
@given(data=st.data(), period=st.integers(2, 3), repeats=st.integers(3, 5))
def test_prompt_lookup_drafts_between_dfly_blocks_leave_greedy_decoding_plain(data, period, repeats):
    """A repetitive prompt: dflash-mlx's prompt lookup (on in 0.1.8: dfly-mlx's switch to turn it off finds no
    `copyspec_mode`) drafts some blocks, and each such block advances dfly-mlx's drafter context without drafting
    (`advance_projected_context_cache`); the tokens still equal plain greedy decoding, each the uncached argmax."""
    vocab = data.draw(st.sampled_from([4, 6]), label="vocab")
    seed = data.draw(st.integers(0, 2**16), label="weights seed")
    unit = data.draw(st.lists(st.integers(0, vocab - 1), min_size=period, max_size=period), label="unit")
    prompt, target = unit * repeats, peer.make_target("attention", seed, vocab)
    drafter = peer.make_drafter(target, seed + 1, 4, True)
    spec, _, summary = peer.generate(target, drafter, prompt, 20)
    call = f"target = make_target('attention', {seed}, {vocab}); drafter = make_drafter(target, {seed + 1}, 4, True)"
    note(f"{call}; generate(target, drafter, {prompt}, 20): prompt-lookup hits {summary.copyspec_hits}")
    plain = peer.plain(target, prompt, 20)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, call)


@pytest.mark.peer_property(1)
@settings(max_examples=2)
@given(data=st.data())
def test_traced_runs_draft_synchronously_and_emit_plain_greedy_decoding(data):
    """With dflash-mlx's cycle tracing on, the engine launches dfly-mlx's drafts synchronously (its profiling
    path): the tokens still equal plain greedy decoding."""
    target, drafter, prompt, max_tokens, call = data.draw(cases("attention"))
    spec, events, _ = peer.generate_traced(target, drafter, prompt, max_tokens)
    assert events and not any(e.fallback_ar for e in events), "the engine fell back to plain decoding"
    plain = peer.plain(target, prompt, max_tokens)
    assert_greedy_equals_plain(spec, plain, lambda tokens: peer.conditional(target, tokens), prompt, f"traced {call}")


@pytest.mark.peer_property(6)
def test_the_drafter_and_backend_refuse_shapes_they_cannot_draft_with():
    """dfly-mlx's checks: a block of one token, a layer list of another length than `num_target_layers`, target
    features or a drafter context of the wrong width, and a context advance without a cache each raise
    ValueError (not a silent wrong draft)."""
    import mlx.core as mx
    from dfly_mlx.backend import DFlyDraftBackend
    from dfly_mlx.model import DFlyDraftModel

    from ncm_verify.peers import dflash_mlx_spec

    target = peer.make_target("attention", 5, 6)
    drafter = peer.make_drafter(target, 6, 4, True)
    width = drafter.args.hidden_size
    with pytest.raises(ValueError, match="block_len"):
        DFlyDraftBackend().draft_greedy(
            target_model=target, target_ops=None, draft_model=drafter, draft_cache=[], staged_first=mx.array([1]),
            draft_context=mx.zeros((1, 1, 2 * width)), block_len=1, mask_token_tail=mx.array([0]),
            suppress_token_mask=None, async_launch=False,
        )  # fmt: skip
    with pytest.raises(ValueError, match="num_target_layers"):
        dflash_mlx_spec.make_drafter(target, 6, 4, model_class=DFlyDraftModel, num_target_layers=3)
    with pytest.raises(ValueError, match="target features"):
        drafter.project_target_hidden(mx.zeros((1, 1, width)))
    with pytest.raises(ValueError, match="context width"):
        drafter.forward_projected_context(noise_embedding=mx.zeros((1, 4, width)), draft_context=mx.zeros((1, 1, 3)))
    with pytest.raises(ValueError, match="cache is required"):
        drafter.advance_projected_context_cache(draft_context=mx.zeros((1, 1, 2 * width)), cache=None)
