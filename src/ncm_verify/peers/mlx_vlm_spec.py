"""mlx-vlm 0.7.10's speculative decoding, driven through its own `generate_step` (`mlx_vlm/generate/ar.py`).

The targets are mlx-vlm's own `qwen3_5_text` models at tiny sizes (every layer attention, or GatedDeltaNet layers
between attention layers: a hybrid whose recurrent state cannot be trimmed), the drafters its own
`DFlashDraftModel` (`speculative/drafters/qwen3_dflash`) and `Qwen3_5MTPDraftModel` (`qwen3_5_mtp`), all with
seeded weights. Its rule (`speculative/common.py` `_speculative_walk*`): draw the target's token at every position
of the verify pass, keep a draft while it equals the draw, emit the draw at the first mismatch. With a `seed` the
draws are keyed by (seed, row, position) (`_PositionedTargetSampler`), so sampled speculative decoding must emit
what plain seeded decoding emits. `planted()` swaps the walk for one that emits the draft at the first mismatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mlx.core as mx

from ncm_verify.peers.mlx_tiny import build, log_softmax

PACKAGE = "mlx-vlm"
VERSION = "0.7.10"
TARGET_KINDS = ("hybrid",)
"""qwen3_5_text with every layer attention, or GatedDeltaNet layers 0 and 2 between attention layers 1 and 3."""
DRAFT_KINDS = ("dflash", "mtp")
VOCAB = 12
HIDDEN = 32


def text_config(kind: str, vocab: int = VOCAB) -> dict:
    """A tiny qwen3_5_text config: `kind` 'attention' (every layer) or 'hybrid' (every second layer attention)."""
    if kind not in TARGET_KINDS:
        raise ValueError(f"kind: expected one of {TARGET_KINDS}, got {kind!r}")
    return dict(
        model_type="qwen3_5_text",
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        linear_num_value_heads=2,
        linear_num_key_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        num_hidden_layers=4,
        num_attention_heads=2,
        rms_norm_eps=1e-6,
        vocab_size=vocab,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        head_dim=16,
        full_attention_interval=1 if kind == "attention" else 2,
        rope_parameters={
            "type": "default",
            "mrope_section": [2, 1, 1],
            "rope_theta": 10000,
            "partial_rotary_factor": 0.5,
        },
    )


def make_target(kind: str, seed: int, vocab: int = VOCAB):
    """mlx-vlm's `qwen3_5_text.Model` for `kind` with weights drawn from `seed`."""
    from mlx_vlm.models.qwen3_5_text import Model, ModelConfig

    return build(lambda: Model(ModelConfig.from_dict(text_config(kind, vocab))), seed)


def make_drafter(draft_kind: str, target, seed: int, block_size: int = 4):
    """mlx-vlm's own drafter of `draft_kind` for `target`, seeded; it binds the target's embeddings and head."""
    vocab = target.config.vocab_size
    if draft_kind == "dflash":
        from mlx_vlm.speculative.drafters.qwen3_dflash import DFlashDraftModel
        from mlx_vlm.speculative.drafters.qwen3_dflash.config import DFlashConfig

        config = DFlashConfig.from_dict(
            dict(
                model_type="qwen3",
                hidden_size=HIDDEN,
                intermediate_size=2 * HIDDEN,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=16,
                vocab_size=vocab,
                block_size=block_size,
                mask_token_id=vocab - 1,
                target_layer_ids=[1, 3],
                num_target_layers=4,
                rope_theta=10000.0,
                max_position_embeddings=1024,
            )
        )
        return build(lambda: DFlashDraftModel(config), seed)
    if draft_kind == "mtp":
        from mlx_vlm.speculative.drafters.qwen3_5_mtp import Qwen3_5MTPDraftModel
        from mlx_vlm.speculative.drafters.qwen3_5_mtp.config import Qwen3_5MTPConfig

        text = {**text_config("hybrid", vocab), "mtp_num_hidden_layers": 1}
        config = Qwen3_5MTPConfig.from_dict({"text_config": text, "block_size": block_size})
        return build(lambda: Qwen3_5MTPDraftModel(config), seed)
    raise ValueError(f"draft_kind: expected one of {DRAFT_KINDS}, got {draft_kind!r}")


def generate(
    target, prompt: list[int], max_tokens: int, drafter=None, draft_kind: str = "dflash", **options
) -> list[int]:
    """The tokens mlx-vlm's `generate_step` emits: plain decoding, or speculative with `drafter` (`draft_kind`).

    `options` are `generate_step`'s own (temperature, top_p, top_k, min_p, seed, logit_bias, repetition_penalty,
    sampler, draft_block_size, ...), passed through unchanged.
    """
    from mlx_vlm.generate.ar import generate_step

    extra = {} if drafter is None else {"draft_model": drafter, "draft_kind": draft_kind}
    steps = generate_step(mx.array([prompt]), target, None, None, max_tokens=max_tokens, **extra, **options)
    return [int(token) for token, _ in steps]


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target.language_model(mx.array([tokens])).logits[0, -1])


def positioned_draw(logprobs: mx.array, seed: int, position: int, temperature: float, top_p=1.0, top_k=0) -> int:
    """mlx-vlm's own seeded target draw at generated `position` (row 0) on `logprobs` ``[V]``."""
    from mlx_vlm.generate.ar import _PositionedTargetSampler

    sampler = _PositionedTargetSampler(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    return int(sampler.sample_target(logprobs[None], row_ids=[0], positions=[position]).item())


def _planted_walk(draft_tokens, target_tokens, budgets):
    """The planted walk: at the first mismatch the draft, not the target's draw, is emitted (biased toward q)."""
    from mlx_vlm.speculative import common

    accepted, new_tokens = common._speculative_walk_batch(draft_tokens, target_tokens, budgets)
    drafts = draft_tokens.tolist()
    for row, count in enumerate(accepted):
        if count < len(drafts[row]) and new_tokens[row] and len(new_tokens[row]) == count + 1:
            new_tokens[row][count] = drafts[row][count]
    return accepted, new_tokens


def _planted_single_walk(draft_tokens, target_tokens, budget):
    accepted, new_tokens = _planted_walk(draft_tokens, target_tokens, [budget])
    return accepted[0], new_tokens[0]


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """mlx-vlm's own loop with its walk replaced by `_planted_walk` wherever the round loops call it."""
    from mlx_vlm.speculative import dflash, mtp

    saved = [(m, n, getattr(m, n)) for m in (dflash, mtp) for n in ("_speculative_walk", "_speculative_walk_batch")]
    saved = [(m, n, f) for m, n, f in saved if f is not None]
    try:
        for module, name, _ in saved:
            setattr(module, name, _planted_single_walk if name == "_speculative_walk" else _planted_walk)
        yield
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
