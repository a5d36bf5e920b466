"""mlx-vlm 0.7.10's speculative decoding, driven through its own `generate_step` (`mlx_vlm/generate/ar.py`).

The targets are mlx-vlm's own models at tiny sizes: `qwen3_5_text` (GatedDeltaNet layers between attention
layers: a hybrid whose recurrent state cannot be trimmed; the family requires them) and `gemma4` (every layer
attention, or sliding-window layers whose window of 4 wraps inside a verify pass; a one-layer vision tower that
text requests never touch). The drafters are its own `DFlashDraftModel` (`speculative/drafters/qwen3_dflash`; on
Gemma 4 targets `gemma4_dflash.Gemma4DFlashDraftModel`),
`Qwen3_5MTPDraftModel` (`qwen3_5_mtp`) and `Gemma4AssistantDraftModel` (`gemma4_assistant`), all seeded.
Its rule (`speculative/common.py` `_speculative_walk*`): draw the target's token at every position of the
verify pass, keep a draft while it equals the draw, emit the draw at the first mismatch. With a `seed` the
draws are keyed by (seed, row, position) (`_PositionedTargetSampler`), so sampled speculative decoding must emit
what plain seeded decoding emits. `planted()` swaps the walk for one that emits the draft at the first mismatch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx

from ncm_verify.peers.mlx_tiny import WINDOW, build, log_softmax

PACKAGE = "mlx-vlm"
VERSION = "0.7.10"
TARGET_KINDS = ("hybrid", "attention", "sliding-window")
"""qwen3_5_text (GatedDeltaNet layers 0, 2 between attention layers 1, 3); gemma4 all attention or sliding."""
DRAFT_KINDS = ("dflash", "mtp", "eagle3")
CASES = (
    ("hybrid", "dflash"),
    ("hybrid", "mtp"),
    ("attention", "mtp"),
    ("sliding-window", "mtp"),
    ("attention", "eagle3"),
)
"""(target kind, drafter kind) pairs mlx-vlm ships drafters for: Qwen 3.5 DFlash and MTP, Gemma 4 assistant MTP,
and its generic EAGLE-3 drafter (any target that captures hidden states; judged on the Gemma 4 attention one)."""
MORE_CASES = (("hybrid", "eagle3"), ("sliding-window", "eagle3"), ("attention", "dflash"), ("sliding-window", "dflash"))
"""EAGLE-3 on the other two targets and the `gemma4_dflash` drafter on the Gemma 4 ones, for greedy equality,
call-by-call sampling and per-round rollback."""
VOCAB = 12
HIDDEN = 32


def text_config(vocab: int = VOCAB) -> dict:
    """A tiny qwen3_5_text config: every second layer attention, the others GatedDeltaNet."""
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
        full_attention_interval=2,
        rope_parameters={
            "type": "default",
            "mrope_section": [2, 1, 1],
            "rope_theta": 10000,
            "partial_rotary_factor": 0.5,
        },
    )


def gemma4_text_config(kind: str, vocab: int, hidden: int, layers: int) -> dict:
    return dict(
        model_type="gemma4_text", hidden_size=hidden, num_hidden_layers=layers, intermediate_size=2 * hidden,
        num_attention_heads=2, head_dim=16, global_head_dim=16, vocab_size=vocab, vocab_size_per_layer_input=vocab,
        num_key_value_heads=1, num_kv_shared_layers=0, hidden_size_per_layer_input=0, sliding_window=WINDOW,
        use_double_wide_mlp=False,
        layer_types=(["full_attention"] * layers if kind == "attention" else
                     ["sliding_attention", "full_attention"] * (layers // 2)),
    )  # fmt: skip


def make_target(kind: str, seed: int, vocab: int = VOCAB):
    """mlx-vlm's `qwen3_5_text.Model` ('hybrid') or `gemma4.Model` ('attention', 'sliding-window'), seeded;
    Gemma's head is tied to its embeddings, drawn at scale 1/4 so that its rows are not one-hot."""
    if kind == "hybrid":
        from mlx_vlm.models.qwen3_5_text import Model, ModelConfig

        return build(lambda: Model(ModelConfig.from_dict(text_config(vocab))), seed)
    if kind not in TARGET_KINDS:
        raise ValueError(f"kind: expected one of {TARGET_KINDS}, got {kind!r}")
    from mlx_vlm.models.gemma4 import Model as Gemma4
    from mlx_vlm.models.gemma4 import ModelConfig as Gemma4Config
    from mlx_vlm.models.gemma4.config import TextConfig, VisionConfig

    vision = VisionConfig.from_dict(
        dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
             head_dim=16, global_head_dim=16, position_embedding_size=64)
    )  # fmt: skip
    text = TextConfig.from_dict(gemma4_text_config(kind, vocab, HIDDEN, 4))
    config = Gemma4Config(text_config=text, vision_config=vision, vocab_size=vocab, hidden_size=HIDDEN)
    return build(lambda: Gemma4(config), seed, embed_scale=0.25)


def is_gemma4(target) -> bool:
    return target.config.model_type == "gemma4"


def make_drafter(draft_kind: str, target, seed: int, block_size: int = 4, draft_vocab: int | None = None):
    """mlx-vlm's own drafter of `draft_kind` for `target`, seeded; it binds the target's embeddings and head.
    `draft_vocab` (EAGLE-3 only): a draft vocabulary of that many tokens, the target's even ids (its ``d2t`` map)."""
    vocab = target.config.vocab_size
    if draft_vocab is not None and (draft_kind != "eagle3" or not 1 <= draft_vocab <= (vocab + 1) // 2):
        raise ValueError(f"draft_vocab: an EAGLE-3 vocabulary of 1..{(vocab + 1) // 2} tokens, got {draft_vocab}")
    if draft_kind == "eagle3":
        from mlx_vlm.speculative.drafters.eagle3 import Eagle3DraftModel
        from mlx_vlm.speculative.drafters.eagle3.config import Eagle3Config

        layer = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, head_dim=16, vocab_size=vocab)  # fmt: skip
        eagle = Eagle3Config.from_dict(
            dict(transformer_layer_config=layer, draft_vocab_size=draft_vocab or vocab, target_hidden_size=HIDDEN,
                 capture_layer_ids=[0, 1, 3], target_layer_ids=[0, 1, 3], block_size=block_size)
        )  # fmt: skip
        drafter = build(lambda: Eagle3DraftModel(eagle), seed)
        if draft_vocab is not None:  # draft id i stands for target id 2i: d2t holds the offsets
            drafter.d2t = mx.arange(draft_vocab, dtype=mx.int32)
        return drafter
    if draft_kind == "dflash" and is_gemma4(target):
        from mlx_vlm.speculative.drafters.gemma4_dflash import Gemma4DFlashConfig, Gemma4DFlashDraftModel

        gemma = Gemma4DFlashConfig.from_dict(
            dict(model_type="qwen3", hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=vocab, block_size=block_size,
                 target_layer_ids=[1, 3], num_target_layers=4, rope_theta=10000.0, max_position_embeddings=1024,
                 dflash_config={"mask_token_id": vocab - 1})
        )  # fmt: skip
        return build(lambda: Gemma4DFlashDraftModel(gemma), seed)
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

        if is_gemma4(target):
            from mlx_vlm.speculative.drafters.gemma4_assistant import Gemma4AssistantDraftModel
            from mlx_vlm.speculative.drafters.gemma4_assistant.config import Gemma4AssistantConfig

            kind = "attention" if "sliding_attention" not in target.config.text_config.layer_types else "sliding"
            text = gemma4_text_config(kind, vocab, 16, 2)
            assistant = Gemma4AssistantConfig.from_dict(
                dict(backbone_hidden_size=HIDDEN, text_config=text, block_size=block_size)
            )
            return build(lambda: Gemma4AssistantDraftModel(assistant), seed, embed_scale=0.25)
        text = {**text_config(vocab), "mtp_num_hidden_layers": 1}
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


def serve(
    target, prompts: list[list[int]], max_tokens: int, drafter=None, draft_kind=None, sampler=None, logprobs=None
):
    """The tokens mlx-vlm's server engine (`BatchGenerator`, continuous batching; `SpeculativeGenerationBatch` with a
    drafter) emits for `prompts` decoded together, per prompt, as the server feeds it (text embeddings per row).
    `logprobs`, a list, receives per prompt the log-probability the plain engine reports for each token."""
    import types

    from mlx_vlm.generate.ar import BatchGenerator
    from mlx_vlm.utils import StoppingCriteria

    processor = types.SimpleNamespace(tokenizer=types.SimpleNamespace(stopping_criteria=StoppingCriteria([])))
    engine = BatchGenerator(
        target, processor, sampler=sampler, draft_model=drafter, draft_kind=draft_kind, max_tokens=max_tokens
    )
    embeddings = [target.get_input_embeddings(mx.array([p])).to_dict() for p in prompts]
    uids = engine.insert(prompts, prompt_kwargs=[{k: v for k, v in e.items() if v is not None} for e in embeddings])
    emitted: dict[int, list[int]] = {uid: [] for uid in uids}
    reported: dict[int, list[float]] = {uid: [] for uid in uids}
    for _ in range(len(prompts) * (max_tokens + 2) + 8):  # a bound, never reached by a sound engine
        _, generated = engine.next()  # (prompt progress, generated tokens)
        for response in generated:
            if response.token is not None:
                emitted[response.uid].append(int(response.token))
                reported[response.uid].append(float(response.token_logprob))
        if not engine.has_work:
            break
    if logprobs is not None:
        logprobs.extend(reported[uid] for uid in uids)
    return [emitted[uid] for uid in uids]


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


def _planted_deferred(own):
    """The deferred greedy walk (targets whose verify pass leaves logits to the walk), planted the same way."""

    def walk(lm, target_hidden, draft_tokens, sampler, budget, *args, **kwargs):
        accepted, new_tokens = own(lm, target_hidden, draft_tokens, sampler, budget, *args, **kwargs)
        drafts = draft_tokens.reshape(-1).tolist()
        if accepted < len(drafts) and len(new_tokens) == accepted + 1:
            new_tokens = [*new_tokens[:accepted], int(drafts[accepted])]
        return accepted, new_tokens

    return walk


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """mlx-vlm's own loop with its walks replaced by `_planted_walk` wherever the round loops call them."""
    from mlx_vlm.speculative import dflash, eagle3, mtp

    replacements = {
        "_speculative_walk": lambda own: _planted_single_walk,
        "_speculative_walk_batch": lambda own: _planted_walk,
        "_speculative_walk_deferred_greedy": _planted_deferred,
        "_eagle3_walk": lambda own: _planted_single_walk,
        "_eagle3_walk_batch": lambda own: _planted_walk,
    }
    with contextlib.ExitStack() as stack:
        for module in (dflash, mtp, eagle3):
            for name, replace in replacements.items():
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, replace(getattr(module, name))))
        yield


@contextlib.contextmanager
def planted_rollback() -> Iterator[None]:
    """mlx-vlm's round commit told one draft more was accepted than was: one rejected draft stays in the cache."""
    from mlx_vlm.speculative import cache_state, dflash, eagle3, mtp

    own = cache_state.commit_speculative_round

    def keep_one_rejected(model, caches, state, accepted, block_size):
        return own(model, caches, state, min(accepted + 1, block_size - 1), block_size)

    with contextlib.ExitStack() as stack:
        for module in (dflash, mtp, eagle3):
            stack.enter_context(mock.patch.object(module, "commit_speculative_round", keep_one_rejected))
        yield
