"""An exact stochastic verifier for mlx-lm models: `speculative_generate_step`'s call shape and
yields, mlx-lm's models, caches and logits processors, and the suite's `verify_chain`/`verify_greedy`.

The reference's speculative loop over any mlx-lm model (the `SpeculativeRollback` family, claim C18): hybrid
models whose recurrent layers and sliding-window rings cannot be trimmed are rolled back by snapshot and replay.

mlx-lm's loop accepts a draft only when it equals the target's own sample
(acceptance sum p*q). This one accepts with probability min(1, p/q) and
corrects from the residual (acceptance sum min(p, q)), so the sampler must
expose the distribution it draws from: `make_sampler` returns a
`DistributionSampler` whose temperature, top-p and top-k apply identically
to the draft's q and the target's p.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NamedTuple, cast

import mlx.core as mx
from mlx_lm.generate import generate_step  # noqa: F401  (the plain loop of this decoder is mlx-lm's)
from mlx_lm.models import cache as mlx_lm_cache
from mlx_lm.models.cache import KVCache, trim_prompt_cache
from mlx_lm.sample_utils import apply_top_k, apply_top_p

from ncm_verify.reference import speculative
from ncm_verify.reference.drafting.rollback import restore_caches, rewinds_by_trim, roll_back, snapshot_caches
from ncm_verify.reference.ncm.kv_cache import check_count

NAME = "ncm-verify exact verifier on mlx-lm models"
ACCEPTANCE_RULE = "sum min(p, q)"
"""A draft stands with probability min(1, p/q), so with sum min(p, q) overall."""


class DistributionSampler:
    """mlx-lm's `make_sampler` transforms (top-p, then top-k, then temperature) as a distribution.

    Called on log-probabilities it draws a token from `probs` with the global
    MLX random state, as mlx-lm's samplers do; temperature 0 is the argmax.
    """

    def __init__(self, temp: float = 0.0, top_p: float = 0.0, top_k: int = 0):
        if not temp >= 0:
            raise ValueError(f"temp: expected a non-negative number, got {temp!r}")
        self.temp, self.top_p, self.top_k = float(temp), float(top_p), int(top_k)

    @property
    def greedy(self) -> bool:
        return self.temp == 0

    def scores(self, logprobs: mx.array) -> mx.array:
        """Log-weights after top-p and top-k, divided by the temperature (greedy: unchanged)."""
        if self.greedy:
            return logprobs
        if 0 < self.top_p < 1.0:
            logprobs = apply_top_p(logprobs, self.top_p)
        if self.top_k > 0:
            logprobs = apply_top_k(logprobs, self.top_k)
        return logprobs * (1.0 / self.temp)

    def probs(self, logprobs: mx.array) -> mx.array:
        """The float32 distribution a token is drawn from (one-hot at the argmax when greedy)."""
        if self.greedy:
            best = mx.argmax(logprobs, axis=-1, keepdims=True)
            return (mx.arange(logprobs.shape[-1]) == best).astype(mx.float32)
        return mx.softmax(self.scores(logprobs).astype(mx.float32), axis=-1)

    def __call__(self, logprobs: mx.array) -> mx.array:
        if self.greedy:
            return mx.argmax(logprobs, axis=-1)
        return mx.random.categorical(self.scores(logprobs))

    def key(self) -> mx.array:
        """A key for one verification, drawn from the global MLX random state like every draw here."""
        return mx.random.key(cast(int, mx.random.randint(0, 2**31 - 1).item()))


def make_sampler(temp: float = 0.0, top_p: float = 0.0, top_k: int = 0) -> DistributionSampler:
    """A sampler usable by mlx-lm's loops and this one alike."""
    return DistributionSampler(temp, top_p, top_k)


def make_prompt_cache(model) -> list:
    """A `KVCache` for every attention layer, sliding-window layers too, so that a trim rewinds exactly.

    mlx-lm's model builds the window from the cache's offset (its sliding-window
    mask), so a full cache attends to the same positions as a rotating one. A
    model with recurrent layers keeps its own caches (`ArraysCache`), which the
    loop rolls back by snapshot and replay.
    """
    # names of this module are the decoder's API: mlx-lm's ring class is not one (the properties look it up)
    own = mlx_lm_cache.make_prompt_cache(model)
    if all(isinstance(cache, (KVCache, mlx_lm_cache.RotatingKVCache)) for cache in own):
        return [KVCache() for _ in model.layers]
    return own


def check_budget(max_tokens) -> int:
    """`max_tokens` as an int: 0 or more, or -1 for an unbounded generator (mlx-lm's convention)."""
    return check_count("max_tokens", max_tokens, minimum=-1)


def apply_processors(processors, history: mx.array, logits: mx.array) -> mx.array:
    """Log-probabilities of one row ``[1, V]`` after mlx-lm's logits processors saw `history`."""
    for processor in processors or ():
        logits = processor(history, logits)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def prefill(model, cache: list, tokens: mx.array, step: int) -> mx.array:
    """Process all of `tokens` but the last into `cache`, in chunks; returns the last (mlx-lm's `_prefill`)."""
    while tokens.size > 1:
        count = min(step, tokens.size - 1)
        model(tokens[:count][None], cache=cache)
        mx.eval([c.state for c in cache])
        tokens = tokens[count:]
    return tokens


def draft_tokens(draft_model, cache, inputs, count, sampler, processors, history):
    """`count` tokens sampled from the draft, and the distributions q they were drawn from ``[count, V]``."""
    tokens, probs = [], []
    for _ in range(count):
        logits = draft_model(inputs[None], cache=cache)[:, -1, :]
        logprobs = apply_processors(processors, history, logits)
        q = sampler.probs(logprobs)
        inputs = mx.argmax(q, axis=-1) if sampler.greedy else mx.random.categorical(mx.log(q))
        inputs = inputs.astype(mx.uint32)
        history = mx.concatenate([history, inputs])
        tokens.append(inputs)
        probs.append(q)
    return mx.concatenate(tokens), mx.concatenate(probs)


def draft_and_snapshot(draft_model, cache, inputs, count, sampler, processors, history, by_trim: bool):
    """`draft_tokens`, and the draft's caches as they were before it (None when a trim will rewind them)."""
    saved = None if by_trim else snapshot_caches(cache)
    drafts, q = draft_tokens(draft_model, cache, inputs, count, sampler, processors, history)
    return drafts, q, saved


def target_logprobs(model, cache, inputs, processors, history):
    """The target's log-probabilities ``[len(inputs), V]``, row i after `history` and ``inputs[1:i+1]``."""
    logits = model(inputs[None], cache=cache)[0]
    rows = []
    for i in range(inputs.size):
        if i:
            history = mx.concatenate([history, inputs[i : i + 1]])
        rows.append(apply_processors(processors, history, logits[i : i + 1]))
    return mx.concatenate(rows)


def verify(kernels: ModuleType, sampler, logprobs, q, drafts):
    """The number of drafts accepted and the tokens emitted (accepted drafts, then one more)."""
    if sampler.greedy:
        outcome = kernels.verify_greedy(logprobs[None], drafts[None].astype(mx.int32))
    else:
        p = sampler.probs(logprobs)
        outcome = kernels.verify_chain(p[None], q[None], drafts[None].astype(mx.int32), key=sampler.key())
    accepted = int(outcome.num_accepted[0].item())
    return accepted, outcome.tokens[0, : accepted + 1].tolist()


def rewind(model_cache, draft_cache, num_draft: int, num_accepted: int) -> None:
    """Drop the rejected drafts' K/V; a cache that cannot drop them all raises instead of keeping them."""
    for name, cache, count in (
        ("prompt_cache", model_cache, num_draft - num_accepted),
        ("prompt_cache", draft_cache, max(num_draft - num_accepted - 1, 0)),
    ):
        trimmed = trim_prompt_cache(cache, count)
        if trimmed != count:
            raise ValueError(f"{name}: trimmed {trimmed} of {count} rejected positions; the cache is not trimmable")


def draft_kept(draft_y: mx.array, drafts: mx.array, num_accepted: int) -> mx.array | None:
    """The tokens the draft's caches hold past their snapshot once rolled back: it ran `draft_y` and all drafts
    but the last, so None (nothing to undo) unless a draft it ran was rejected."""
    if num_accepted < drafts.size - 1:
        return mx.concatenate([draft_y, drafts[:num_accepted]])
    return None


class RollbackSteps(NamedTuple):
    """The rollback's decisions where ports break, apart so that a planted bug replaces exactly one."""

    restore: Callable[[Sequence, Sequence], None]
    """(caches, their snapshot) -> None: every cache put back as the snapshot holds it (`restore_caches`)."""
    draft_kept: Callable[[mx.array, mx.array, int], mx.array | None]
    """(the draft's round inputs, the drafts, accepted) -> what the draft replays after its restore, or None."""


REFERENCE_ROLLBACK_STEPS = RollbackSteps(restore=restore_caches, draft_kept=draft_kept)


def replay_accepted(
    model, draft_model, target, draft, y, draft_y, drafts, num_accepted: int, steps=REFERENCE_ROLLBACK_STEPS
) -> None:
    """Undo a round's rejected tokens by snapshot and replay: `target` and `draft` are (caches, snapshot taken
    before the round's pass). The target ran `y` and every draft; the draft ran `draft_y` and all drafts but
    the last, so it replays only when a draft it ran was rejected."""
    (model_cache, saved), (draft_cache, saved_draft) = target, draft
    if num_accepted < drafts.size:
        roll_back(model, model_cache, saved, mx.concatenate([y, drafts[:num_accepted]])[None], restore=steps.restore)
    kept = steps.draft_kept(draft_y, drafts, num_accepted)
    if kept is not None:
        roll_back(draft_model, draft_cache, saved_draft, kept[None], restore=steps.restore)


def speculative_generate_step(
    prompt: mx.array,
    model,
    draft_model,
    *,
    num_draft_tokens: int = 2,
    max_tokens: int = 256,
    sampler=None,
    logits_processors=None,
    prompt_cache=None,
    prefill_step_size: int = 512,
    kernels: ModuleType = speculative,
    _steps: RollbackSteps = REFERENCE_ROLLBACK_STEPS,
):
    """Yield ``(token, logprobs, from_draft)`` like mlx-lm's `speculative_generate_step`, verified exactly.

    Args:
        prompt: 1-D token ids, at least one.
        model, draft_model: mlx-lm models over one vocabulary.
        num_draft_tokens: drafts per round (fewer when fewer tokens remain).
        max_tokens: tokens to yield; 0 yields none, -1 is unbounded.
        sampler: a `DistributionSampler` (`make_sampler`); None is greedy.
        logits_processors: mlx-lm logits processors, applied to the draft's and the target's rows alike.
        prompt_cache: the target's layers' caches followed by the draft's, updated in place. `KVCache`s are
            rewound by trimming; any other cache (a ring, a recurrent layer's state) by snapshot and replay.
        prefill_step_size: prompt tokens per prefill chunk.
        kernels: the implementation providing ``verify_chain`` and ``verify_greedy``.
    """
    max_tokens = check_budget(max_tokens)
    num_draft_tokens = check_count("num_draft_tokens", num_draft_tokens, minimum=1)
    sampler = make_sampler() if sampler is None else sampler
    if not isinstance(sampler, DistributionSampler):
        raise ValueError("sampler: the exact verifier needs the distribution it samples from; use make_sampler")
    prompt = mx.array(prompt).astype(mx.uint32)
    if prompt.ndim != 1 or prompt.size < 1:
        raise ValueError(f"prompt: expected at least one token id [T], got shape {tuple(prompt.shape)}")
    if prompt_cache is None:
        model_cache, draft_cache = make_prompt_cache(model), make_prompt_cache(draft_model)
    else:
        model_cache, draft_cache = prompt_cache[: len(model.layers)], prompt_cache[len(model.layers) :]
    return _generate(
        prompt,
        model,
        draft_model,
        model_cache,
        draft_cache,
        num_draft_tokens,
        max_tokens,
        sampler,
        logits_processors,
        prefill_step_size,
        kernels,
        _steps,
    )


def _generate(
    prompt,
    model,
    draft_model,
    model_cache,
    draft_cache,
    num_draft_tokens,
    max_tokens,
    sampler,
    processors,
    prefill_step_size,
    kernels,
    steps,
):
    """The rounds, as a generator (the checks above run at the call, not at the first `next`)."""
    draft_y = prefill(draft_model, draft_cache, prompt, prefill_step_size)
    y = prefill(model, model_cache, prompt, prefill_step_size)
    history, emitted = prompt, 0
    by_trim = rewinds_by_trim(model_cache) and rewinds_by_trim(draft_cache)
    while max_tokens < 0 or emitted < max_tokens:
        count = num_draft_tokens if max_tokens < 0 else min(num_draft_tokens, max_tokens - emitted)
        drafts, q, saved_draft = draft_and_snapshot(
            draft_model, draft_cache, draft_y, count, sampler, processors, history, by_trim
        )
        saved = None if by_trim else snapshot_caches(model_cache)
        logprobs = target_logprobs(model, model_cache, mx.concatenate([y, drafts]), processors, history)
        accepted, tokens = verify(kernels, sampler, logprobs, q, drafts)
        kept = tokens if max_tokens < 0 else tokens[: max_tokens - emitted]
        # undo before yielding: a consumer that stops here leaves caches holding exactly the output
        if by_trim:
            rewind(model_cache, draft_cache, count, accepted)
        else:
            replay_accepted(
                model,
                draft_model,
                (model_cache, saved),
                (draft_cache, saved_draft),
                y,
                draft_y,
                drafts,
                accepted,
                steps,
            )
        for i, token in enumerate(kept):
            emitted += 1
            yield token, logprobs[i], i < accepted
        history = mx.concatenate([history, mx.array(tokens, dtype=mx.uint32)])
        y = mx.array(tokens[-1:], dtype=mx.uint32)
        # all drafts stood: the draft has not yet run its last one
        draft_y = mx.concatenate([drafts[-1:], y]) if accepted == count else y
