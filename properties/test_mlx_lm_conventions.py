"""C8: mlx-lm conventions on the suite's decoding protocol; C11: the project's stricter contract.

The reference model runs as an autoregressive language model under the `causal`
mask; the decoding functions come from the implementation under test
(`MLX_LM_NAMES`), and so do the verification kernels they drive. Caches are
judged as the model attends to them, never by their `state`. mlx-lm's own code
is judged by `test_mlx_lm_loop.py`.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import (
    as_numpy,
    assert_close,
    assert_decodings_equal,
    assert_equal,
    assert_trimmed_window_attends_to_kept_entries,
    top_two_gap,
)
from ncm_verify.protocol import mlx_lm_api, ncm_api
from ncm_verify.reference.ncm.config import DTYPES

VERIFIERS = ("greedy", "chain")


def draw_models(data, impl, *, dtype: str = "float32"):
    """A causal target, and a draft with the same weights or other ones."""
    api = ncm_api(impl)
    config = data.draw(strategies.ncm_configs(api.NCMConfig, masks=("causal",), dtypes=(dtype,)), label="config")
    relation = data.draw(st.sampled_from(["same weights", "other weights"]), label="draft relation")
    draft_seed = config.seed if relation == "same weights" else config.seed + 1
    draft_config = api.NCMConfig(**{**config.to_dict(), "seed": draft_seed})
    return config, api.make_model(config), draft_config, api.make_model(draft_config)


def draw_request(data, impl, min_tokens: int = 1):
    """Target and draft models, a prompt, a budget that fits the context, and G."""
    config, target, draft_config, draft = draw_models(data, impl)
    length = data.draw(st.integers(1, config.total_length - 1), label="prompt length")
    prompt = data.draw(strategies.prefixes(config, length), label="prompt")
    max_tokens = data.draw(st.integers(min_tokens, config.total_length - length), label="max_tokens")
    num_draft = data.draw(st.integers(1, 4), label="num_draft")
    call = (
        f"speculative_generate(make_model({config}), draft seed {draft_config.seed}, {prompt}, "
        f"max_tokens={max_tokens}, num_draft={num_draft}"
    )
    return config, target, draft, prompt, max_tokens, num_draft, call


def whole_sequence_logits(impl, model, tokens: list[int]) -> mx.array:
    """Logits of `tokens` in one pass over an empty cache: nothing is read back from a cache."""
    return impl.apply_model(model, mx.array([tokens], dtype=mx.int32), impl.make_prompt_cache(model))[0]


def assert_caches_attend_like(
    impl, actual: list, model, tokens: list[int], probe: list[int], *, label: str, call: str
) -> None:
    """`actual` holds `tokens` as the model attends to it: a probe continuation's logits equal the whole pass's."""
    assert_equal([layer.offset for layer in actual], [len(tokens)] * len(actual), label=f"{label}: offsets", call=call)
    if not probe:  # the context is full: nothing more can attend
        return
    got = impl.apply_model(model, mx.array([probe], dtype=mx.int32), actual)[0]
    want = whole_sequence_logits(impl, model, tokens + probe)[len(tokens) :]
    assert_close(got, want, dtype=mx.float32, label=f"{label}: probe logits", call=call)


@pytest.mark.claim("C8")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_prefilling_all_but_the_last_token_then_feeding_it_gives_the_whole_prompt_logits(impl, dtype, data):
    decode = mlx_lm_api(impl)
    config, model, _, _ = draw_models(data, impl, dtype=dtype)
    length = data.draw(st.integers(1, config.total_length), label="prompt length")
    prompt = data.draw(strategies.prefixes(config, length), label="prompt")
    step = data.draw(st.integers(1, 4), label="prefill_step_size")
    call = f"apply_prefill(make_model({config}), {prompt}, cache, prefill_step_size={step}); apply_model(last token)"
    note(call)
    cache = decode.make_prompt_cache(model)
    last = decode.apply_prefill(model, mx.array([prompt], dtype=mx.int32), cache, prefill_step_size=step)
    assert_equal(last, [prompt[-1:]], label="token left for the first step", call=call)
    assert_equal([layer.offset for layer in cache], [length - 1] * len(cache), label="positions prefilled", call=call)
    logits = decode.apply_model(model, last, cache)[0, -1]
    expected = whole_sequence_logits(decode, model, prompt)[-1]
    assert_close(
        logits, expected, dtype=DTYPES[dtype], label="last-token logits after prefill vs whole prompt", call=call
    )
    scale = float(np.abs(as_numpy(expected)).max())
    assert_decodings_equal(
        [int(mx.argmax(logits).item())],
        [int(mx.argmax(expected).item())],
        margin=top_two_gap(expected),
        scale=scale,
        dtype=DTYPES[dtype],
        label="next token after prefill vs whole prompt",
        call=call,
    )


def planned_drafts(impl, data, model, prompt: list[int], num_draft: int, planned: int) -> list[int]:
    """Drafts the target accepts greedily for `planned` positions, then one it rejects, then any."""
    drafts = []
    for position in range(num_draft):
        best = int(mx.argmax(whole_sequence_logits(impl, model, prompt + drafts)[-1]).item())
        if position < planned:
            drafts.append(best)
        elif position == planned:
            others = [token for token in range(model.config.vocab_size) if token != best]
            drafts.append(data.draw(st.sampled_from(others), label=f"rejected draft {position}"))
        else:
            drafts.append(data.draw(st.integers(0, model.config.vocab_size - 1), label=f"draft {position}"))
    return drafts


@pytest.mark.claim("C8")
@given(data=st.data())
def test_caches_rewound_by_the_rejected_count_equal_caches_built_from_the_accepted_tokens(impl, data):
    decode = mlx_lm_api(impl)
    config, target, draft_config, draft = draw_models(data, impl)
    length = data.draw(st.integers(1, config.total_length - 1), label="prompt length")
    prompt = data.draw(strategies.prefixes(config, length), label="prompt")
    num_draft = data.draw(st.integers(1, config.total_length - length), label="num_draft")
    planned = data.draw(st.integers(0, num_draft), label="drafts planned to stand")
    drafts = planned_drafts(decode, data, target, prompt, num_draft, planned)
    verifier = data.draw(st.sampled_from(VERIFIERS), label="verifier")
    seed = data.draw(strategies.seeds, label="verify_seed")
    probe = data.draw(st.lists(st.integers(0, config.vocab_size - 1), min_size=1, max_size=2), label="probe")

    # One round as mlx-lm runs it: the target reads the last prompt token and every draft,
    # the draft reads its input and every draft but the last (it sampled that one).
    target_cache, draft_cache = decode.make_prompt_cache(target), decode.make_prompt_cache(draft)
    tokens = mx.array([prompt], dtype=mx.int32)
    y = decode.apply_prefill(target, tokens, target_cache, prefill_step_size=2)
    draft_y = decode.apply_prefill(draft, tokens, draft_cache, prefill_step_size=3)
    drafted = mx.array([drafts], dtype=mx.int32)
    logits = decode.apply_model(target, mx.concatenate([y, drafted], axis=1), target_cache)
    draft_logits = decode.apply_model(draft, mx.concatenate([draft_y, drafted[:, :-1]], axis=1), draft_cache)
    if verifier == "greedy":
        outcome = impl.verify_greedy(logits, drafted)
    else:
        probs = [mx.softmax(x.astype(mx.float32), axis=-1) for x in (logits, draft_logits)]
        outcome = impl.verify_chain(probs[0], probs[1], drafted, key=mx.random.key(seed))
    accepted = int(outcome.num_accepted[0].item())
    event(f"accepted {accepted} of {num_draft}")
    call = (
        f"round(target={config}, draft seed {draft_config.seed}, prompt={prompt}, drafts={drafts}, "
        f"{verifier} verify_seed={seed}) -> accepted {accepted}; rewind_caches(..., {num_draft}, {accepted})"
    )
    note(call)
    decode.rewind_caches(target_cache, draft_cache, num_draft, accepted)
    kept = prompt + drafts[:accepted]
    room = config.total_length - len(kept)
    assert_caches_attend_like(
        decode,
        target_cache,
        target,
        kept,
        probe[:room],
        call=call,
        label="target cache after rewind vs built from the accepted tokens",
    )
    kept = prompt + drafts[: min(accepted, num_draft - 1)]
    assert_caches_attend_like(
        decode,
        draft_cache,
        draft,
        kept,
        probe[: config.total_length - len(kept)],
        call=call,
        label="draft cache after rewind vs built from the accepted tokens",
    )


def greedy_decoding(impl, model, prompt: list[int], max_tokens: int) -> tuple[list[int], float, float]:
    """The target's own greedy tokens, each from a fresh pass over the whole sequence; with the
    smallest top-two gap and the largest logit seen."""
    tokens, margin, scale = [], np.inf, 0.0
    for _ in range(max_tokens):
        logits = whole_sequence_logits(impl, model, prompt + tokens)[-1]
        margin, scale = min(margin, top_two_gap(logits)), max(scale, float(np.abs(as_numpy(logits)).max()))
        tokens.append(int(mx.argmax(logits).item()))
    return tokens, margin, scale


@pytest.mark.claim("C8")
@given(data=st.data())
def test_greedy_speculative_decoding_emits_exactly_the_target_greedy_decoding(impl, data):
    decode = mlx_lm_api(impl)
    config, target, draft, prompt, max_tokens, num_draft, call = draw_request(data, impl)
    step = data.draw(st.integers(1, 4), label="prefill_step_size")
    call += f", prefill_step_size={step})"
    note(call)
    emitted = decode.speculative_generate(
        target,
        draft,
        mx.array(prompt, dtype=mx.int32),
        max_tokens,
        num_draft=num_draft,
        kernels=impl,
        prefill_step_size=step,
    )
    expected, margin, scale = greedy_decoding(decode, target, prompt, max_tokens)
    assert_decodings_equal(
        emitted,
        expected,
        margin=margin,
        scale=scale,
        dtype=mx.float32,
        label="greedy speculative tokens vs target greedy decoding",
        call=call,
    )


@pytest.mark.claim("C8")
@given(data=st.data())
def test_a_trimmed_rotating_cache_attends_to_exactly_the_entries_it_kept_or_refuses(impl, data):
    decode = mlx_lm_api(impl)
    max_size = data.draw(st.integers(1, 6), label="max_size")
    sizes = data.draw(strategies.update_sizes, label="update sizes")
    trim = data.draw(st.integers(0, sum(sizes)), label="trim")
    call = f"RotatingKVCache({max_size}) after updates of {sizes} positions; trim({trim}); update_and_fetch(1 more)"
    note(call)
    event("wrapped" if sum(sizes) > max_size else "not wrapped")
    assert_trimmed_window_attends_to_kept_entries(decode.RotatingKVCache(max_size), sizes, trim, call=call)


@pytest.mark.claim("C8")
@given(data=st.data())
def test_a_trim_count_beyond_what_the_cache_holds_trims_everything_and_returns_that_count(impl, data):
    decode = mlx_lm_api(impl)
    held = data.draw(st.integers(0, 5), label="positions held")
    cache = decode.KVCache()
    if held:
        cache.update_and_fetch(mx.zeros((1, 1, held, 2)), mx.zeros((1, 1, held, 2)))
    count = data.draw(st.integers(held, held + 10), label="n")
    call = f"KVCache holding {held}; trim({count})"
    note(call)
    assert_equal(cache.trim(count), held, label="count trimmed (mlx-lm clamps to what is held)", call=call)
    assert_equal(cache.offset, 0, label="offset after trimming everything", call=call)


@pytest.mark.claim("C11")
@given(data=st.data())
def test_a_trim_of_a_rotating_cache_that_has_dropped_positions_raises_a_value_error_naming_n(impl, data):
    decode = mlx_lm_api(impl)
    max_size = data.draw(st.integers(1, 6), label="max_size")
    sizes = data.draw(strategies.update_sizes.filter(lambda sizes: len(sizes) > 1), label="update sizes")
    cache = decode.RotatingKVCache(max_size)
    for size in sizes:
        cache.update_and_fetch(mx.zeros((1, 1, size, 2)), mx.zeros((1, 1, size, 2)))
    trim = data.draw(st.integers(1, sum(sizes)), label="trim")
    call = f"RotatingKVCache({max_size}) after updates of {sizes}; trim({trim})"
    note(call)
    if cache.is_trimmable():  # nothing dropped yet: the trim can happen
        event("nothing dropped")
        assert_equal(cache.trim(trim), trim, label="count trimmed from a cache that dropped nothing", call=call)
        return
    with pytest.raises(ValueError, match=r"^n:"):
        cache.trim(trim)
    assert_equal(cache.offset, sum(sizes), label="offset after a refused trim", call=call)


@pytest.mark.claim("C11")
@given(data=st.data())
def test_a_trim_count_that_is_negative_or_not_an_integer_raises_a_value_error_naming_n(impl, data):
    decode = mlx_lm_api(impl)
    rotating = data.draw(st.booleans(), label="rotating")
    held = data.draw(st.integers(0, 5), label="positions held")
    cache = decode.RotatingKVCache(8) if rotating else decode.KVCache()
    if held:
        cache.update_and_fetch(mx.zeros((1, 1, held, 2)), mx.zeros((1, 1, held, 2)))
    bad = data.draw(st.one_of(st.integers(max_value=-1), st.floats(), st.none(), st.just(True)), label="n")
    call = f"{type(cache).__name__} holding {held}; trim({bad!r})"
    note(call)
    with pytest.raises(ValueError, match=r"^n:"):
        cache.trim(bad)
    assert_equal(cache.offset, held, label="offset after a refused trim", call=call)


@pytest.mark.claim("C8")
@given(data=st.data())
def test_speculative_decoding_emits_exactly_max_tokens_for_every_budget_including_zero(impl, data):
    decode = mlx_lm_api(impl)
    config, target, draft, prompt, max_tokens, num_draft, call = draw_request(data, impl, min_tokens=0)
    seed = data.draw(st.none() | strategies.seeds, label="sampler seed (None: greedy)")
    call += f", key={seed})"
    note(call)
    emitted = decode.speculative_generate(
        target,
        draft,
        mx.array(prompt, dtype=mx.int32),
        max_tokens,
        num_draft=num_draft,
        kernels=impl,
        key=None if seed is None else mx.random.key(seed),
    )
    assert_equal(len(emitted), max_tokens, label="tokens emitted vs max_tokens", call=call)
    assert all(0 <= token < config.vocab_size for token in emitted), f"ids outside [0, {config.vocab_size}): {emitted}"


@pytest.mark.claim("C11")
@given(data=st.data())
def test_a_budget_that_is_negative_not_an_integer_or_beyond_the_context_raises_a_value_error_naming_max_tokens(
    impl, data
):
    decode = mlx_lm_api(impl)
    config, target, _, draft = draw_models(data, impl)
    length = data.draw(st.integers(1, config.total_length - 1), label="prompt length")
    prompt = data.draw(strategies.prefixes(config, length), label="prompt")
    beyond = st.integers(config.total_length - length + 1, config.total_length + 4)
    # mlx-lm's -1 (unbounded) too: the reference's context is fixed
    invalid = strategies.invalid_budgets.filter(lambda b: not (type(b) is int and b == 0))
    bad = data.draw(invalid | beyond, label="max_tokens")
    call = f"speculative_generate(make_model({config}), draft, {prompt}, max_tokens={bad!r})"
    note(call)
    with pytest.raises(ValueError, match=r"^max_tokens:"):
        decode.speculative_generate(target, draft, mx.array(prompt, dtype=mx.int32), bad, kernels=impl)


@pytest.mark.claim("C8")
@given(data=st.data())
def test_a_rotating_cache_attends_to_the_positions_mlx_lm_s_rotating_cache_attends_to(impl, data):
    from mlx_lm.models.cache import RotatingKVCache as MlxLmRotatingKVCache

    decode = mlx_lm_api(impl)
    max_size = data.draw(st.integers(1, 6), label="max_size")
    keep = data.draw(st.integers(0, max_size - 1), label="keep")
    sizes = data.draw(strategies.update_sizes, label="update sizes")
    call = f"RotatingKVCache({max_size}, keep={keep}) vs mlx-lm's, updates of {sizes} positions"
    note(call)
    ours, theirs = decode.RotatingKVCache(max_size, keep=keep), MlxLmRotatingKVCache(max_size, keep=keep)
    positions = mx.arange(sum(sizes), dtype=mx.float32).reshape(1, 1, -1, 1)
    begin = 0
    for step, size in enumerate(sizes):
        new = positions[:, :, begin : begin + size]
        begin += size
        # a key's only feature is its position; mlx-lm's ring is not in temporal order, so compare sets
        got, want = (sorted(np.array(cache.update_and_fetch(new, new)[0]).ravel().tolist()) for cache in (ours, theirs))
        assert got == want, f"update {step} ({size} positions): attends to {got}, mlx-lm's to {want}\n  call: {call}"
