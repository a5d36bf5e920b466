"""vllm-mlx 0.6.0's prefix caches, served through its own continuous-batching `Scheduler` (`vllm_mlx/scheduler.py`).

The scheduler is what its server's engine core steps: `add_request` looks the prompt up in the cache of the mode it
was configured with, `step` schedules waiting requests into mlx-lm's `BatchGenerator` (a hit inserts the cached
layers and only the remaining tokens) and stores each finished request's cache under prompt + completion. Three modes:

- ``memory``: `MemoryAwarePrefixCache` (the default): exact, prefix, supersequence (trimmed) and longest-common-prefix
  matches over a sorted key index; for layers that cannot be trimmed (a wrapped ring, recurrent state) a post-prefill
  snapshot keyed by the prompt instead (`_store_prompt_only_cache`);
- ``legacy``: `PrefixCacheManager` (``--no-memory-aware-cache``): a token trie, exact / shorter / longer (trimmed);
- ``paged``: `BlockAwarePrefixCache` over `PagedCacheManager` (``--use-paged-cache``): per-block hashes.

`reused` is the request's ``cached_tokens`` after scheduling (the scheduler zeroes it where it drops a hit and
prefills). Log-probabilities are the ones `BatchGenerator` hands the scheduler (read as it processes each response).
Two settings are lowered so that short prompts are cached, each a `MemoryCacheConfig` field: ``min_prefix_tokens``
(128 by default) to 1 and ``max_entries`` to the machine's capacity; the paged mode's block size is 4 (its
``--paged-cache-block-size``). The HTTP server is not started (fastapi, uvicorn left out of the environment): the
scheduler is the code that keeps the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from ncm_verify.peers.prefix_engines import EngineModel, LongestPrefixLRU, Served, common_length

PACKAGE = "vllm-mlx"
VERSION = "0.6.0"
MODES = ("memory", "legacy", "paged")
BLOCK = 4
"""The paged mode's block size (``--paged-cache-block-size``; 64 by default): prompts of the machine span blocks."""
STEP_BOUND = 64
"""Scheduler steps a request may take beyond its tokens: a bound, never reached by a sound engine."""


class VllmMlxPrefix:
    """A `PrefixEngine` over vllm-mlx's `Scheduler` in one of `MODES`."""

    def __init__(self, mode: str = "memory", batch: bool = True):
        """`batch` False: the machine sends one prompt at a time (to judge the cache apart from batching)."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        self.mode = mode
        persist = {"persist"} if mode == "memory" else set()  # MemoryAwarePrefixCache.save_to_disk / load_from_disk
        self.supports = frozenset({"restart", "fail", *persist, *({"batch"} if batch else ())})
        self.name = f"vllm-mlx {VERSION} scheduler ({mode} cache{'' if batch else ', one request at a time'})"
        self.scheduler: Any = None
        self.ids = itertools.count()
        self.cache_dir = Path(tempfile.mkdtemp(prefix="vllm-mlx-cache-"))  # the server's ~/.cache/vllm-mlx/prefix_cache

    def start(self, model: EngineModel, capacity: int) -> None:
        from mlx_lm import load

        self.model, self.capacity = model, capacity
        loaded = load(str(model.path))
        self.net, self.tokenizer = loaded[0], loaded[1]
        self.restart()

    def policy(self):
        """The paged mode's documented reuse (`BlockAwarePrefixCache`, prefix_cache.py:397; its chained block hash,
        paged_cache.py:40): whole blocks of a stored prompt + completion, chained, up to the whole prompt (no token
        kept back: the scheduler re-feeds the last one); its 1000 blocks are never filled here. The memory-aware and
        legacy modes' on the attention model (`MemoryAwarePolicy`, `TriePolicy`); the memory-aware mode's snapshots
        for caches it cannot trim are not modelled (None)."""
        from ncm_verify.peers.prefix_engines import BlockPrefixLRU

        if self.mode == "memory" and self.model.family == "attention":
            return MemoryAwarePolicy(self.capacity, touch_on_hit=True, drop_prefixes=False)
        if self.mode == "legacy" and self.model.family == "attention":
            return TriePolicy(self.capacity, touch_on_hit=True, drop_prefixes=False)
        if self.mode != "paged":
            return None
        return BlockPrefixLRU(10**9, keep_last=0, drop_prefixes=False, block=BLOCK)

    def restart(self) -> None:
        """A new scheduler on the same weights: what a restarted server holds. The memory-aware cache is saved on
        shutdown and loaded at start, as its server does (`save_cache_to_disk` / `load_cache_from_disk` under its
        cache directory); the other modes' caches live in memory only."""
        import mlx.core as mx
        from vllm_mlx.scheduler import Scheduler, SchedulerConfig

        if self.scheduler is not None and self.mode == "memory":
            self.scheduler.save_cache_to_disk(str(self.cache_dir))

        options = dict(
            memory=dict(cache_memory_mb=256),
            legacy=dict(use_memory_aware_cache=False, prefix_cache_size=self.capacity),
            paged=dict(use_paged_cache=True, paged_cache_block_size=BLOCK),
        )[self.mode]
        scheduler = Scheduler(self.net, self.tokenizer, SchedulerConfig(**options))
        cache = scheduler.memory_aware_cache
        if cache is not None:
            cache._config = dataclasses.replace(cache._config, min_prefix_tokens=1, max_entries=self.capacity)
            if any(self.cache_dir.rglob("index.json")):
                scheduler.load_cache_from_disk(str(self.cache_dir))
        self.logprobs: dict[str, list[float]] = {}
        own = scheduler._process_batch_responses

        def record(responses):  # the log-probability of each token, as BatchGenerator hands it over
            for response in responses:
                request_id = scheduler.uid_to_request_id.get(response.uid)
                if request_id is not None and response.token is not None:
                    value = response.logprobs[int(response.token)].astype(mx.float32).item()
                    self.logprobs.setdefault(request_id, []).append(float(value))
            return own(responses)

        scheduler._process_batch_responses = record
        self.scheduler = scheduler

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        from vllm_mlx.request import Request, SamplingParams

        scheduler = self.scheduler
        requests = []
        for prompt in prompts:  # every prompt looked up first (add_request), then decoded together
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, top_p=1.0, top_k=0)
            request = Request(request_id=f"r{next(self.ids)}", prompt=[int(t) for t in prompt], sampling_params=params)
            scheduler.add_request(request)
            requests.append(request)
        tokens: dict[str, list[int]] = {r.request_id: [] for r in requests}
        reused: dict[str, int] = {}
        for _ in range(len(requests) * (max_tokens + STEP_BOUND)):
            output = scheduler.step()
            for request in requests:  # cached_tokens is final once scheduled (zeroed where a hit is dropped)
                if request.request_id in output.scheduled_request_ids:
                    reused[request.request_id] = int(request.cached_tokens or 0)
            for out in output.outputs:
                if out.request_id in tokens:
                    tokens[out.request_id].extend(int(t) for t in out.new_token_ids)
            if not scheduler.has_requests():
                break
        else:
            raise RuntimeError(f"{self.name}: requests unfinished after the step bound: {prompts}")
        return [
            Served(
                tuple(int(t) for t in prompt),
                tuple(tokens[r.request_id]),
                tuple(self.logprobs.get(r.request_id, [])),
                reused.get(r.request_id),
            )
            for prompt, r in zip(prompts, requests)
        ]

    def fail(self) -> str:
        """An empty prompt, as its server's engine core hands it over: the scheduler must answer it with an error
        (its step fails in mlx-lm's BatchGenerator, and `_recover_from_generation_error` finishes the request with
        ``finish_reason`` "error"); returns that answer. No answer within the step bound is rule 6's failure."""
        from vllm_mlx.request import Request, SamplingParams

        params = SamplingParams(max_tokens=2, temperature=0.0, top_p=1.0, top_k=0)
        request = Request(request_id=f"r{next(self.ids)}-empty", prompt=[], sampling_params=params)
        try:
            self.scheduler.add_request(request)
        except Exception as error:  # refused at once: an error response too
            return f"add_request refused the empty prompt: {error!r}"
        for _ in range(STEP_BOUND):
            for out in self.scheduler.step().outputs:
                if out.request_id == request.request_id and out.finished:
                    assert out.finish_reason == "error", (
                        f"rule 6: an empty prompt was answered {list(out.new_token_ids)} (finish_reason "
                        f"{out.finish_reason!r}), not refused"
                    )
                    return f"finish_reason {out.finish_reason!r}, tokens {list(out.new_token_ids)}"
            if not self.scheduler.has_requests():
                break
        raise AssertionError(f"rule 6: an empty prompt got no answer within {STEP_BOUND} scheduler steps")

    def persist(self, folder) -> list[tuple[int, ...]]:
        """The memory-aware cache written as its server writes it on shutdown (`save_to_disk`: a folder per
        provenance hash, safetensors per entry, an index); returns the keys it holds."""
        cache = self.scheduler.memory_aware_cache
        Path(folder).mkdir(parents=True, exist_ok=True)  # save_to_disk writes nothing for an empty cache
        cache.save_to_disk(str(folder))
        return [tuple(int(t) for t in key) for key in cache._entries]

    def restore(self, folder) -> None:
        """A server started on `folder` alone: `load_from_disk` into a fresh scheduler's cache, as at start-up; a
        folder it loads nothing from is a refusal. Its own directory is emptied first: loading a key it already
        holds leaves the cache's sorted index with a stale key (memory_cache.py:2103-2105, a KeyError in a later
        fetch), which a server loading once at start never does."""
        self.scheduler = None
        shutil.rmtree(self.cache_dir)
        self.cache_dir.mkdir()
        self.restart()
        loaded = self.scheduler.memory_aware_cache.load_from_disk(str(folder))
        if not loaded:
            raise ValueError(f"load_from_disk({folder}) loaded no entry")

    def close(self) -> None:
        self.scheduler = None
        shutil.rmtree(self.cache_dir, ignore_errors=True)


@dataclasses.dataclass
class MemoryAwarePolicy(LongestPrefixLRU):
    """`MemoryAwarePrefixCache.fetch` (memory_cache.py:1263-1500) as the scheduler reports it, for caches it can trim:
    entries keyed by prompt + completion (`entries` of them, least recently stored or hit first out); an exact or
    supersequence match (which wins over a shorter prefix) is dropped and prefilled (scheduler.py:2362-2383: reported
    0); else the longest stored prefix of the prompt; else the longest common prefix with the prompt's two
    neighbours in sorted key order (its index is sorted; an entry beyond them is not looked at)."""

    def expected_reuse(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        import bisect

        prompt = tuple(prompt)
        keys = sorted(self.held)
        if prompt in self.held:
            return 0, prompt
        longer = [k for k in keys if len(k) > len(prompt) and k[: len(prompt)] == prompt]
        if longer:
            return 0, max(longer, key=len)
        shorter = [k for k in keys if len(k) < len(prompt) and prompt[: len(k)] == k]
        if shorter:
            best = max(shorter, key=len)
            return len(best), best
        at = bisect.bisect_left(keys, prompt)
        best, source = 0, None
        for key in keys[max(at - 1, 0) : at + 1]:
            common = common_length(key, prompt)
            if common > best:
                best, source = common, key
        return best, source


@dataclasses.dataclass
class TriePolicy(LongestPrefixLRU):
    """`PrefixCacheManager._search` / `fetch_cache` (prefix_cache.py:117-221) as the scheduler reports it, for caches
    it can trim: walk the prompt down a trie of the held keys (prompt + completion); where the walk stops, the key
    ending there, if any ("shorter": only there, not a shorter key further up); a prompt walked whole is an exact key
    or a longer key's prefix, both reported whole (a hit touches the key, a longer one does not)."""

    def expected_reuse(self, prompt: Sequence[int]) -> tuple[int, tuple[int, ...] | None]:
        prompt = tuple(prompt)
        walked = max((common_length(key, prompt) for key in self.held), default=0)
        if walked == len(prompt):
            return len(prompt), (prompt if prompt in self.held else None)
        head = prompt[:walked]
        return (walked, head) if walked and head in self.held else (0, None)


@contextlib.contextmanager
def planted(mode: str) -> Iterator[None]:
    """Each mode's own lookup told one token more than it matched: a prefix hit returns the cached layers with one
    prompt token fewer left to compute (the cache holds one token less than the scheduler assumes)."""
    from vllm_mlx import memory_cache, prefix_cache

    def one_more(own):
        def lookup(self, *args):
            cache, remaining = own(self, *args)
            if cache is not None and len(remaining) > 1:
                remaining = remaining[1:]
            return cache, remaining

        return lookup

    target = {
        "memory": (memory_cache.MemoryAwarePrefixCache, "fetch"),
        "legacy": (prefix_cache.PrefixCacheManager, "fetch_cache"),
        "paged": (prefix_cache.BlockAwarePrefixCache, "fetch_cache"),
    }[mode]
    with mock.patch.object(*target, one_more(getattr(*target))):
        yield


@contextlib.contextmanager
def full_hit_fixed() -> Iterator[None]:
    """The full-hit finding's fix, to show it is the only fault and to give the planted controls a sound engine: a
    legacy or paged hit that leaves no prompt token to compute is handled as the scheduler handles the memory-aware
    cache's ("exact": the cache dropped, the prompt prefilled) instead of re-feeding the last prompt token."""
    from vllm_mlx.scheduler import Scheduler

    own = Scheduler.add_request

    def add_request(self, request):
        own(self, request)
        if request.remaining_tokens is not None and not request.remaining_tokens and request.cache_hit_type == "hit":
            request.cache_hit_type = "exact"

    with mock.patch.object(Scheduler, "add_request", add_request):
        yield
