"""mlx-flash 0.9.2 (`mlx_flash_compress`): its DFlash and EAGLE-3 engines, driven directly.

Both recompute the whole sequence each round (no cache): `dflash.DFlashEngine.generate` drafts N tokens with a
`BlockDiffusionDrafter` from hidden states of checkpoint layers, runs the target uncached over context + drafts
(`verify_tokens`) and keeps the matching prefix and a bonus; at temperature > 0 drafts and target tokens are drawn
with `mx.random.categorical`. `eagle3.EAGLE3Engine.generate` drafts with an `EAGLEDraftHead` and verifies by argmax
(`verify`). Plain decoding is `DFlashEngine` without a drafter (`_generate_fallback`). Targets are mlx-lm's qwen3 at
tiny sizes (`mlx_tiny`); drafters are the package's own modules, seeded. `planted()` makes both engines' verify keep
the first rejected draft in place of the target's token.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx
import numpy as np

from ncm_verify.peers.mlx_tiny import HIDDEN, build, log_softmax, make_mlx_lm_target

PACKAGE = "mlx-flash"
VERSION = "0.9.2"
ENGINES = ("dflash", "eagle3")
CHECKPOINTS = [1, 3]


def make_target(seed: int, vocab: int = 12):
    """mlx-lm's qwen3 (attention): the engines call each decoder layer as ``layer(h)``, a Llama-style block."""
    return make_mlx_lm_target("attention", seed, vocab)


def make_engine(kind: str, target, seed: int, draft_tokens: int = 4, temperature: float = 0.0):
    """mlx-flash's `DFlashEngine` (a seeded `BlockDiffusionDrafter` over checkpoint layers 1 and 3) or
    `EAGLE3Engine` (a seeded `EAGLEDraftHead`) on `target`."""
    from mlx_flash_compress.dflash import BlockDiffusionDrafter, DFlashConfig, DFlashEngine
    from mlx_flash_compress.eagle3 import EAGLE3Config, EAGLE3Engine, EAGLEDraftHead

    vocab = int(target(mx.array([[0]])).shape[-1])
    if kind == "dflash":
        drafter = build(
            lambda: BlockDiffusionDrafter(
                vocab,
                HIDDEN,
                num_layers=1,
                num_heads=2,
                num_draft_positions=draft_tokens,
                num_checkpoint_layers=len(CHECKPOINTS),
            ),  # fmt: skip
            seed,
        )
        config = DFlashConfig(
            num_spec_tokens=draft_tokens, checkpoint_layers=list(CHECKPOINTS), temperature=temperature
        )
        return DFlashEngine(target, drafter, config)
    if kind == "eagle3":
        head = build(lambda: EAGLEDraftHead(HIDDEN, num_heads=2, num_layers=1), seed)
        return EAGLE3Engine(target, None, EAGLE3Config(num_draft_tokens=draft_tokens, temperature=temperature), head)
    raise ValueError(f"kind: expected one of {ENGINES}, got {kind!r}")


def generate(engine, prompt: list[int], max_tokens: int) -> list[int]:
    """The new tokens of the engine's `generate` (it returns prompt + generated)."""
    out = engine.generate(mx.array(prompt), max_tokens=max_tokens)
    return [int(t) for t in np.array(out).reshape(-1)[len(prompt) :]]


def plain(target, prompt: list[int], max_tokens: int, temperature: float = 0.0) -> list[int]:
    """mlx-flash's own plain decoding: `DFlashEngine` without a drafter (`_generate_fallback`)."""
    from mlx_flash_compress.dflash import DFlashConfig, DFlashEngine

    engine = DFlashEngine(target, None, DFlashConfig(checkpoint_layers=list(CHECKPOINTS), temperature=temperature))
    return generate(engine, prompt, max_tokens)


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target(mx.array([tokens]))[0, -1])


def sampled_laws(call) -> tuple[object, list[np.ndarray]]:
    """`call()` with MLX's `random.categorical` replaced by a recorder: the result and, per call, the law of each
    row it was handed (softmax of its argument, as categorical draws) in float64; each draw returns the argmax."""
    laws: list[np.ndarray] = []

    def categorical(logits, axis=-1, **_):
        rows = np.array(logits.astype(mx.float32), dtype=np.float64)
        law = np.exp(rows - rows.max(axis=-1, keepdims=True))
        laws.append(law / law.sum(axis=-1, keepdims=True))
        return mx.argmax(logits, axis=axis)

    with mock.patch.object(mx.random, "categorical", categorical):
        return call(), laws


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """Both engines' verify keep the first rejected draft in place of the target's token."""
    from mlx_flash_compress.dflash import DFlashEngine
    from mlx_flash_compress.eagle3 import EAGLE3Engine

    def keeping(own):
        def verify(self, input_ids, draft_tokens):
            accepted, count = own(self, input_ids, draft_tokens)
            drafts = [int(t) for t in np.array(draft_tokens).reshape(-1)]
            if count <= len(drafts):  # the last token is the target's: keep the draft instead
                accepted = mx.array(drafts[:count], dtype=mx.int32)
            return accepted, count

        return verify

    with (
        mock.patch.object(DFlashEngine, "verify_tokens", keeping(DFlashEngine.verify_tokens)),
        mock.patch.object(EAGLE3Engine, "verify", keeping(EAGLE3Engine.verify)),
    ):
        yield


class EosTokenizer:
    """What both engines read of a tokenizer: its `eos_token_id`."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id


def generate_with(engine, prompt, max_tokens: int, eos: int | None = None) -> tuple[list[int], list[list[int]]]:
    """The engine's new tokens with a tokenizer ending at `eos` (None: no tokenizer), and the token lists its
    `callback` was handed, one per round. `prompt`: token ids, or an array (2-D for EAGLE-3's batch shape)."""
    engine.tokenizer = None if eos is None else EosTokenizer(eos)
    rounds: list[list[int]] = []
    ids = prompt if isinstance(prompt, mx.array) else mx.array(prompt)
    out = engine.generate(ids, max_tokens=max_tokens, callback=lambda tokens, *_: rounds.append(list(tokens)))
    return [int(t) for t in np.array(out).reshape(-1)[ids.size :]], rounds
