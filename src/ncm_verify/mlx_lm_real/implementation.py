"""mlx-lm's own caches and decoding loops, unchanged, as a decoder module the properties judge.

A decoder module provides the names in `DECODER_NAMES`, with mlx-lm's
signatures. This one re-exports mlx-lm itself, so every property that runs on
it calls into mlx-lm and nothing of the suite's.
"""

from __future__ import annotations

from importlib.metadata import version

from mlx_lm.generate import generate_step, speculative_generate_step  # noqa: F401
from mlx_lm.models.cache import (  # noqa: F401
    KVCache,
    RotatingKVCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.sample_utils import make_sampler  # noqa: F401

NAME = f"mlx-lm {version('mlx-lm')}"
"""How the report names this decoder."""
ACCEPTANCE_RULE = "sum p*q"
"""A draft stands when it equals the target's own sample: exact, accepted with probability sum p*q."""

DECODER_NAMES = (
    "make_prompt_cache",  # (model) -> per-layer caches, each with update_and_fetch, offset, trim(n) -> count
    "trim_prompt_cache",  # (cache, num_tokens) -> number trimmed
    "generate_step",  # (prompt, model, *, max_tokens, sampler, prompt_cache) -> yields (token, logprobs)
    "speculative_generate_step",  # (prompt, model, draft_model, *, num_draft_tokens, max_tokens, sampler, ...)
    "make_sampler",  # (temp, top_p, top_k) -> sampler(logprobs) -> token
)
