"""The README's example adapter: the smallest prefix cache worth judging, written over mlx-lm's own caches.

`ExactMatchEngine` keeps, per prompt, mlx-lm's `make_prompt_cache` after the prompt's head (all tokens but the last),
at most `capacity` of them, least recently used first out; a request whose prompt is held continues a deep copy
with the last token, any other computes from scratch. Its `policy()` states that. `tests/test_prefix_example.py` runs
it through `mlx_peer_properties/prefix_cache_machine.py`; a user's engine is judged by an adapter of this shape.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from ncm_verify.peers.prefix_engines import EngineModel, LongestPrefixLRU, Served


class ExactMatchEngine:
    name = "exact-match example"
    supports = frozenset({"batch", "restart"})

    def __init__(self) -> None:
        self.net: Any = None  # mlx-lm's model, loaded by start
        self.held: OrderedDict[tuple[int, ...], list] = OrderedDict()

    def start(self, model: EngineModel, capacity: int) -> None:
        from mlx_lm.utils import load_model

        self.net, _ = load_model(model.path)
        self.capacity = capacity

    def policy(self) -> LongestPrefixLRU:
        return LongestPrefixLRU(self.capacity, exact_only=True, key_holds_completion=False, drop_prefixes=False)

    def _step(self, cache: list, tokens: Sequence[int]) -> mx.array:
        logits = self.net(mx.array([list(tokens)], dtype=mx.int32), cache=cache)[0, -1].astype(mx.float32)
        return logits - mx.logsumexp(logits)

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        from mlx_lm.models.cache import make_prompt_cache

        rows = [tuple(p) for p in prompts]
        hits = [copy.deepcopy(self.held[p]) if p in self.held else None for p in rows]  # every row looked up first
        served = []
        for prompt, hit in zip(rows, hits):  # then served and stored row by row: what a batch must equal
            if hit is None:
                cache = make_prompt_cache(self.net)
                if len(prompt) > 1:
                    self._step(cache, prompt[:-1])
            else:
                cache = hit
            self.held.pop(prompt, None)  # stored again: least recently used first out
            self.held[prompt] = copy.deepcopy(cache)
            while len(self.held) > self.capacity:
                self.held.popitem(last=False)
            row, tokens, logprobs = self._step(cache, prompt[-1:]), [], []
            for _ in range(max_tokens):
                values = np.array(row)
                tokens.append(int(values.argmax()))
                logprobs.append(float(values[tokens[-1]]))
                row = self._step(cache, tokens[-1:])
            served.append(Served(prompt, tuple(tokens), tuple(logprobs), 0 if hit is None else len(prompt) - 1))
        return served

    def restart(self) -> None:
        self.held.clear()

    def close(self) -> None:
        self.held.clear()
