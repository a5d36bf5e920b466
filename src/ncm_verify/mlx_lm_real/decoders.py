"""The decoders the mlx-lm properties judge, and mlx-lm's known upstream bugs they find.

A decoder is a module with `DECODER_NAMES`: mlx-lm itself, or the exact
verifier with mlx-lm's call shape. A known upstream bug is a property that
fails on mlx-lm's own code for a reason reported upstream: it runs as a strict
expected failure, so a release that fixes it turns the run red until the mark
is lifted.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ncm_verify.mlx_lm_real.implementation import DECODER_NAMES

DECODERS = {
    "mlx-lm": "ncm_verify.mlx_lm_real.implementation",
    "exact verifier": "ncm_verify.mlx_lm_real.exact_verifier",
}
"""Decoder name -> module; the first is mlx-lm's real code."""

SLIDING_WINDOW_REWIND = (
    "mlx-lm #1423 (fix PR #1427 unmerged): once a RotatingKVCache layer wraps, trim_prompt_cache refuses "
    "(returns 0) and speculative_generate_step ignores the refusal, keeping rejected drafts. Repro: "
    "make_tiny_model(TinySpec('sliding-window llama', seed=1)) as target, seed 2 as draft, prompt [1, 2, 3], "
    "max_tokens=16, num_draft_tokens=3: tokens differ from generate_step's from token 1 on"
)
WRAPPED_TRIM = (
    "mlx-lm PR #1512 (unmerged): RotatingKVCache.trim on a wrapped ring moves offset back and reports success "
    "but keeps the trimmed entries. Repro: c = RotatingKVCache(4); 5 single-position updates; c.trim(1) == 1; "
    "the next update_and_fetch still returns position 4's key"
)
UNBOUNDED_BUDGET = (
    "mlx-lm PR #1591 (unmerged): speculative_generate_step(max_tokens=-1), documented as an infinite "
    "generator, raises 'No arrays provided' (min(-1 - ntoks, num_draft) drafts). Repro: "
    "next(speculative_generate_step(mx.array([1]), target, draft, max_tokens=-1))"
)

KNOWN_UPSTREAM_BUGS: dict[tuple[str, str, str], str] = {
    # (property, decoder, model kind) -> reason
    (
        "test_greedy_speculative_decoding_emits_the_tokens_of_plain_greedy_decoding",
        "mlx-lm",
        "sliding-window llama",
    ): SLIDING_WINDOW_REWIND,
    (
        "test_caches_after_speculative_decoding_hold_exactly_the_tokens_their_offset_claims",
        "mlx-lm",
        "sliding-window llama",
    ): SLIDING_WINDOW_REWIND,
    (
        "test_every_target_sampler_call_is_handed_the_target_conditional_of_the_tokens_emitted_before_it",
        "mlx-lm",
        "sliding-window llama",
    ): SLIDING_WINDOW_REWIND,
    ("test_a_budget_of_minus_one_is_unbounded", "mlx-lm", "llama"): UNBOUNDED_BUDGET,
    ("test_a_budget_of_minus_one_is_unbounded", "mlx-lm", "sliding-window llama"): UNBOUNDED_BUDGET,
    ("test_a_trimmed_rotating_cache_attends_to_exactly_the_entries_it_kept", "mlx-lm", "cache alone"): WRAPPED_TRIM,
}


def load_decoder(name: str | ModuleType) -> ModuleType:
    """The decoder module `name` (a key of `DECODERS`, a module path or a module), checked for `DECODER_NAMES`."""
    module = name if isinstance(name, ModuleType) else importlib.import_module(DECODERS.get(name, name))
    missing = [attr for attr in DECODER_NAMES if not callable(getattr(module, attr, None))]
    if missing:
        raise ValueError(f"decoder: module {module.__name__!r} lacks {', '.join(missing)}")
    return module


BUG_RAISES = {UNBOUNDED_BUDGET: (AssertionError, ValueError)}
"""What a known bug fails with when not an assertion: mlx-lm's own error ('No arrays provided')."""


def known_upstream_bug(prop: str, decoder: str, kind: str = "cache alone") -> str | None:
    """The upstream reference and repro of a property's known failure on `decoder`, or None."""
    return KNOWN_UPSTREAM_BUGS.get((prop, decoder, kind))


def expected_failure(reason: str):
    """The exceptions a known upstream bug fails with: an assertion unless `BUG_RAISES` says more."""
    return BUG_RAISES.get(reason, AssertionError)
