"""mlx-textgen 0.2.1's prompt cache under the prefix-cache machine: its own model class and cache manager.

What runs is the package's own code: `LLMModel.generate` (``mlx_textgen/model_utils.py``: a batch of text prompts,
left-padded; ``create_inference_plan`` asks ``CacheManager.get_cache`` for the longest cached prefixes, after
generation ``CacheManager.save_cache`` writes ``cache_<n>.safetensors`` files and ``cached_prompts.json`` under
``~/.cache/mlx_textgen/prompt_cache/<model name>``, read back after a restart). The adapter changes two things, each
stated: ``model_utils.wired_limit`` (Metal's wired-memory limit: ``mx.metal.device_info()`` has no
``max_recommended_working_set_size`` off Metal, so every request raises ``KeyError`` on Linux) is a no-op context;
and the cache manager is built with ``min_tokens=2`` (its documented option; the default, 20, caches no prompt the
machine draws). ``HOME`` points into the adapter's folder (the cache lives under it). The engine reports each token's
log-probability after its sampling step (0.0 for every greedy token), so tokens are compared, and `audit` reads every
saved file as ``get_cache`` loads it. A restart builds the cache manager again (it reads ``cached_prompts.json``) and
keeps the loaded model.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncm_verify.peers.prefix_engines import EngineModel, Served, text_of
from ncm_verify.peers.prefix_peer_files import entry_gap


def no_wired_limit(model, streams=None):
    return contextlib.nullcontext()


class TextgenEngine:
    name = "mlx-textgen 0.2.1"
    supports = frozenset({"batch", "restart", "persist", "fail"})

    def __init__(self, home: Path | None = None):
        self.home = home or Path(tempfile.mkdtemp(prefix="mlx-textgen-home-"))
        self.llm: Any = None

    def start(self, model: EngineModel, capacity: int) -> None:
        import mlx_textgen.model_utils as model_utils

        model_utils.wired_limit = no_wired_limit
        os.environ["HOME"] = str(self.home)
        self.model, self.capacity = model, capacity
        self.config = dict(min_tokens=2, max_reprocess_tokens=250, max_capacity=capacity)
        self.llm = model_utils.LLMModel(str(model.path), cache_manage_config=self.config, verbose=False)

    @property
    def cache_dir(self) -> Path:
        return Path(self.llm.cache_manager.cache_dir)

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        from mlx_textgen.sampling_utils import SamplingParams

        os.environ["HOME"] = str(self.home)
        params = SamplingParams(temperature=0.0, max_completion_tokens=max_tokens)
        rows = [tuple(int(t) for t in p) for p in prompts]
        out = self.llm.generate([text_of(p) for p in rows], params)
        return [Served(p, tuple(int(t) for t in ids), None) for p, ids in zip(rows, out["token_ids"])]

    def fail(self) -> str:
        """An empty prompt through `LLMModel.generate`: an exception (the server's error reply); returns it. Tokens
        served for it instead are rule 6's failure."""
        try:
            self.serve([()], 2)
        except Exception as error:  # noqa: BLE001 - what the server turns into an error reply
            return f"generate raised {error!r}"
        raise AssertionError("rule 6: an empty prompt was served, not refused")

    def audit(self, call: str) -> None:
        """Every saved file, loaded by the package's own ``load_cache`` into an empty cache, attends as its key."""
        from mlx_textgen.cache_utils import load_cache

        from ncm_verify.peers.prefix_engines import Uncached
        from ncm_verify.tolerances import SERVED_LOGPROBS

        if not hasattr(self, "_oracle"):
            self._oracle = Uncached(self.model)
        for info in self.llm.cache_manager.cache_info:
            cache, _ = load_cache(str(self.cache_dir / f"{info.cache_id}.safetensors"), self.llm.get_empty_cache())
            held = cache[0].offset
            key = info.token_ids[:held]
            gap = entry_gap(self.llm.model, self._oracle, cache, key)
            assert gap <= SERVED_LOGPROBS[self.model.dtype], (
                f"the saved file {info.cache_id} (tokens {info.token_ids}, {held} held) attends {gap:.3g} nats off an "
                f"uncached forward of its first {held} tokens\n  call: {call}"
            )

    def _fresh_manager(self) -> None:
        from mlx_textgen.cache_utils import CacheManager

        os.environ["HOME"] = str(self.home)
        llm = self.llm
        llm._cache_manager = CacheManager(
            model_name=llm.model_real_name, is_vision=llm.is_vision, image_token_id=llm.image_token_id,
            extra_image_tokens=llm.extra_image_tokens, logger=llm._logger, **self.config,
        )  # fmt: skip

    def persist(self, folder: Path) -> list[tuple[int, ...]]:
        shutil.copytree(self.cache_dir, folder, dirs_exist_ok=True)
        return [tuple(info.token_ids) for info in self.llm.cache_manager.cache_info]

    def restore(self, folder: Path) -> None:
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        shutil.copytree(folder, self.cache_dir)
        self._fresh_manager()

    def restart(self) -> None:
        self._fresh_manager()

    def close(self) -> None:
        self.llm = None
        shutil.rmtree(self.home, ignore_errors=True)
