"""mlx-openai-server 1.8.1's prefix cache under the prefix-cache machine: its own handler, cache and model classes.

What runs is the package's own code: `MLXLMHandler` (``app/handler/mlx_lm.py``, built by its own ``__init__`` with
``disable_batching=True``), its `LRUPromptCache` (``app/utils/prompt_cache.py``: a token trie in memory, every entry a
dill pickle in ``prompt_cache_dir``), `MLX_LM` (``app/models/mlx_lm.py``: mlx-lm's ``stream_generate``, a draft model
when given one) and the handler's own steps: ``fetch_nearest_cache``, ``_normalize_nonbatch_cache_hit``,
``create_prompt_cache`` and ``_stream_with_lock_and_cache_persist`` (which stores prompt + completion on the worker
thread). The adapter writes only the glue ``_build_inference_context`` runs between them (lines 493-509; for a
non-trimmable model the last-token checkpoint of lines 536-556, the single-turn fallback, since a request of token ids
has no message boundary). Left out: the HTTP layer, chat templates and parsers (a request is token ids), the async
inference worker (the handler's generator is iterated on this thread, as the worker's thread would), and the batch
scheduler's path (``BatchScheduler``; see `docs/peers-mlx.md`).

The cache lives only as long as the process: its trie is in memory, so a restart starts empty and the pickles left
in ``prompt_cache_dir`` by a process that died are never read again (nor deleted). What can be damaged is a pickle
the running server reads on its next hit: `damage_entry`.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ncm_verify.peers.prefix_engines import EngineModel, LongestPrefixLRU, Served
from ncm_verify.peers.prefix_peer_files import damage, entry_gap, trie_entries


def without_full_collections() -> None:
    """`LRUPromptCache._release_evicted_memory` runs ``gc.collect()`` after every insert: 0.2 CPU seconds each in a
    test process (its heap ~350,000 objects), most of this engine's judgement. A collection frees only unreachable
    cycles, nothing an entry holds or serves: here it is skipped (``mx.clear_cache()`` after it still runs)."""
    import types

    from app.utils import prompt_cache

    prompt_cache.gc = types.SimpleNamespace(collect=lambda *args: 0)


class OpenAIServerEngine:
    name = "mlx-openai-server 1.8.1"
    supports = frozenset({"restart", "fail"})

    def __init__(self, draft: EngineModel | None = None):
        self.draft = draft
        if draft is not None:
            self.supports = frozenset({"restart", "speculative", "fail"})
        self.handler: Any = None
        self._oracle: Any = None
        self.folder = Path(tempfile.mkdtemp(prefix="mlx-openai-server-cache-"))

    def start(self, model: EngineModel, capacity: int) -> None:
        from app.handler.mlx_lm import MLXLMHandler

        without_full_collections()
        self.model, self.capacity = model, capacity
        self.handler = MLXLMHandler(
            str(model.path),
            draft_model_path=str(self.draft.path) if self.draft is not None else None,
            prompt_cache_size=capacity,
            prompt_cache_dir=str(self.folder),
            disable_batching=True,
        )

    def policy(self) -> LongestPrefixLRU:
        """Its documented reuse: mlx-lm's LRUPromptCache (exact, shorter, longer-trimmed), prompt + completion keys."""
        return LongestPrefixLRU(self.capacity, trimmable=self.model.family == "attention")

    def _request(self, ids: list[int], max_tokens: int) -> Served:
        handler = self.handler
        with handler._generation_lock:  # _build_inference_context, lines 493-505
            cache, rest = handler.prompt_cache.fetch_nearest_cache(ids, allowed_sources={"nonbatch"})
            cache, rest = handler._normalize_nonbatch_cache_hit(ids, cache, rest)
            if cache is None:
                cache = handler.model.create_prompt_cache()
        reused = len(ids) - len(rest)
        extra = {}
        if not handler.model.cache_is_trimmable and len(ids) > 1 and len(ids) - 1 > reused:
            prefix = ids[:-1]  # lines 536-556: a single-turn request checkpoints all but its last token

            def checkpoint(state, _prefix=prefix):
                import copy

                handler._insert_prompt_cache(_prefix, copy.deepcopy(state), cache_type="system")

            extra = dict(checkpoint_position=len(ids) - 1 - reused, checkpoint_callback=checkpoint)
        tokens, logprobs = [], []
        stream = handler._stream_with_lock_and_cache_persist(
            list(ids), cache, input_ids=rest, prompt_cache=cache, stream=True, temperature=0.0,
            max_tokens=max_tokens, **extra,
        )  # fmt: skip
        for chunk in stream:
            if chunk is None:
                continue
            tokens.append(int(chunk.token))
            logprobs.append(float(chunk.logprobs[chunk.token].item()))
        return Served(tuple(ids), tuple(tokens), tuple(logprobs), reused)

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        return [self._request([int(t) for t in p], max_tokens) for p in prompts]

    def fail(self) -> str:
        """An empty prompt through the handler's own path (single-request or batch scheduler): an exception (the
        server's error reply); returns it. Tokens served for it instead are rule 6's failure."""
        try:
            self.serve([()], 2)
        except Exception as error:  # noqa: BLE001 - what the server turns into an error reply
            return f"the request raised {error!r}"
        raise AssertionError("rule 6: an empty prompt was served, not refused")

    def entries(self) -> list[tuple[tuple[int, ...], Any]]:
        """(key, CacheEntry) for every entry its trie holds."""
        return trie_entries(self.handler.prompt_cache._trie._trie)

    def audit(self, call: str) -> None:
        """Every stored entry, loaded from its pickle as a hit would load it, attends as its key: the main model's
        layers fed one probe token give the uncached log-probabilities (within the served tolerance)."""
        from ncm_verify.peers.prefix_engines import Uncached
        from ncm_verify.tolerances import SERVED_LOGPROBS

        if self._oracle is None:
            self._oracle = Uncached(self.model)
        oracle = self._oracle
        n_model = self.handler.model._num_model_cache_layers
        for key, entry in self.entries():
            cache = self.handler.prompt_cache._load_cache_from_disk(entry)
            gap = entry_gap(self.handler.model.model, oracle, cache[:n_model], key)
            assert gap <= SERVED_LOGPROBS[self.model.dtype], (
                f"rule 4: the entry stored under {list(key)} ({entry.cache_type}) attends {gap:.3g} nats off an "
                f"uncached forward of its key (offsets {[getattr(c, 'offset', None) for c in cache]})\n  call: {call}"
            )

    def damage_entry(self, key: Sequence[int], kind: str) -> str:
        """Damage the pickle stored under `key` (``kind`` in `prefix_peer_files.DAMAGES`): the flipped bit lands in
        the first layer's stored keys."""
        import dill

        entry = self.handler.prompt_cache._trie.get(list(key))
        with entry.file_path.open("rb") as file:
            cache = dill.load(file)
        values = np.array(cache[0].keys[..., : cache[0].offset, :])
        return damage(entry.file_path, kind, values)

    def restart(self) -> None:
        self.close()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.start(self.model, self.capacity)

    def close(self) -> None:
        if self.handler is not None:
            self.handler.prompt_cache.close()
            self.handler = None
        shutil.rmtree(self.folder, ignore_errors=True)


class BatchedOpenAIServerEngine(OpenAIServerEngine):
    """The handler's batched path: its own `BatchScheduler` (``app/core/batch_scheduler.py``, started by the handler's
    ``_get_or_start_scheduler``) over mlx-lm's BatchGenerator, which fetches from and stores into the same pickled
    LRU on its own thread. Prompts of one `serve` are submitted together (one batch), as concurrent HTTP requests
    are; the segments a non-trimmable model gets are the handler's single-turn ones (lines 456-470). The scheduler
    reports each request's cached prompt tokens but no log-probabilities."""

    name = "mlx-openai-server 1.8.1 (batch scheduler)"
    supports = frozenset({"batch", "restart", "fail"})

    def __init__(self):
        super().__init__()
        self.loop = asyncio.new_event_loop()

    def start(self, model: EngineModel, capacity: int) -> None:
        from app.handler.mlx_lm import MLXLMHandler

        without_full_collections()
        self.model, self.capacity = model, capacity
        self.handler = MLXLMHandler(str(model.path), prompt_cache_size=capacity, prompt_cache_dir=str(self.folder))

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        from app.core.batch_scheduler import BatchScheduler

        handler = self.handler
        trimmable = handler.model.cache_is_trimmable

        async def one(scheduler, ids: list[int]) -> Served:
            segments = None if trimmable or len(ids) < 2 else [ids[:-1], ids[-1:]]
            tokens, reused = [], 0
            stream = scheduler.submit_stream(
                input_ids=ids, max_tokens=max_tokens, sampler=handler.model.build_sampler({"temperature": 0.0}),
                state_machine=BatchScheduler.build_state_machine(handler.model.tokenizer, None),
                segments=segments, segment_types=None if segments is None else ["system", "assistant"],
            )  # fmt: skip
            async for chunk in stream:
                tokens.append(int(chunk.token))
                reused = max(reused, int(chunk.cached_prompt_tokens))
            return Served(tuple(ids), tuple(tokens), None, reused)

        async def batch() -> list[Served]:
            scheduler = await handler._get_or_start_scheduler()
            return list(await asyncio.gather(*(one(scheduler, [int(t) for t in p]) for p in prompts)))

        return self.loop.run_until_complete(batch())

    def close(self) -> None:
        if self.handler is not None and self.handler._batch_scheduler is not None:
            self.handler._batch_scheduler.stop()
        super().close()
