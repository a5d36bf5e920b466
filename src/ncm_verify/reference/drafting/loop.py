"""The drafting loop: a `TextDrafter` proposes blocks, an mlx-lm target verifies each in one pass.

Each round the drafter proposes k tokens with the rows q(. | z) they were drawn from, the target scores
the last emitted token and the k drafts in one cached forward pass, and the implementation's
`verify_chain` accepts a prefix of the drafts and emits one more token (the correction or the bonus).
Both caches are then trimmed back (mlx-lm's `trim_prompt_cache`) to the accepted context: the target's
holds every emitted token but the newest, the drafter's what it had read before the round. Verifying
conditionally on z is exact whatever z is, so nothing needs the latent marginal.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from ncm_verify.reference import speculative
from ncm_verify.reference.drafting.base import DraftBlock, TextDrafter, rows_at_temperature
from ncm_verify.reference.ncm.kv_cache import check_count

__all__ = ["DraftedGeneration", "generate_drafted", "target_pass"]


@dataclass(frozen=True)
class DraftedGeneration:
    """What one drafted generation emitted and how.

    Attributes:
        tokens: the `max_tokens` ids emitted after the prompt.
        accepted: drafts accepted in each round (one target verification pass per round).
        drafted: drafts proposed in each round.
    """

    tokens: list[int]
    accepted: list[int]
    drafted: list[int]

    @property
    def target_passes(self) -> int:
        """Verification passes of the target (its prefill apart)."""
        return len(self.accepted)


class Steps(NamedTuple):
    """The loop's decisions, apart so that a planted bug replaces exactly one (private to the reference)."""

    propose: Callable[..., DraftBlock]
    """(drafter, cache, new_tokens, k, key, temperature, features) -> the block to verify."""
    draft_rows: Callable[..., mx.array]
    """(drafter, block, context, temperature, features) -> the q rows handed to verify_chain."""
    target_kept: Callable[[int, int, int], int]
    """(context length, accepted, drafted) -> positions the target's cache keeps after a round."""
    drafter_kept: Callable[[int, int], int]
    """(positions of the context the drafter read, its cache's offset) -> positions it keeps."""
    round_keys: Callable[[mx.array], tuple]
    """(the loop's key) -> (the next round's key, the drafter's key, verify_chain's key)."""


def _propose(drafter, cache, new_tokens, k, key, temperature, features) -> DraftBlock:
    return drafter.propose(cache, new_tokens, k, key, temperature=temperature, features=features)


REFERENCE_STEPS = Steps(
    propose=_propose,
    draft_rows=lambda drafter, block, context, temperature, features: block.probs,
    target_kept=lambda context_length, accepted, drafted: context_length - 1,
    drafter_kept=lambda read, offset: read,
    round_keys=lambda key: tuple(mx.random.split(key, 3)),
)


def target_pass(target, tokens: mx.array, cache, *, hidden: bool = False) -> tuple[mx.array, mx.array | None]:
    """The target's logits ``[B, T, V]`` for `tokens` ``[B, T]`` through `cache`, and with `hidden` its last
    hidden states ``[B, T, D]`` (an mlx-lm model whose ``model`` returns them before its head)."""
    if not hidden:
        return target(tokens, cache=cache), None
    states = target.model(tokens, cache)
    tied = getattr(getattr(target, "args", None), "tie_word_embeddings", False)
    logits = target.model.embed_tokens.as_linear(states) if tied else target.lm_head(states)
    return logits, states


def _trim(cache: list, keep: int, name: str) -> None:
    """Trim `cache` to `keep` positions; a cache that cannot is an error, never a silently longer context."""
    count = cache[0].offset - keep if cache else 0
    if count < 0:
        raise ValueError(f"{name}: holds {cache[0].offset} positions, fewer than the {keep} it should keep")
    if count and trim_prompt_cache(cache, count) != count:
        raise ValueError(f"{name}: could not trim {count} positions; drafting needs trimmable caches")


def _check_block(block: DraftBlock, k: int, vocab: int) -> None:
    if tuple(block.tokens.shape) != (1, k) or tuple(block.probs.shape) != (1, k, vocab):
        raise ValueError(
            f"drafter: proposed tokens {tuple(block.tokens.shape)} and rows {tuple(block.probs.shape)}, "
            f"expected {(1, k)} and {(1, k, vocab)}"
        )


def generate_drafted(
    target,
    drafter: TextDrafter,
    prompt,
    max_tokens: int,
    *,
    num_draft: int,
    key: mx.array,
    temperature: float = 1.0,
    kernels: ModuleType | Any = speculative,
    target_cache: list | None = None,
    drafter_cache: list | None = None,
    _steps: Steps = REFERENCE_STEPS,
) -> DraftedGeneration:
    """Generate `max_tokens` tokens after `prompt` from `target` at `temperature`, drafted by `drafter`.

    Args:
        target: an mlx-lm model (``target(tokens, cache=...)`` -> logits); its ``model`` gives hidden
            states when the drafter reads features.
        drafter: a `TextDrafter` over the target's vocabulary; one with ``reads_features`` true is handed
            the target's last hidden state at the position whose row emitted the block's first context token.
        prompt: 1-D token ids, at least one (two for a feature-reading drafter).
        max_tokens: tokens to emit, 0 or more.
        num_draft: drafts per round, 1 to ``drafter.max_block`` (fewer when fewer tokens remain).
        key: an ``mx.random.key``; each round splits it for the drafter and for `verify_chain`.
        temperature: > 0; the target's rows are ``softmax(logits / temperature)``, the drafter's at the same.
        kernels: the implementation providing ``verify_chain``.
        target_cache, drafter_cache: empty mlx-lm caches to fill (made here when None).
    """
    max_tokens = check_count("max_tokens", max_tokens)
    num_draft = check_count("num_draft", num_draft, minimum=1, maximum=drafter.max_block)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    vocab = target.args.vocab_size
    if drafter.vocab_size != vocab:
        raise ValueError(f"drafter: vocabulary {drafter.vocab_size}, the target's is {vocab}")
    raw: Any = prompt.reshape(-1).tolist() if isinstance(prompt, mx.array) else list(prompt)
    if len(raw) < 1 or not all(isinstance(t, numbers.Integral) and 0 <= int(t) < vocab for t in raw):
        raise ValueError(f"prompt: expected at least one token id in [0, {vocab}), got {raw}")
    context = [int(t) for t in raw]
    reads_features = bool(getattr(drafter, "reads_features", False))
    if reads_features and len(context) < 2:
        raise ValueError("prompt: a feature-reading drafter needs at least two tokens (the first block's features)")
    target_cache = make_prompt_cache(target) if target_cache is None else target_cache
    drafter_cache = drafter.make_cache() if drafter_cache is None else drafter_cache
    features = None
    if len(context) > 1:  # the target holds every context token but the last, which opens the next pass
        _, states = target_pass(target, mx.array([context[:-1]], dtype=mx.int32), target_cache, hidden=reads_features)
        features = None if states is None else states[:, -1]
    emitted: list[int] = []
    accepted: list[int] = []
    drafted: list[int] = []
    unread, read = context, 0  # tokens the drafter has not read; positions of the context it holds
    while len(emitted) < max_tokens:
        count = min(num_draft, max_tokens - len(emitted))
        key, draft_key, verify_key = _steps.round_keys(key)
        new_tokens = mx.array([unread], dtype=mx.int32)
        block = _steps.propose(drafter, drafter_cache, new_tokens, count, draft_key, temperature, features)
        read += len(unread)
        _check_block(block, count, vocab)
        q = _steps.draft_rows(drafter, block, context, temperature, features)
        drafts = block.tokens.astype(mx.int32)
        inputs = mx.concatenate([mx.array([context[-1:]], dtype=mx.int32), drafts], axis=1)
        logits, states = target_pass(target, inputs, target_cache, hidden=reads_features)
        p = rows_at_temperature(logits, temperature)
        outcome = kernels.verify_chain(p, q, drafts, key=verify_key)
        stood = int(outcome.num_accepted[0].item())
        tokens = [int(t) for t in outcome.tokens[0, : stood + 1].tolist()]
        context = context + tokens
        emitted += tokens
        accepted.append(stood)
        drafted.append(count)
        _trim(target_cache, _steps.target_kept(len(context), stood, count), "target_cache")
        _trim(drafter_cache, _steps.drafter_kept(read, drafter_cache[0].offset), "drafter_cache")
        features = None if states is None else states[:, stood]
        unread = tokens
    return DraftedGeneration(tokens=emitted[:max_tokens], accepted=accepted, drafted=drafted)
