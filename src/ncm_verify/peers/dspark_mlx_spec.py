"""dspark-mlx 0.1.0 ("lossless, target-agnostic" DSpark self-speculative decoding), driven through its own loops.

Its host adapter `hosts.mlx_lm.MlxLmHostAdapter` re-runs an mlx-lm model's layer loop to capture intermediate
hidden states and rolls its KV back with `KVCache.trim`; its Qwen3 drafter (`arch.qwen3.Qwen3DSparkDrafter`) drafts
a block from them. Two greedy loops: `generate` (two base forwards a cycle) and `generate_eager` (one, what its CLI
runs), both accepting with `verify.greedy_accept`; plain decoding is its CLI's `_base_greedy` (prefill, then one
`decode_step` a token). `verify.speculative_sample_accept` (temperature > 0) is exported but called by no loop:
judged as a rule, with a scripted generator. Targets are mlx-lm's own models at tiny sizes (`mlx_tiny`).
`planted()` makes `greedy_accept` keep one draft more than matched (both loops); `planted_rule()` corrects a
rejected draft from p instead of the residual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx
import numpy as np

from ncm_verify.peers.mlx_tiny import HIDDEN, build, log_softmax, make_mlx_lm_target

PACKAGE = "dspark-mlx"
VERSION = "0.1.0"
TARGET_KINDS = ("attention",)
"""The mlx-lm host adapter runs `layer(h, mask, cache)` with one mask from `create_attention_mask(h, cache[0])`:
a qwen3_next target raises TypeError (`ArraysCache.make_mask`), a gemma4_text one TypeError in its layers."""
LOOPS = ("eager", "legacy")
"""`loop.generate_eager` (one base forward a cycle, the CLI's) and `generate.generate` (two)."""
TARGET_LAYERS = (1, 3)


def make_target(kind: str, seed: int, vocab: int = 12):
    return make_mlx_lm_target(kind, seed, vocab)


def make_drafter(seed: int, vocab: int, block_size: int = 4):
    """dspark-mlx's own `Qwen3DSparkDrafter` reading target layers 1 and 3, seeded; mask token = last id."""
    from dspark_mlx.arch.qwen3 import Qwen3DSparkArgs, Qwen3DSparkDrafter

    args = Qwen3DSparkArgs(
        vocab_size=vocab, hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, intermediate_size=2 * HIDDEN, target_layer_ids=TARGET_LAYERS, num_target_layers=4,
        block_size=block_size, mask_token_id=vocab - 1, markov_rank=8, temperature=0.0,
    )  # fmt: skip
    return build(lambda: Qwen3DSparkDrafter(args), seed)


def adapter(target):
    from dspark_mlx.hosts.mlx_lm import MlxLmHostAdapter

    return MlxLmHostAdapter(target, TARGET_LAYERS)


def loops():
    """The modules `dspark_mlx.generate` and `dspark_mlx.loop` (the package re-exports a function as `generate`)."""
    import importlib

    return importlib.import_module("dspark_mlx.generate"), importlib.import_module("dspark_mlx.loop")


def generate(target, drafter, prompt: list[int], max_tokens: int, loop: str = "eager", host=None,
             confidence_threshold: float = 0.0) -> list[int]:  # fmt: skip
    """The tokens of dspark-mlx's `loop` on `prompt` (a fresh host adapter unless `host` is given); the eager loop's
    `confidence_threshold` (> 0: its confidence head truncates each block) is its CLI's option."""
    from dspark_mlx.events import TokenEvent

    legacy, eager = loops()

    host = host or adapter(target)
    drafter.reset()
    if loop == "eager":
        events = eager.generate_eager(host, drafter, prompt, max_tokens, confidence_threshold=confidence_threshold)
    else:
        events = legacy.generate(host, drafter, prompt, max_new_tokens=max_tokens)
    return [int(e.token) for e in events if isinstance(e, TokenEvent)]


def plain(target, prompt: list[int], max_tokens: int) -> list[int]:
    """dspark-mlx's own plain greedy decoding through the host adapter (`cli._base_greedy`)."""
    from dspark_mlx.cli import _base_greedy

    tokens, _ = _base_greedy(adapter(target), prompt, max_tokens)
    return [int(t) for t in tokens]


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target(mx.array([tokens]))[0, -1])


class ScriptedGenerator:
    """A `numpy.random.Generator` stand-in: `random()` returns `uniform`; `choice(n, p)` records p and returns its
    argmax (the rule's correction and bonus draws)."""

    def __init__(self, uniform: float):
        self.uniform = uniform
        self.choices: list[np.ndarray] = []

    def random(self) -> float:
        return self.uniform

    def choice(self, n, p):
        self.choices.append(np.asarray(p, dtype=np.float64))
        return int(np.argmax(p))


def rule_law(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The exact law of the first token `speculative_sample_accept` emits for one draft x drawn from q (base rows
    [p, p]): per x, the acceptance probability (bisection on the scripted uniform: it accepts iff U < it) and the
    law it hands `choice` on rejection."""
    from dspark_mlx.verify import speculative_sample_accept

    vocab = p.shape[-1]
    base, draft = np.stack([p, p]), q[None, :]

    def run(x: int, uniform: float):
        rng = ScriptedGenerator(uniform)
        return speculative_sample_accept(np.array([x]), draft, base, rng), rng

    law = np.zeros(vocab)
    for x in np.flatnonzero(q > 0):
        low, high = 0.0, 1.0  # the acceptance probability lies in (low, high]
        if run(int(x), 0.0)[0].n_accepted == 0:
            high = 0.0
        while high - low > 1e-13:
            middle = 0.5 * (low + high)
            low, high = (middle, high) if run(int(x), middle)[0].n_accepted else (low, middle)
        residual = np.zeros(vocab)
        if high < 1.0:
            result, rng = run(int(x), float(np.nextafter(1.0, 0.0)))
            residual = rng.choices[0] / rng.choices[0].sum()
        law += q[x] * (high * np.eye(vocab)[x] + (1.0 - high) * residual)
    return law


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """Both loops' `greedy_accept` keeps one draft more than matched (its token the draft, not the argmax)."""
    from dspark_mlx.verify import greedy_accept

    legacy, eager = loops()

    def one_more(draft_tokens, base_logits):
        result = greedy_accept(draft_tokens, base_logits)
        n = result.n_accepted
        if n >= len(draft_tokens):
            return result
        return greedy_accept(draft_tokens, np.concatenate([base_logits[:n], _one_hot(draft_tokens[n], base_logits),
                                                           base_logits[n + 1 :]]))  # fmt: skip

    with mock.patch.object(legacy, "greedy_accept", one_more), mock.patch.object(eager, "greedy_accept", one_more):
        yield


def _one_hot(token, base_logits: np.ndarray) -> np.ndarray:
    row = np.full((1, base_logits.shape[-1]), -1e9, dtype=base_logits.dtype)
    row[0, int(token)] = 0.0
    return row


def planted_rule() -> contextlib.AbstractContextManager:
    """`speculative_sample_accept` correcting a rejected draft from p itself, not from norm(max(p - q, 0))."""
    from dspark_mlx import verify

    return mock.patch.object(verify, "_resample_residual", lambda p_i, q_i, rng: int(rng.choice(p_i.shape[-1], p=p_i)))
