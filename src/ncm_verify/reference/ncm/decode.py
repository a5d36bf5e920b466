"""Speculative decoding with the reference model as target and draft, following mlx-lm's
``speculative_generate_step``: prefill all but the last prompt token, then each round
feeds the last emitted token plus the drafts, verifies, emits and rewinds both caches.
"""

from __future__ import annotations

from types import ModuleType

import mlx.core as mx

from ncm_verify.reference import speculative
from ncm_verify.reference.ncm.kv_cache import (
    KVCache,
    apply_model,
    apply_prefill,
    check_count,
    check_tokens,
    make_prompt_cache,
    trim_prompt_cache,
)
from ncm_verify.reference.ncm.model import NCM

__all__ = [
    "rewind_caches",
    "speculative_generate",
]


def rewind_caches(target_cache: list[KVCache], draft_cache: list[KVCache], num_draft: int, num_accepted: int) -> None:
    """Drop the rejected drafts' K/V after a round that accepted `num_accepted` of `num_draft`.

    The target ran the last token and every draft, so it drops the rejected
    ones; the draft never ran its last draft, so it drops one fewer. A cache
    that cannot drop them raises rather than keep them (mlx-lm #1423, #1446).
    """
    num_draft = check_count("num_draft", num_draft)
    num_accepted = check_count("num_accepted", num_accepted, maximum=num_draft)
    for name, cache, count in (
        ("target_cache", target_cache, num_draft - num_accepted),
        ("draft_cache", draft_cache, max(num_draft - num_accepted - 1, 0)),
    ):
        if trim_prompt_cache(cache, count) != count:
            raise ValueError(f"{name}: cannot rewind {count} rejected positions; the cache is not trimmable")


def _draft_round(draft: NCM, cache: list[KVCache], inputs: mx.array, num_draft: int, key):
    """Sample `num_draft` tokens from `draft` one at a time (argmax when `key` is None).

    Returns the tokens ``[1, G]`` and the distributions they were drawn from ``[1, G, V]``.
    """
    tokens, probs = [], []
    keys = mx.random.split(key, num_draft) if key is not None else [None] * num_draft
    for round_key in keys:
        logits = apply_model(draft, inputs, cache)[:, -1].astype(mx.float32)
        if round_key is None:
            inputs = mx.argmax(logits, axis=-1, keepdims=True).astype(mx.int32)
        else:
            inputs = mx.random.categorical(logits, key=round_key)[:, None].astype(mx.int32)
        tokens.append(inputs)
        probs.append(mx.softmax(logits, axis=-1))
    return mx.concatenate(tokens, axis=1), mx.stack(probs, axis=1)


def speculative_generate(
    target: NCM,
    draft: NCM,
    prompt,
    max_tokens,
    *,
    num_draft: int = 2,
    key=None,
    kernels: ModuleType = speculative,
    prefill_step_size: int = 512,
) -> list[int]:
    """Exactly `max_tokens` new token ids for a 1-D `prompt`, drafted by `draft` and verified for `target`.

    A budget of 0 yields nothing (mlx-lm's convention); mlx-lm's -1 (unbounded) has no
    meaning under the reference's fixed context and raises, as any budget beyond it does.

    Args:
        target: the model whose distribution (or greedy decoding) the output follows; causal mask.
        draft: a causal model over the same vocabulary.
        prompt: at least one token id.
        max_tokens: a non-negative integer; the last round's surplus tokens are cut.
        num_draft: drafts per round (fewer when fewer tokens remain).
        key: an ``mx.random.key`` to sample (``kernels.verify_chain``); None for greedy
            decoding (``kernels.verify_greedy``), mlx-lm's temperature 0.
        kernels: the implementation providing ``verify_chain`` and ``verify_greedy``.
        prefill_step_size: prompt tokens per prefill chunk.
    """
    max_tokens = check_count("max_tokens", max_tokens)
    num_draft = check_count("num_draft", num_draft, minimum=1)
    prompt = check_tokens("prompt", prompt, target)
    if prompt.shape != (1, prompt.shape[1]) or prompt.shape[1] < 1:
        raise ValueError(f"prompt: expected one non-empty sequence, got shape {tuple(prompt.shape)}")
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"draft: vocabulary {draft.config.vocab_size} differs from the target's {target.config.vocab_size}"
        )
    room = min(target.config.total_length, draft.config.total_length) - prompt.shape[1]
    if max_tokens > room:
        raise ValueError(
            f"max_tokens: {max_tokens} new tokens after a {prompt.shape[1]}-token prompt "
            f"exceed the context ({room} left)"
        )
    target_cache, draft_cache = make_prompt_cache(target), make_prompt_cache(draft)
    y = apply_prefill(target, prompt, target_cache, prefill_step_size)
    draft_y = apply_prefill(draft, prompt, draft_cache, prefill_step_size)
    emitted: list[int] = []
    while len(emitted) < max_tokens:
        count = min(num_draft, max_tokens - len(emitted))
        if key is not None:
            key, draft_key, verify_key = mx.random.split(key, 3)
        drafts, draft_probs = _draft_round(draft, draft_cache, draft_y, count, None if key is None else draft_key)
        logits = apply_model(target, mx.concatenate([y, drafts], axis=1), target_cache)
        if key is None:
            outcome = kernels.verify_greedy(logits, drafts)
        else:
            target_probs = mx.softmax(logits.astype(mx.float32), axis=-1)
            outcome = kernels.verify_chain(target_probs, draft_probs, drafts, key=verify_key)
        accepted = int(outcome.num_accepted[0].item())
        emitted.extend(outcome.tokens[0, : accepted + 1].tolist())
        rewind_caches(target_cache, draft_cache, count, accepted)
        y = outcome.tokens[:, accepted : accepted + 1]
        # all drafts stood: the draft has not yet run its last one
        draft_y = mx.concatenate([drafts[:, -1:], y], axis=1) if accepted == count else y
    return emitted[:max_tokens]
