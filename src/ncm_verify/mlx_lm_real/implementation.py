"""mlx-lm's own caches and decoding loops, unchanged, as a decoder module the properties judge.

A decoder module provides the names of the `Decoder` protocol (`DECODER_NAMES`), with mlx-lm's
signatures. This one re-exports mlx-lm itself, so every property that runs on
it calls into mlx-lm and nothing of the suite's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import version
from typing import Protocol

from mlx_lm.generate import generate_step, speculative_generate_step  # noqa: F401
from mlx_lm.models.cache import (  # noqa: F401
    KVCache,
    RotatingKVCache,
    can_trim_prompt_cache,
    make_prompt_cache,
    trim_prompt_cache,
)
from mlx_lm.sample_utils import make_sampler  # noqa: F401

from ncm_verify.protocol import protocol_members

NAME = f"mlx-lm {version('mlx-lm')}"
"""How the report names this decoder."""
ACCEPTANCE_RULE = "sum p*q"
"""A draft stands when it equals the target's own sample: exact, accepted with probability sum p*q."""


class Decoder(Protocol):
    """mlx-lm's decoding, as a decoder module provides it (claims C7, C8)."""

    def make_prompt_cache(self, model) -> list:
        """(model) -> per-layer caches, each with update_and_fetch, offset, trim(n) -> count."""

    def trim_prompt_cache(self, cache, num_tokens) -> int:
        """(cache, num_tokens) -> number trimmed."""

    def generate_step(self, prompt, model, *, max_tokens, sampler, prompt_cache) -> Iterator:
        """(prompt, model, *, max_tokens, sampler, prompt_cache) -> yields (token, logprobs)."""

    def speculative_generate_step(
        self, prompt, model, draft_model, *, num_draft_tokens, max_tokens, sampler
    ) -> Iterator:
        """Speculative decoding with `draft_model` -> yields (token, logprobs, from_draft)."""

    def make_sampler(self, temp, top_p, top_k) -> Callable:
        """(temp, top_p, top_k) -> sampler(logprobs) -> token."""


DECODER_NAMES = protocol_members(Decoder)
