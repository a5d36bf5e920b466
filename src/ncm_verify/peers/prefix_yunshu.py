"""yunshu 0.1.5's prefix caches under the prefix-cache machine: its own engine, memory tier, exact-match tier and disk
(SSD) tier.

What runs is the package's own code: `BatchedEngine` (``yunshu_engine/batched_engine.py``: ``start`` loads the model
folder, ``generate`` a text prompt with ``logprobs=True`` reports each token's log-probability and ``cached_tokens``),
its `KVPrefixCache` (``kv_prefix_cache.py``: hash-chained entries in memory, an SSD tier of files per block, enabled
by the model folder's ``model_settings.json`` as a user enables it) and its `PromptCacheManager` (the exact-match
tier). The adapter does three things the engine does not do on Linux by itself, each stated:

* ``utils/hardware.get_total_memory_bytes`` reads the machine's memory with ``os.sysconf`` (it asks macOS' sysctl,
  falls back to 8 GB on Linux, and yunshu then applies its 8-GB-Mac defaults: 4-bit KV quantisation with group 64,
  which fails every request on a model whose head dimension is below 64, and is lossy on the others);
* the memory tier's ``_min_prefix`` is set to 2 (``BatchedEngine`` builds it with ``min_prefix_length=32``; the class
  takes any value): the machine's prompts are at most 20 tokens. Prompts this short reach the exact-hash and scan
  lookups, not the 64-token hash-chain blocks, which are not judged here;
* a restart rebuilds the memory tiers as ``BatchedEngine.__init__`` and ``_apply_settings`` build them (the loaded
  model is kept: a process restart costs a minute here) and keeps the SSD folder.

Requests are text (``text_of`` the token ids: the word-level tokenizer encodes them back exactly, no chat template).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncm_verify.peers.prefix_engines import EngineModel, Served, text_of


def _real_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


_LOOP = asyncio.new_event_loop()
_STARTED: dict[tuple[Path, int], tuple[object, Path]] = {}
"""(model folder, capacity) -> a started BatchedEngine and its settings root: started once a process (a minute on two
shared cores); every `start` hands it out with empty memory tiers and an empty SSD folder, as a fresh process has."""


class YunshuEngine:
    name = "yunshu 0.1.5"
    supports = frozenset({"restart", "persist", "fail"})

    root: Path
    """The started engine's folder: its model folder (with the settings) and its SSD tier."""

    def __init__(self):
        self.engine: Any = None

    def start(self, model: EngineModel, capacity: int) -> None:
        self.model, self.capacity = model, capacity
        if (model.path, capacity) not in _STARTED:
            _STARTED[model.path, capacity] = (self._launch(model, capacity), self.root)
        self.engine, self.root = _STARTED[model.path, capacity]
        self.ssd = self.root / "ssd"
        shutil.rmtree(self.ssd, ignore_errors=True)
        self._memory_tiers()

    def _launch(self, model: EngineModel, capacity: int):
        import yunshu_engine.utils.hardware as hardware

        hardware.get_total_memory_bytes = _real_memory
        hardware._cached_hw = None
        from yunshu_engine.batched_engine import BatchedEngine

        self.root = Path(tempfile.mkdtemp(prefix="yunshu-"))
        folder = self.root / "model"  # the model's files beside the settings a user writes there
        folder.mkdir()
        for file in model.path.iterdir():
            (folder / file.name).symlink_to(file)
        settings = {"ssd_cache_enabled": True, "ssd_cache_dir": str(self.root / "ssd")}
        (folder / "model_settings.json").write_text(json.dumps(settings))
        os.environ["YUNSHU_PREFIX_MAX_ENTRIES"] = str(capacity)
        engine = BatchedEngine(model_name=str(folder))
        _LOOP.run_until_complete(engine.start())
        return engine

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        return [self._request(tuple(int(t) for t in p), max_tokens) for p in prompts]

    def _request(self, prompt: tuple[int, ...], max_tokens: int) -> Served:
        out = _LOOP.run_until_complete(
            self.engine.generate(text_of(prompt), max_tokens=max_tokens, temperature=0.0, logprobs=True)
        )
        if out.finish_reason == "error" or out.logprobs is None:
            raise RuntimeError(f"yunshu refused {list(prompt)}: {out.error or 'no log-probabilities'}")
        tokens = tuple(int(item["token_id"]) for item in out.logprobs)
        logprobs = tuple(float(item["logprob"]) for item in out.logprobs)
        return Served(prompt, tokens, logprobs, int(out.cached_tokens or 0))

    def fail(self) -> str:
        """An empty prompt through `generate`: an error answer (``finish_reason`` "error", or an exception: the
        server's error reply) is returned. yunshu 0.1.5 answers it instead (one token substituted for the prompt):
        `NotRefused`. It refuses none of the others tried either (max_tokens 0 or -1: no tokens, finish "length";
        temperature -1, top_p 2: served)."""
        from ncm_verify.peers.prefix_engines import NotRefused

        try:
            out = _LOOP.run_until_complete(self.engine.generate("", max_tokens=2, temperature=0.0, logprobs=True))
        except Exception as error:  # noqa: BLE001 - what the server turns into an error reply
            return f"generate raised {error!r}"
        if out.finish_reason == "error":
            return f"finish_reason 'error': {out.error}"
        raise NotRefused(
            f"{self.name} refuses no request this adapter can send: an empty prompt is answered ({out.prompt_tokens} "
            f"prompt token substituted, {out.completion_tokens} generated, finish {out.finish_reason!r}); max_tokens 0 "
            "or -1, temperature -1 and top_p 2 are answered too"
        )

    def _memory_tiers(self) -> None:
        """A process restart's memory tiers: as BatchedEngine.__init__ and _apply_settings build them (on yunshu's MLX
        executor thread, which owns the arrays: the old tier's close flushes its SSD writer there)."""
        from yunshu_engine.mlx_executor import get_mlx_executor

        get_mlx_executor().submit(self._rebuild).result()

    def _rebuild(self) -> None:
        from yunshu_engine import settings
        from yunshu_engine.kv_prefix_cache import KVPrefixCache
        from yunshu_engine.prompt_cache import PromptCacheManager

        engine = self.engine
        engine._kv_prefix_cache.close()
        engine._kv_prefix_cache = KVPrefixCache(
            max_entries=settings.get("YUNSHU_PREFIX_MAX_ENTRIES"),
            hot_limit=settings.get("YUNSHU_PREFIX_HOT_LIMIT") or None,
            min_prefix_length=32,
        )
        engine._prompt_cache = PromptCacheManager(max_entries=256, max_memory_mb=512.0, ttl_seconds=3600.0)
        engine._apply_settings()
        engine._kv_prefix_cache._min_prefix = 2

    def restart(self) -> None:
        self._memory_tiers()

    def persist(self, folder: Path) -> list[tuple[int, ...]]:
        """The SSD tier flushed (``flush_to_ssd``) and copied to `folder`; returns the memory tier's keys (the
        prompts whose blocks it wrote)."""
        from yunshu_engine.mlx_executor import get_mlx_executor

        cache = self.engine._kv_prefix_cache
        get_mlx_executor().submit(cache.flush_to_ssd).result()  # the executor thread owns the arrays
        get_mlx_executor().submit(cache._ssd_cache.close).result()  # its background writer drained to disk
        keys = [tuple(int(t) for t in prompt.tolist()) for prompt in cache._prompts]
        shutil.copytree(self.ssd, folder, dirs_exist_ok=True)
        return keys

    def restore(self, folder: Path) -> None:
        """`folder` as the SSD tier, then the memory tiers rebuilt (they read the SSD folder)."""
        shutil.rmtree(self.ssd, ignore_errors=True)
        shutil.copytree(folder, self.ssd)
        self._memory_tiers()

    def close(self) -> None:
        """The engine stays started for the next `start` (`_STARTED`); its tiers are emptied there."""
        self.engine = None
