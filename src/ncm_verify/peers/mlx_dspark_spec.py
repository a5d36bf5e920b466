"""mlx-dspark 0.20.3: DSpark speculative decoding (`generate.speculative_generate`), driven through its own loop.

Its `target.Target` wraps an mlx-lm model (a tapped forward for the drafter's hidden states; dense rollback by
`KVCache.trim`, a GatedDeltaNet hybrid's by re-running the recurrence over the accepted prefix); its drafter is
`model.DSparkDrafter` built from a tiny `DSparkConfig` (qwen family), seeded. Each round drafts a block (or takes a
free n-gram "lookup" continuation), verifies [anchor, drafts] in one pass, accepts by argmax match at temperature 0
(fused or, with a confidence threshold or penalties, two-phase) or by `_spec_sample_accept` above it (Leviathan /
Chen: min(1, p/q), residual norm(max(0, p - q)); presence / frequency penalties applied per position by
`_Penalizer.block_penalty`). Plain decoding is its `greedy_generate`. Targets are mlx-lm's qwen3 and qwen3_next at
tiny sizes (`mlx_tiny`); the tokenizer is a stub without EOS. `planted()` makes every rollback keep one
rejected entry; `planted_rule()` makes `_spec_sample_accept` accept every draft.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx
import numpy as np

from ncm_verify.peers.mlx_tiny import HIDDEN, build, log_softmax, make_mlx_lm_target

PACKAGE = "mlx-dspark"
VERSION = "0.20.3"
TARGET_KINDS = ("attention", "hybrid")
"""qwen3 and qwen3_next (a gated-DeltaNet hybrid, its `_rollback_gated_delta`); its sliding-window families are
mlx-vlm's (gemma4), outside this environment's judged code."""


class Tokenizer:
    """What the loops read of a tokenizer when handed token ids: no EOS, no special tokens."""

    eos_token_id = None
    eos_token_ids: list[int] = []

    def decode(self, ids, **_) -> str:
        return " ".join(str(int(i)) for i in ids)

    def convert_tokens_to_ids(self, token):
        return None


def make_target(kind: str, seed: int, vocab: int = 12):
    """mlx-dspark's `Target` over mlx-lm's qwen3 or qwen3_next, weights drawn from `seed` (`.model`: the model)."""
    from mlx_dspark.target import Target

    return Target(make_mlx_lm_target(kind, seed, vocab), Tokenizer())


def make_drafter(seed: int, vocab: int, block_size: int = 4):
    """mlx-dspark's own `DSparkDrafter` (qwen family, one layer) reading target layers 1 and 3, seeded."""
    from mlx_dspark.config import DSparkConfig
    from mlx_dspark.model import DSparkDrafter

    config = DSparkConfig(
        family="qwen3", hidden_size=HIDDEN, vocab_size=vocab, num_hidden_layers=1, intermediate_size=2 * HIDDEN,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=16, attention_k_eq_v=False,
        partial_rotary_factor=1.0, rope_type="default", rope_theta=10000.0, block_size=block_size,
        mask_token_id=vocab - 1, target_layer_ids=[1, 3], num_target_layers=4, markov_rank=8,
        final_logit_softcapping=None, mlp_activation="silu", norm_style="qwen", use_v_norm=False,
    )  # fmt: skip
    return build(lambda: DSparkDrafter(config), seed)


def generate(target, drafter, prompt: list[int], max_tokens: int, **options):
    """mlx-dspark's `speculative_generate` on `prompt` (token ids): its `GenResult`."""
    from mlx_dspark.generate import speculative_generate

    return speculative_generate(
        target, Tokenizer(), drafter, prompt_ids=prompt, max_new_tokens=max_tokens, apply_chat_template=False,
        **options,
    )  # fmt: skip


def plain(target, prompt: list[int], max_tokens: int, **options) -> list[int]:
    """mlx-dspark's own plain decoding, `greedy_generate`."""
    from mlx_dspark.generate import greedy_generate

    result = greedy_generate(
        target, Tokenizer(), prompt_ids=prompt, max_new_tokens=max_tokens, apply_chat_template=False, **options
    )
    return [int(t) for t in result.token_ids]


def conditional(target, tokens: list[int]) -> mx.array:
    """The model's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target.model(mx.array([tokens]))[0, -1])


@contextlib.contextmanager
def caches_after_rollbacks(target) -> Iterator[list]:
    """Each `Target.rollback` recorded: (the offset its attention caches claim, a copy of the caches)."""
    from mlx_dspark.target import Target

    own, rounds = Target.rollback, []

    def rollback(self, cache, n_rejected, accepted):
        own(self, cache, n_rejected, accepted)
        if self is target:
            offset = max(int(getattr(c, "offset", 0) or 0) for c in cache)
            rounds.append((offset, copy.deepcopy(cache)))

    with mock.patch.object(Target, "rollback", rollback):
        yield rounds


def rule_law(v_logits: np.ndarray, q: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0):
    """The exact law of the first token `_spec_sample_accept` emits for one draft x drawn from `q` (target rows
    `v_logits` [2, V]): per x, its acceptance probability (bisection on the scripted `mx.random.uniform`: it
    accepts iff U < it) and the law `mx.random.categorical` is handed on rejection (its softmax)."""
    from mlx_dspark import generate

    vocab = q.shape[-1]
    rows = mx.array(v_logits, dtype=mx.float32)
    q_rows = mx.array(q[None, :], dtype=mx.float32)

    def run(x: int, uniform: float):
        handed: list[np.ndarray] = []

        def categorical(logits, *args, **kwargs):
            row = np.array(logits.astype(mx.float32), dtype=np.float64).reshape(-1)
            law = np.exp(row - row.max())
            handed.append(law / law.sum())
            return mx.array(int(np.argmax(row)))

        with (
            mock.patch.object(generate.mx.random, "uniform", lambda shape, **_: mx.full(shape, uniform)),
            mock.patch.object(generate.mx.random, "categorical", categorical),
        ):
            n, _ = generate._spec_sample_accept(rows, [x], q_rows, temperature, top_p, top_k)
        return n, handed

    law = np.zeros(vocab)
    for x in np.flatnonzero(q > 0):
        low, high = 0.0, 1.0  # the acceptance probability lies in (low, high]
        if run(int(x), 0.0)[0] == 0:
            high = 0.0
        while high - low > 1e-7:  # float32 coins
            middle = 0.5 * (low + high)
            low, high = (middle, high) if run(int(x), middle)[0] else (low, middle)
        residual = np.zeros(vocab)
        if high < 1.0:
            n, handed = run(int(x), 1.0)
            residual = handed[0] if n == 0 else residual
        law += q[x] * (high * np.eye(vocab)[x] + (1.0 - high) * residual)
    return law


def target_law(v_logits: np.ndarray, temperature: float, top_p: float = 1.0, top_k: int = 0) -> np.ndarray:
    """The law the rule claims to emit: its own `truncate_probs(softmax(v / T), top_p, top_k)` of the first row."""
    from mlx_dspark.sampling import truncate_probs

    p = truncate_probs(mx.softmax(mx.array(v_logits[0], dtype=mx.float32) / temperature), top_p, top_k)
    return np.array(p, dtype=np.float64)


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """Every `Target.rollback` drops one rejected entry fewer: the first rejected draft stays attended (KV rows, or
    a hybrid's recurrent state rebuilt one token too far)."""
    from mlx_dspark.target import Target

    own = Target.rollback

    def rollback(self, cache, n_rejected, accepted):
        return own(self, cache, max(n_rejected - 1, 0), accepted)

    with mock.patch.object(Target, "rollback", rollback):
        yield


def planted_rule() -> contextlib.AbstractContextManager:
    """`_spec_sample_accept` accepting every draft: ``mx.minimum(1, p/q)`` read as 1 (its only minimum)."""
    from mlx_dspark import generate

    class AlwaysAccept:
        def __getattr__(self, name):
            return getattr(mx, name)

        def minimum(self, a, b):
            return mx.ones_like(mx.minimum(a, b))

    return mock.patch.object(generate, "mx", AlwaysAccept())


class EosTokenizer(Tokenizer):
    """`Tokenizer` with end-of-sequence ids (what `eos_token_ids` reads)."""

    def __init__(self, eos: list[int]):
        self.eos_token_ids = list(eos)


class ParkingCapController:
    """A cap controller (what `speculative_generate` reads of mlx-dspark's `CapController`: `cap`, `probe_every`,
    `set_depth`, `update`) that follows a script of caps, one per update: 0 parks speculation (plain committed
    steps, a sprint of up to `probe_every`), 1 or 2 drafts. Scripted, not calibrated: the real controller's choice
    rests on measured round times, so whether it parks in a short run depends on the machine's load."""

    def __init__(self, caps: list[int], probe_every: int = 2):
        if not caps or any(cap < 0 for cap in caps):
            raise ValueError(f"caps: expected a non-empty list of caps >= 0, got {caps}")
        self.script, self.probe_every, self.rounds = list(caps), probe_every, 0
        self.cap = self.script[0]

    def set_depth(self, depth: int) -> None:
        pass

    def update(self, accepted: int, drafted: int, **_) -> None:
        self.rounds += 1
        self.cap = self.script[self.rounds % len(self.script)]

    def cap_for(self, batch_width: int) -> int:
        """The batched engine's per-width cap (`SpecSlots` asks when several rows verify together)."""
        return self.cap


def slot_rows(target, drafter, prompts: list[list[int]], max_tokens: list[int], controller) -> list[list[int]]:
    """mlx-dspark's `SpecSlots` (the continuous-batching engine `batch_spec_generate` wraps) with a cap
    controller, every prompt admitted, stepped until every row retires: each row's tokens, in prompt order."""
    from mlx_dspark.batch_engine import SpecSlots

    slots = SpecSlots(target, Tokenizer(), drafter, capacity=len(prompts), cap_controller=controller)
    for row, (prompt, budget) in enumerate(zip(prompts, max_tokens)):
        slots.admit(prompt, max_new_tokens=budget, meta=row)
    rows: list[list[int]] = [[] for _ in prompts]
    for _ in range(sum(max_tokens) + 1):  # each step commits at least one token per active row
        for row, result in slots.step():
            rows[row] = [int(t) for t in result.token_ids]
        if not slots.n_active:
            return rows
    raise AssertionError(f"SpecSlots did not retire every row within {sum(max_tokens) + 1} steps")


def batch_rows(target, drafter, prompts: list[list[int]], max_tokens: list[int], **options) -> list[list[int]]:
    """mlx-dspark's `batch_spec_generate` (its batched server engine's static entry point): each row's tokens."""
    from mlx_dspark.batch_engine import batch_spec_generate

    results = batch_spec_generate(target, Tokenizer(), drafter, prompts, max_new_tokens=max_tokens, **options)
    return [[int(t) for t in result.token_ids] for result in results]
