"""Training-free drafters for SmolLM2-135M (C12): prompt lookup (S17) and the target's first layers.

`PromptLookupDrafter` is transformers' prompt lookup decoding (S17, `prompt_lookup_num_tokens`; its
`PromptLookupCandidateGenerator`): the context's last n-gram (n from `max_ngram` down to 1) is searched for in
the context, earliest match first, and the tokens that followed it are proposed. Its rows are one-hot (a
deterministic proposal), so the chain rule accepts a draft x with probability p(x): exact as any q is. Where no
match gives k tokens, the block is filled with the last token (almost always rejected, still exact).

`make_early_exit` is an autoregressive drafter from SmolLM2 itself: its embedding, first `layers` blocks, final
norm and tied head (mlx-lm's `llama.Model` sharing the target's arrays), run by `text_drafters.ARDrafter`.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models import llama

from ncm_verify.mlx_lm_real.text_drafters import ARDrafter
from ncm_verify.reference.drafting import DraftBlock


class ContextCache:
    """The tokens a lookup drafter has read, trimmable as mlx-lm's caches are (the loop trims it back)."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    @property
    def offset(self) -> int:
        return len(self.tokens)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, count: int) -> int:
        count = min(count, len(self.tokens))
        del self.tokens[len(self.tokens) - count :]
        return count


def lookup(context: list[int], k: int, max_ngram: int = 2) -> list[int]:
    """The k tokens after the earliest earlier occurrence of the context's last n-gram (longest n first), padded
    with the context's last token; transformers' PromptLookupCandidateGenerator's rule, at most k tokens found."""
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        pattern = context[-n:]
        for start in range(len(context) - n):
            if context[start : start + n] == pattern:
                found = context[start + n : start + n + k]
                return found + [context[-1]] * (k - len(found))
    return [context[-1]] * k


class PromptLookupDrafter:
    """Prompt lookup decoding (S17) as a `TextDrafter`: one-hot rows, no model."""

    reads_features = False

    def __init__(self, vocab_size: int, max_ngram: int = 2, max_block: int = 8):
        self.vocab_size, self.max_ngram, self.max_block = vocab_size, max_ngram, max_block

    def make_cache(self) -> list[ContextCache]:
        return [ContextCache()]

    def propose(self, cache, new_tokens, k, key, *, temperature=1.0, features=None) -> DraftBlock:
        cache[0].tokens.extend(int(t) for t in new_tokens[0].tolist())
        drafts = lookup(cache[0].tokens, k, self.max_ngram)
        rows = np.zeros((1, k, self.vocab_size), dtype=np.float32)
        rows[0, np.arange(k), drafts] = 1.0
        return DraftBlock(tokens=mx.array([drafts], dtype=mx.int32), probs=mx.array(rows))


def make_early_exit(target: nn.Module, layers: int, max_block: int = 8) -> ARDrafter:
    """An AR drafter of `target`'s first `layers` blocks under its own final norm and tied head (no copy)."""
    if not 1 <= layers < target.args.num_hidden_layers:
        raise ValueError(f"layers: expected 1 to {target.args.num_hidden_layers - 1}, got {layers!r}")
    model = llama.Model(dataclasses.replace(target.args, num_hidden_layers=layers))
    model.model.embed_tokens = target.model.embed_tokens
    model.model.layers = target.model.layers[:layers]
    model.model.norm = target.model.norm
    model.eval()
    return ARDrafter(model, max_block=max_block)
