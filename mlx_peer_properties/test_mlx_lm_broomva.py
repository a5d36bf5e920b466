"""mlx-lm-broomva 0.31.3 judged on its own `mtp_speculative_generate_step` and `gemma4_assistant` drafter.

make install-peers PEER=mlx-lm-broomva && make verify-peers PEERS=mlx-lm-broomva
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from peer_checks import (
    Decoding,
    RecordingSampler,
    assert_each_token_is_a_sampler_output_on_its_conditional,
    assert_first_tokens_follow_the_law,
    first_difference,
    first_tokens_law,
    run_variant,
    tempered,
)

from ncm_verify.harness import strategies
from ncm_verify.peers import mlx_lm_broomva_spec as peer

VARIANTS = ("own", "planted")
MORE = settings(max_examples=8)
"""A planted rollback shows only after a round rejects with drafts left to trim (7 draws in 10): 8 examples."""


@st.composite
def decodings(draw, kind: str):
    """A target of `kind`, its MTP drafter, a prompt and a budget; small vocabularies so that drafts are accepted."""
    vocab = draw(st.sampled_from([4, 6, 12]), label="vocab")
    seed = draw(st.integers(0, 2**16), label="weights seed")
    prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    max_tokens = draw(st.integers(6, 20), label="max_tokens")  # long enough for a rejection to matter
    drafts = draw(st.integers(1, 4), label="num_draft_tokens")
    target = peer.make_target(kind, seed, vocab)
    drafter = peer.make_drafter(kind, seed + 1, vocab)
    note(
        f"from ncm_verify.peers.mlx_lm_broomva_spec import *; target = make_target({kind!r}, {seed}, {vocab}); "
        f"drafter = make_drafter({kind!r}, {seed + 1}, {vocab}); "
        f"generate(target, {prompt}, {max_tokens}, drafter, num_draft_tokens={drafts}, ...)"
    )
    return Decoding(target, drafter, drafts, prompt, max_tokens, None)


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@MORE
@given(data=st.data())
def test_greedy_mtp_decoding_emits_plain_greedy_decoding(kind, variant, data):
    """Temperature 0: the MTP loop emits the fork's own `generate_step` tokens, token for token, on attention and
    sliding-window targets (a window of 4, smaller than the prompt and generation: the ring wraps)."""
    target, drafter, drafts, prompt, max_tokens, _ = data.draw(decodings(kind))
    plain = peer.generate(target, prompt, max_tokens)
    spec = run_variant(peer, variant, target, prompt, max_tokens, drafter, num_draft_tokens=drafts)
    assert spec == plain, f"MTP {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("loop", ["mtp", "draft model"])
def test_a_prompt_cache_that_cannot_be_trimmed_is_refused_before_any_token(loop):
    """Both loops roll back by trimming: handed a prompt cache holding recurrent state (a hybrid `qwen3_next`
    target's `ArraysCache`), each refuses with a ValueError naming the cache type before it emits a token, rather
    than decoding with a rollback it cannot do."""
    from mlx_lm.models.cache import make_prompt_cache

    from ncm_verify.peers.mlx_tiny import make_mlx_lm_target

    target = make_mlx_lm_target("hybrid", 3, 6)
    emitted = []
    with pytest.raises(ValueError, match="ArraysCache") as refused:
        if loop == "mtp":
            steps = peer.mtp_steps(
                target, [1, 2, 3], 6, peer.make_drafter("attention", 4, 6), make_prompt_cache(target)
            )
        else:
            draft = make_mlx_lm_target("hybrid", 5, 6)
            cache = make_prompt_cache(target) + make_prompt_cache(draft)
            steps = peer.draft_model_steps(target, draft, [1, 2, 3], 6, 2, prompt_cache=cache)
        emitted.extend(steps)
    assert not emitted, f"{loop}: emitted {emitted} before refusing: {refused.value}"


@pytest.mark.peer_property(1)
@pytest.mark.parametrize("layout", ["clustered head", "as many K/V heads as query heads"])
@given(data=st.data())
def test_greedy_mtp_decoding_is_plain_with_every_drafter_layout_the_checkpoints_ship(layout, data):
    """The published assistants ship a clustered logit head (`use_ordered_embeddings`: centroids, a token
    ordering) and their configs leave `vocab_size` to the top level; others repeat no K/V heads. Whatever the
    drafter, temperature 0 emits plain decoding's tokens, down to a budget of one token. (On the attention target:
    on the sliding-window one the wrapped-ring finding makes the paths differ whatever the drafter.)"""
    kind = "attention"
    target, _, drafts, prompt, max_tokens, _ = data.draw(decodings(kind))
    vocab = target.args.vocab_size
    seed = data.draw(st.integers(0, 2**16), label="drafter seed")
    ordered = layout == "clustered head"
    drafter = peer.make_drafter(kind, seed, vocab, ordered=ordered, kv_heads=1 if ordered else 2)
    note(f"make_drafter({kind!r}, {seed}, {vocab}, ordered={ordered})")
    for budget in (1, max_tokens):
        plain = peer.generate(target, prompt, budget)
        spec = peer.generate(target, prompt, budget, drafter, num_draft_tokens=drafts)
        assert spec == plain, f"{layout}, max_tokens={budget}: MTP {spec} != plain {plain}: " + (
            first_difference(spec, plain)
        )


@pytest.mark.peer_property(2)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@MORE
@given(data=st.data())
def test_every_sampled_token_is_a_target_sampler_output_on_its_uncached_conditional(kind, variant, data):
    """Temperature > 0 (the fork's `make_sampler`: temperature, top-p, top-k, min-p): every emitted token is, in
    order, the output of a target-sampler row handed the uncached conditional of the tokens before it."""
    from mlx_lm.sample_utils import make_sampler

    target, drafter, drafts, prompt, max_tokens, _ = data.draw(decodings(kind))
    temperature = data.draw(st.sampled_from([0.6, 1.0, 1.5]), label="temp")
    top_p = data.draw(st.sampled_from([1.0, 0.9]), label="top_p")
    top_k = data.draw(st.sampled_from([0, 3]), label="top_k")
    min_p = data.draw(st.sampled_from([0.0, 0.05]), label="min_p")
    mx.random.seed(data.draw(st.integers(0, 2**31 - 1), label="mx.random.seed"))
    sampler = RecordingSampler(make_sampler(temp=temperature, top_p=top_p, top_k=top_k, min_p=min_p))
    spec = run_variant(peer, variant, target, prompt, max_tokens, drafter, num_draft_tokens=drafts, sampler=sampler)
    assert_each_token_is_a_sampler_output_on_its_conditional(
        spec, sampler.rows(), lambda tokens: peer.conditional(target, tokens), prompt
    )


@pytest.mark.peer_law
@pytest.mark.peer_property(2)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@settings(max_examples=1)
@given(data=st.data())
def test_the_first_sampled_tokens_follow_the_targets_law(kind, data):
    """Temperature > 0 (the fork's `make_sampler`, one RNG stream): the first two tokens of the MTP loop (the
    prefill's draw and the first round's) follow the target's exact joint law, enumerated in float64 from uncached
    forward passes, under the statistical policy (a chi-square at TV 0.2, power 0.99; V = 4). No planted run: the
    planted rollback (one rejected draft left attended) moved the first three tokens' law by less than sampling
    noise (TV 0.013-0.019 in 1500 runs, the own loop 0.015-0.022); properties 1 and 2 catch it call by call."""
    from mlx_lm.sample_utils import make_sampler

    vocab, weights = 4, data.draw(st.integers(0, 2**16), label="weights seed")
    target, drafter = peer.make_target(kind, weights, vocab), peer.make_drafter(kind, weights + 1, vocab)
    prompt = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6), label="prompt")
    drafts = data.draw(st.integers(1, 3), label="num_draft_tokens")
    temperature = data.draw(st.sampled_from([1.5, 1.0]), label="temp")  # flat first: drafts miss
    seed = data.draw(strategies.seeds, label="mx.random.seed")
    law = first_tokens_law(lambda t: tempered(peer.conditional(target, t), temperature), prompt, 2)
    sampler = make_sampler(temp=temperature)

    def decode() -> list[int]:
        return peer.generate(target, prompt, 2, drafter, num_draft_tokens=drafts, sampler=sampler)

    call = (
        f"mx.random.seed({seed}); generate(make_target({kind!r}, {weights}, 4), {prompt}, 2, "
        f"make_drafter({kind!r}, {weights + 1}, 4), num_draft_tokens={drafts}, sampler=make_sampler({temperature}))"
    )
    assert_first_tokens_follow_the_law(law, decode, vocab, seed=seed, call=call)


@pytest.mark.peer_property(2)
def test_drafts_are_drawn_from_the_q_the_rule_uses():
    pytest.skip(
        "not applicable: the drafter drafts by argmax whatever the sampler (generate.py:786), and the rule "
        "(keep a draft iff it equals the target's own draw) is exact for any draft; there is no q to match"
    )


@pytest.mark.peer_property(3)
def test_batch_equals_rows():
    pytest.skip("not applicable: mtp_speculative_generate_step decodes one sequence (last_token.reshape(1, 1))")


PROCESSORS = {
    "logit_bias": lambda vocab: {"logit_bias": {vocab - 2: 20.0}},
    "repetition_penalty": lambda vocab: {"repetition_penalty": 8.0},
}


@pytest.mark.peer_property(4, 6)
@pytest.mark.parametrize("option", sorted(PROCESSORS))
@given(data=st.data())
def test_logits_processors_act_on_the_mtp_path_as_on_plain_decoding(option, data):
    """The fork's `make_logits_processors` (logit bias, repetition penalty) handed to both loops: at temperature 0
    the MTP loop emits plain decoding's tokens."""
    from mlx_lm.sample_utils import make_logits_processors

    target, drafter, drafts, prompt, max_tokens, _ = data.draw(decodings("attention"))
    options = PROCESSORS[option](int(peer.conditional(target, prompt).shape[-1]))
    plain = peer.generate(target, prompt, max_tokens, logits_processors=make_logits_processors(**options))
    spec = peer.generate(
        target,
        prompt,
        max_tokens,
        drafter,
        num_draft_tokens=drafts,
        logits_processors=make_logits_processors(**options),
    )
    assert spec == plain, f"with {options}: MTP {spec} != plain {plain}: {first_difference(spec, plain)}"


@pytest.mark.peer_property(5)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_the_prompt_cache_after_mtp_decoding_equals_one_rebuilt_from_the_tokens_it_claims(kind, data):
    """A caller's prompt cache, after the loop (its rollbacks, and the final trim of unconsumed drafts), as the
    model attends to it (KV, rotating ring) equals caches rebuilt from the prompt and the emitted tokens it holds."""
    from mlx_lm.models.cache import make_prompt_cache

    from ncm_verify.mlx_lm_real.cache_views import assert_caches_equal_rebuilt

    target, drafter, drafts, prompt, max_tokens, _ = data.draw(decodings(kind))
    cache = make_prompt_cache(target)
    spec = peer.generate(target, prompt, max_tokens, drafter, num_draft_tokens=drafts, prompt_cache=cache)
    held = max(int(c.offset) for c in cache)
    tokens = (prompt + spec)[:held]
    assert held in (len(prompt) + len(spec) - 1, len(prompt) + len(spec)), f"cache offset {held} for {prompt + spec}"
    assert_caches_equal_rebuilt(target, cache, [tokens], label=f"{kind} after {spec}")


@pytest.mark.peer_property(6)
@given(data=st.data())
def test_num_draft_tokens_is_honoured_for_an_unbounded_budget(data):
    """max_tokens=-1 is documented as infinite; num_draft_tokens must still draft (the drafter is called)."""
    import itertools
    from unittest import mock

    from mlx_lm.generate import mtp_speculative_generate_step

    target, drafter, drafts, prompt, _, _ = data.draw(decodings("attention"))
    calls = []
    own = type(drafter).__call__

    def counted(self, *args, **kwargs):
        calls.append(1)
        return own(self, *args, **kwargs)

    with mock.patch.object(type(drafter), "__call__", counted):
        steps = mtp_speculative_generate_step(mx.array(prompt), target, drafter, num_draft_tokens=drafts, max_tokens=-1)
        emitted = [int(step[0]) for step in itertools.islice(steps, 12)]
    assert calls, f"12 tokens {emitted} with max_tokens=-1, num_draft_tokens={drafts}: the drafter never ran"


@pytest.mark.peer_property(1, 2)
@pytest.mark.parametrize("kind", peer.TARGET_KINDS)
@given(data=st.data())
def test_the_draft_model_loop_emits_plain_decoding_greedy_and_each_sampled_token_on_its_conditional(kind, data):
    """The fork's other speculative entry point, `speculative_generate_step` with a separate draft model (a smaller
    gemma4_text of the same vocabulary, seeded): at temperature 0 it emits `generate_step`'s tokens; sampled, each
    emitted token is a target-sampler output on the uncached conditional of the tokens before it."""
    from mlx_lm.sample_utils import make_sampler

    target, _, drafts, prompt, max_tokens, _ = data.draw(decodings(kind))
    vocab = target.args.vocab_size
    draft = peer.make_target(kind, data.draw(st.integers(0, 2**16), label="draft seed"), vocab)
    greedy = peer.generate_with_draft_model(target, draft, prompt, max_tokens, drafts)
    plain = peer.generate(target, prompt, max_tokens)
    assert greedy == plain, f"draft-model loop {greedy} != plain {plain}: {first_difference(greedy, plain)}"
    mx.random.seed(data.draw(st.integers(0, 2**31 - 1), label="mx.random.seed"))
    sampler = RecordingSampler(make_sampler(temp=data.draw(st.sampled_from([0.7, 1.2]), label="temp")))
    spec = peer.generate_with_draft_model(target, draft, prompt, max_tokens, drafts, sampler=sampler)
    assert_each_token_is_a_sampler_output_on_its_conditional(
        spec, sampler.rows(), lambda tokens: peer.conditional(target, tokens), prompt
    )


@pytest.mark.peer_property(4, 5)
@pytest.mark.parametrize("option", sorted(PROCESSORS))
@given(data=st.data())
def test_the_draft_model_loop_honours_logits_processors_and_a_callers_prompt_cache(option, data):
    """`speculative_generate_step` with a separate draft model, handed the fork's logits processors (logit bias,
    repetition penalty) and a caller's prompt cache (target's layers, then the draft's): at temperature 0 it emits
    plain decoding's tokens under the same processors, and the target's part of the cache afterwards attends as
    caches rebuilt from the tokens it holds; with no draft tokens at all (``num_draft_tokens=0``), plain decoding."""
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_lm.sample_utils import make_logits_processors

    from ncm_verify.mlx_lm_real.cache_views import assert_caches_equal_rebuilt

    target, _, drafts, prompt, max_tokens, _ = data.draw(decodings("attention"))
    vocab = target.args.vocab_size
    draft = peer.make_target("attention", data.draw(st.integers(0, 2**16), label="draft seed"), vocab)
    options = PROCESSORS[option](vocab)
    plain = peer.generate(target, prompt, max_tokens, logits_processors=make_logits_processors(**options))
    cache = make_prompt_cache(target) + make_prompt_cache(draft)
    spec = peer.generate_with_draft_model(
        target, draft, prompt, max_tokens, drafts, logits_processors=make_logits_processors(**options),
        prompt_cache=cache,
    )  # fmt: skip
    assert spec == plain, f"with {options}: draft-model loop {spec} != plain {plain}: {first_difference(spec, plain)}"
    none = peer.generate_with_draft_model(target, draft, prompt, max_tokens, 0)
    assert none == peer.generate(target, prompt, max_tokens), f"num_draft_tokens=0: {none}"
    target_cache = cache[: len(target.layers)]
    held = max(int(c.offset) for c in target_cache)
    assert_caches_equal_rebuilt(target, target_cache, [(prompt + spec)[:held]], label=f"after {spec}")
