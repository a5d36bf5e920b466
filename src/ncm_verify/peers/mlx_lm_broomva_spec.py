"""mlx-lm-broomva 0.31.3 (a fork of mlx-lm shipping a module named `mlx_lm`): `mtp_speculative_generate_step`.

Its own `gemma4_text` targets at tiny sizes (every layer attention, or sliding-window layers whose window is
smaller than the generation) and its own `gemma4_assistant` MTP drafter (tied embeddings), seeded. Its rule
(`generate.py:826-881`): the drafter drafts greedily from the target's last hidden state and shared K/V, the
target's sampler draws every verify position at once, drafts stand while equal to the draws, and the target's
draw is emitted at the first miss. Plain decoding is the fork's own `generate_step`. `planted()` makes the loop's
rollback keep one rejected draft (it trims one entry fewer).
"""

from __future__ import annotations

import contextlib
from unittest import mock

import mlx.core as mx

from ncm_verify.peers.mlx_tiny import HIDDEN, WINDOW, build, log_softmax

PACKAGE = "mlx-lm-broomva"
VERSION = "0.31.3"
TARGET_KINDS = ("attention", "sliding-window")
"""gemma4_text targets: MTP needs the target's shared K/V (`return_shared_kv_states`), which gemma4 models emit."""


def make_target(kind: str, seed: int, vocab: int = 12):
    """The fork's `gemma4_text.Model`: every layer full attention, or every other layer a window of `WINDOW`."""
    from mlx_lm.models import gemma4_text

    if kind not in TARGET_KINDS:
        raise ValueError(f"kind: expected one of {TARGET_KINDS}, got {kind!r}")
    args = gemma4_text.ModelArgs(
        hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, rms_norm_eps=1e-6, vocab_size=vocab, num_hidden_layers=4,
        num_attention_heads=2, head_dim=16, global_head_dim=16, num_key_value_heads=1, vocab_size_per_layer_input=vocab,
        num_kv_shared_layers=0, hidden_size_per_layer_input=0, sliding_window=WINDOW, sliding_window_pattern=2,
        max_position_embeddings=1024, use_double_wide_mlp=False, final_logit_softcapping=30.0,
        layer_types=["full_attention"] * 4 if kind == "attention" else None,
    )  # fmt: skip
    return build(lambda: gemma4_text.Model(args), seed)


def make_drafter(kind: str, seed: int, vocab: int = 12, ordered: bool = False, kv_heads: int = 1):
    """The fork's `gemma4_assistant.Model` for a `kind` target (its layers read the K/V types the target has).
    `ordered`: the clustered logit head the published assistants ship (`use_ordered_embeddings`, two centroids, a
    seeded token ordering; the text config then omits `vocab_size`, echoed from the top level as in their configs);
    `kv_heads`: 2 for as many K/V heads as query heads."""
    import numpy as np
    from mlx_lm.models import gemma4_assistant

    layers = ["full_attention"] * 2 if kind == "attention" else ["sliding_attention", "full_attention"]
    text = dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, layer_types=layers, num_attention_heads=2,
        num_key_value_heads=kv_heads, head_dim=16, global_head_dim=16, rms_norm_eps=1e-6,
    )  # fmt: skip
    args = gemma4_assistant.ModelArgs(
        backbone_hidden_size=HIDDEN, use_ordered_embeddings=ordered, vocab_size=vocab, num_centroids=2,
        centroid_intermediate_top_k=1, text_config=text if ordered else {**text, "vocab_size": vocab},
    )  # fmt: skip
    drafter = build(lambda: gemma4_assistant.Model(args), seed)
    if ordered:
        order = np.random.default_rng(seed).permutation(vocab)
        drafter.masked_embedding._token_ordering = mx.array(order, dtype=mx.int32)
    return drafter


def generate(target, prompt: list[int], max_tokens: int, drafter=None, num_draft_tokens: int = 3, **options):
    """Tokens of the fork's `mtp_speculative_generate_step` (with `drafter`) or its plain `generate_step`."""
    from mlx_lm.generate import generate_step, mtp_speculative_generate_step

    if drafter is None:
        return [int(token) for token, _ in generate_step(mx.array(prompt), target, max_tokens=max_tokens, **options)]
    steps = mtp_speculative_generate_step(
        mx.array(prompt), target, drafter, num_draft_tokens=num_draft_tokens, max_tokens=max_tokens, **options
    )
    return [int(step[0]) for step in steps]


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target(mx.array([tokens]))[0, -1])


def planted() -> contextlib.AbstractContextManager:
    """The loop's rollback trims one entry fewer than it rejected: one rejected draft stays attended."""
    from mlx_lm.models import cache

    own = cache.trim_prompt_cache

    def trim_one_fewer(prompt_cache, num_tokens):
        return own(prompt_cache, max(num_tokens - 1, 0))

    return mock.patch.object(cache, "trim_prompt_cache", trim_one_fewer)


def generate_with_draft_model(target, draft, prompt: list[int], max_tokens: int, num_draft_tokens: int, **options):
    """Tokens of the fork's classic `speculative_generate_step` with a separate draft model (`draft`)."""
    return list(draft_model_steps(target, draft, prompt, max_tokens, num_draft_tokens, **options))


def mtp_steps(target, prompt: list[int], max_tokens: int, drafter, prompt_cache, num_draft_tokens: int = 2):
    """The fork's `mtp_speculative_generate_step` as a lazy generator of token ids (nothing runs until iterated)."""
    from mlx_lm.generate import mtp_speculative_generate_step

    steps = mtp_speculative_generate_step(
        mx.array(prompt), target, drafter, num_draft_tokens=num_draft_tokens, max_tokens=max_tokens,
        prompt_cache=prompt_cache,
    )  # fmt: skip
    return (int(step[0]) for step in steps)


def draft_model_steps(target, draft, prompt: list[int], max_tokens: int, num_draft_tokens: int, **options):
    """The fork's `speculative_generate_step` as a lazy generator of token ids."""
    from mlx_lm.generate import speculative_generate_step

    steps = speculative_generate_step(
        mx.array(prompt), target, draft, num_draft_tokens=num_draft_tokens, max_tokens=max_tokens, **options
    )
    return (int(step[0]) for step in steps)
