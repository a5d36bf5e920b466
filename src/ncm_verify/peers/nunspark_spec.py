"""nunspark 0.13.0: speculative decoding over its disk-streaming engine, driven through its own loops and rule.

Targets are mlx-lm models at tiny sizes (`mlx_tiny`), packed with nunspark's own `packer.pack` into a temporary
directory and run by its `engine.StreamingEngine` (one layer streamed at a time; verify passes on ephemeral cache
clones, `commit_verified` / `commit_path` append only the accepted rows). Loops: `generate.speculative_generate` (a
draft model drafts K greedily; `accept_top_k=1` accepts drafts equal to the target's argmax, `> 1` is its
documented lossy "fast mode") and `tree_spec.tree_speculative_generate` (a fixed tree, SpecInfer-style
`sample_accepted_path`; greedy at temperature 0). Plain decoding is its own `generate.generate`. `planted()` commits
one row more than accepted; `planted_rule()` draws the rule's correction half from its law, half uniformly.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from unittest import mock

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ncm_verify.peers.mlx_tiny import HIDDEN, build, log_softmax, make_mlx_lm_target

PACKAGE = "nunspark"
VERSION = "0.13.0"
TARGET_KINDS = ("attention", "sliding-window")
"""qwen3 and gemma4_text (its architecture table's dense and sliding-window entries); qwen3_next is not in it."""
LOOPS = ("linear", "tree")
SHAPES = ([2], [2, 2], [3, 1], [1, 1, 1])
"""Tree shapes (`TreeShape.branching`): children per depth."""


def make_target(kind: str, seed: int, vocab: int = 12):
    return make_mlx_lm_target(kind, seed, vocab)


def make_quantizable_target(seed: int, vocab: int = 12):
    """mlx-lm's qwen3 with heads 32 wide: MLX quantizes KV in groups of 32, 64 or 128 along a head, so the tiny
    targets' heads of 16 cannot take nunspark's `kv_quant`."""
    from mlx_lm.models import qwen3

    args = qwen3.ModelArgs(
        model_type="qwen3", hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, rms_norm_eps=1e-6, vocab_size=vocab,
        num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
        rope_theta=10000.0, head_dim=32, tie_word_embeddings=False,
    )  # fmt: skip
    return build(lambda: qwen3.Model(args), seed)


def make_drafter(seed: int, vocab: int = 12):
    """The resident draft model: an attention-only qwen3 of the same vocabulary, its own weights."""
    return make_mlx_lm_target("attention", seed, vocab)


def engine(target, prefetch: bool = False):
    """nunspark's `StreamingEngine` over `target`, packed by its own `pack` into a temporary directory; `prefetch`:
    its layer-window prefetch (on by default in nunspark, off in the other properties)."""
    from nunspark.engine import StreamingEngine
    from nunspark.packer import pack

    root = tempfile.mkdtemp(prefix="ncm-nunspark-")
    atexit.register(shutil.rmtree, root, True)
    config = {k: v for k, v in dataclasses.asdict(target.args).items() if v is not None}
    manifest = pack(None, root, weights=dict(tree_flatten(target.parameters())), config=config)
    return StreamingEngine(root, manifest, budget_bytes=1 << 30, prefetch=prefetch, wire_limit=False)


def generate(streaming, drafter, prompt: list[int], max_tokens: int, loop: str = "linear", *, draft_tokens: int = 3,
             shape=(2, 2), accept_top_k: int = 1, temp: float = 0.0, stats=None, eos_id: int | None = None,
             prefetch: bool = False, kv_quant=None) -> list[int]:  # fmt: skip
    """The tokens of nunspark's `loop` (`speculative_generate` or `tree_speculative_generate`) on `prompt`."""
    from nunspark.generate import speculative_generate
    from nunspark.tree_shape import TreeShape
    from nunspark.tree_spec import tree_speculative_generate

    if loop == "linear":
        steps = speculative_generate(
            streaming, drafter, prompt, max_tokens=max_tokens, num_draft_tokens=draft_tokens,
            accept_top_k=accept_top_k, prefetch=prefetch, stats=stats, eos_id=eos_id, kv_quant=kv_quant,
        )  # fmt: skip
    else:
        steps = tree_speculative_generate(
            streaming, drafter, prompt, shape=TreeShape(list(shape)), max_tokens=max_tokens, temp=temp,
            prefetch=prefetch, stats=stats, eos_id=eos_id,
        )  # fmt: skip
    return [int(t) for t in steps]


def plain(streaming, prompt: list[int], max_tokens: int, kv_quant=None) -> list[int]:
    """nunspark's own plain greedy decoding (`generate.generate`) on the streaming engine (`kv_quant`: its
    `KVQuant`, quantized KV entries)."""
    from nunspark.generate import generate as plain_generate

    steps = plain_generate(streaming, prompt, max_tokens=max_tokens, prefetch=False, kv_quant=kv_quant)
    return [int(t) for t in steps]


def conditional(target, tokens: list[int]) -> mx.array:
    """The target's log-probabilities ``[V]`` of the token after `tokens`, from one uncached forward pass."""
    return log_softmax(target(mx.array([tokens]))[0, -1])


class ScriptedRandom:
    """`mx.random` as `tree_spec` sees it: `uniform()` yields the scripted coins (0.0 accepts whenever the
    threshold is above 0, 1.0 never accepts: the rule accepts iff ``U < min(1, ratio)``), `categorical(logits)`
    records the law softmax(logits) and returns its argmax."""

    def __init__(self, decisions: list[bool]):
        self.decisions = list(decisions)
        self.laws: list[np.ndarray] = []

    def uniform(self, *args, **kwargs):
        value = 0.0 if (self.decisions.pop(0) if self.decisions else False) else 1.0
        return mock.Mock(item=lambda: value)

    def categorical(self, logits, *args, **kwargs):
        row = np.array(logits.astype(mx.float32), dtype=np.float64).reshape(-1)
        law = np.exp(row - row.max())
        self.laws.append(law / law.sum())
        return mx.array(int(np.argmax(row)))


def rule_law(p_logits: np.ndarray, q_logits: np.ndarray, children: int, temp: float) -> np.ndarray:
    """The exact law of the first token `sample_accepted_path` emits on a one-level tree whose `children` are
    i.i.d. draws from softmax(q_logits / temp) (as `build_draft_tree` draws them), the target's logits `p_logits`:
    per tuple of children and per decision path (accept child j after rejecting the ones before), the probability
    from the thresholds its coins are compared with, and the law its correction is drawn from when all reject."""
    import itertools

    from nunspark import tree_spec
    from nunspark.tree_shape import TreeShape

    vocab = p_logits.shape[-1]
    q = np.exp((q_logits - q_logits.max()) / temp)
    q /= q.sum()
    shape = TreeShape([children])
    draft = {0: mx.array(q_logits, dtype=mx.float32)}
    law = np.zeros(vocab)
    for kids in itertools.product(range(vocab), repeat=children):
        weight = float(np.prod(q[list(kids)]))
        if weight == 0.0:
            continue
        token = {0: 0, **{i + 1: t for i, t in enumerate(kids)}}
        target = {n: mx.array(p_logits, dtype=mx.float32) for n in range(children + 1)}
        for accepted_at in [*range(children), None]:
            decisions = [False] * (children if accepted_at is None else accepted_at) + [True]
            scripted, thresholds = ScriptedRandom(decisions), list[float]()

            def recorded_min(*args, thresholds=thresholds):  # the rule's ``min(1.0, ratio)``: a coin's chance
                thresholds.append(float(min(*args)))
                return thresholds[-1]

            with (
                mock.patch.object(tree_spec.mx, "random", scripted),
                mock.patch.object(tree_spec, "min", recorded_min, create=True),
            ):
                accepted, _, _ = tree_spec.sample_accepted_path(shape, token, draft, target, temp=temp)
            rejections = thresholds if accepted_at is None else thresholds[:-1]
            chance = weight * float(np.prod([1.0 - t for t in rejections]))
            if accepted_at is None:
                law += chance * scripted.laws[0]
            elif accepted:  # a scripted acceptance the coin refused has probability 0 (its threshold)
                law[accepted[0]] += chance * thresholds[-1]
    return law


def served_speculative_call(temperature: float) -> dict:
    """The keyword arguments nunspark's server (`server.stream_chat_completion`, as its request handler calls it
    with the request's temperature and a draft model loaded) hands `generate.speculative_generate`, recorded."""
    from nunspark import generate, server

    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        yield from ()

    tokenizer = mock.Mock(eos_token_ids={0})
    tokenizer.detokenizer.last_segment = ""
    with mock.patch.object(generate, "speculative_generate", recording):
        list(server.stream_chat_completion(None, tokenizer, [1, 2], max_tokens=4, temp=temperature,
                                           kv_budget=1 << 30, prefetch=False, stop_sequences=[],
                                           draft_model=object()))  # fmt: skip
    if not calls:
        raise AssertionError("stream_chat_completion did not call speculative_generate with a draft model")
    return calls[0]


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """Both loops commit one verified row more than they accepted: a rejected draft's K/V stays attended."""
    from nunspark.engine import StreamingEngine

    own_verified, own_path = StreamingEngine.commit_verified, StreamingEngine.commit_path

    def commit_verified(self, kv, recs, accepted_len):
        return own_verified(self, kv, recs, accepted_len + 1)

    def commit_path(self, kv, stash, path_index, accepted_len):
        return own_path(self, kv, stash, path_index, accepted_len + 1)

    with (
        mock.patch.object(StreamingEngine, "commit_verified", commit_verified),
        mock.patch.object(StreamingEngine, "commit_path", commit_path),
    ):
        yield


def planted_rule() -> contextlib.AbstractContextManager:
    """The rule's correction (and leaf bonus) drawn half from its law, half uniformly."""
    from nunspark import tree_spec

    own = tree_spec._categorical_from_probs
    return mock.patch.object(tree_spec, "_categorical_from_probs", lambda probs: own(0.5 * probs + 0.5 / probs.size))
