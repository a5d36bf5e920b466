"""dflash-mlx 0.1.8 (DFlash, source S14), driven through its own engine: `runtime.stream_dflash_generate`.

Targets are mlx-lm's own models at tiny sizes, the ones dflash-mlx's target backends accept: `qwen3` (every layer
attention), `qwen3_next` (GatedDeltaNet layers between attention layers: dflash-mlx gives them its
`RecurrentRollbackCache`, rolled back by tape replay) and `gemma4_text` (sliding-window layers whose window is
smaller than the generation); the drafter is its own `model.DFlashDraftModel`, seeded. Its engine decodes greedily
(`engine/sampling.greedy_tokens_with_mask`); its rule (`engine/acceptance.match_acceptance_length`): keep drafts
while they equal the target's argmax. `planted()` makes that walk accept one draft more than matched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx

from ncm_verify.peers.mlx_tiny import HIDDEN, MLX_LM_KINDS, build, log_softmax, make_mlx_lm_target

PACKAGE = "dflash-mlx"
VERSION = "0.1.8"
TARGET_KINDS = MLX_LM_KINDS
VERIFY_MODES = ("dflash", "ddtree", "adaptive")
"""The engine's verify modes that speculate: a block (`dflash`), a tree (`ddtree`), and `adaptive`, which starts with
blocks and shortens them (`engine/spec_epoch._AdaptiveBlockPolicy`) as acceptance falls."""


def make_target(kind: str, seed: int, vocab: int = 12):
    """mlx-lm's `qwen3`, `qwen3_next` or `gemma4_text` model for `kind` (`mlx_tiny.make_mlx_lm_target`)."""
    return make_mlx_lm_target(kind, seed, vocab)


def make_drafter(target, seed: int, block_size: int = 4, model_class=None, num_target_layers: int = 4,
                 layer_types: tuple[str, ...] = (), sliding_window: int | None = None, **config):  # fmt: skip
    """dflash-mlx's own `DFlashDraftModel` (or `model_class`, a subclass taking the same arguments) reading target
    layers 1 and 3, seeded; mask token = last id; `config` joins its `dflash_config`. `layer_types`: one per draft
    layer (``full_attention``, ``sliding_attention`` with `sliding_window`), as Gemma 4 DFlash drafters ship;
    empty: one layer of its default attention."""
    from dflash_mlx.model import DFlashDraftModel, DFlashDraftModelArgs

    vocab = int(target_logits(target, [0]).shape[-1])
    fields = draft_config(vocab, layer_types, sliding_window)
    args = DFlashDraftModelArgs.from_dict(
        {**fields, "num_target_layers": num_target_layers, "block_size": block_size,
         "dflash_config": {**fields["dflash_config"], **config}}
    )  # fmt: skip
    return build(lambda: (model_class or DFlashDraftModel)(args), seed)


def draft_config(vocab: int, layer_types=(), sliding_window: int | None = None, model_type: str = "qwen3") -> dict:
    """The tiny drafter's config as a checkpoint's config.json gives it (`DFlashDraftModelArgs.from_dict`'s input):
    reading target layers 1 and 3, mask token = last id; `layer_types` empty: no `layer_types` key."""
    return dict(
        model_type=model_type, hidden_size=HIDDEN, num_hidden_layers=max(1, len(layer_types)),
        intermediate_size=2 * HIDDEN, num_attention_heads=2, rms_norm_eps=1e-6, vocab_size=vocab,
        num_key_value_heads=1, max_position_embeddings=1024, rope_theta=10000.0, head_dim=16,
        tie_word_embeddings=False, num_target_layers=4, block_size=4,
        dflash_config={"target_layer_ids": [1, 3], "mask_token_id": vocab - 1},
        **({"layer_types": list(layer_types)} if layer_types else {}),
        **({"sliding_window": sliding_window} if sliding_window is not None else {}),
    )  # fmt: skip


def target_logits(target, tokens: list[int]) -> mx.array:
    return target(mx.array([tokens]))[0].astype(mx.float32)


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target_logits(target, tokens)[-1])


def generate(target, drafter, prompt: list[int], max_tokens: int, verify_mode: str = "dflash", draft_backend=None,
             prompt_lookup: bool = True, runtime: dict | None = None, **options):  # fmt: skip
    """dflash-mlx's engine on `prompt`: the emitted tokens, its token events (fallback flags, cycles) and its
    summary event (acceptance, prompt-lookup hits), or None. `draft_backend`: another package's backend (default
    its `EagerDraftBackend`); `prompt_lookup=False` turns its copy drafts off (``copyspec_mode="off"``); `runtime`:
    options of its offline runtime context (`build_offline_runtime_context`: draft sink and window sizes, verify
    length cap, prefill step)."""
    import dataclasses

    from dflash_mlx.draft_backend import EagerDraftBackend
    from dflash_mlx.engine.events import TokenEvent
    from dflash_mlx.engine.target_ops import bind_draft_to_target, resolve_target_ops
    from dflash_mlx.runtime import stream_dflash_generate
    from dflash_mlx.runtime.context import build_offline_runtime_context

    ops = resolve_target_ops(target)
    bind_draft_to_target(drafter, target, target_ops=ops)
    context = build_offline_runtime_context(verify_mode=verify_mode, **(runtime or {}))
    if not prompt_lookup and hasattr(context.runtime, "copyspec_mode"):  # as dfly-mlx guards it: 0.1.8 has none
        context = dataclasses.replace(context, runtime=dataclasses.replace(context.runtime, copyspec_mode="off"))
    events = stream_dflash_generate(
        target_model=target, target_ops=ops, tokenizer=None, draft_model=drafter,
        draft_backend=draft_backend or EagerDraftBackend(), prompt_tokens_override=prompt, max_new_tokens=max_tokens,
        runtime_context=context, **options,
    )  # fmt: skip
    from dflash_mlx.engine.events import SummaryEvent

    events = list(events)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    summary = next((e for e in reversed(events) if isinstance(e, SummaryEvent)), None)
    return [int(e.token_id) for e in tokens], tokens, summary


def plain(target, prompt: list[int], max_tokens: int, **options) -> list[int]:
    """dflash-mlx's own plain decoding (`engine/fallback.stream_baseline_generate`), greedy."""
    from dflash_mlx.engine.events import TokenEvent
    from dflash_mlx.engine.fallback import stream_baseline_generate
    from dflash_mlx.engine.target_ops import resolve_target_ops

    events = stream_baseline_generate(
        target_model=target, target_ops=resolve_target_ops(target), tokenizer=None, prompt="",
        max_new_tokens=max_tokens, prompt_tokens_override=prompt, **options,
    )  # fmt: skip
    return [int(e.token_id) for e in events if isinstance(e, TokenEvent)]


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """The engine with each walk keeping one rejected draft: the block walk accepts one draft more than matched,
    the tree walk (`follow_verified_tree`) descends into a child the target's argmax did not choose, and the
    branch walk (`ddtree.match_acceptance_length`) accepts one draft more."""
    from dflash_mlx.engine import ddtree, spec_epoch

    own_block, own_tree = spec_epoch._match_acceptance_length, spec_epoch.follow_verified_tree

    def one_more(drafted: mx.array, posterior: mx.array) -> mx.array:
        return mx.minimum(own_block(drafted, posterior) + 1, int(drafted.shape[0]))

    def into_a_rejected_child(tree, posterior_token_ids):
        accepted, next_token = own_tree(tree, posterior_token_ids)
        children = tree.child_maps[accepted[-1]]
        if children:
            child = int(next(iter(children.values())))
            return [*accepted, child], int(posterior_token_ids[child])
        return accepted, next_token

    with (
        mock.patch.object(spec_epoch, "_match_acceptance_length", one_more),
        mock.patch.object(spec_epoch, "follow_verified_tree", into_a_rejected_child),
        mock.patch.object(ddtree, "match_acceptance_length", one_more),  # the branch walk without tree caches
    ):
        yield
