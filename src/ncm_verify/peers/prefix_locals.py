"""locals 0.2.1's prefix caches under the prefix-cache machine: its own batching engine, chain cache and disk tier.

What runs is the package's own code: `HybridBatchEngine.serve` (``locals/hybrid_batch.py``: continuous batching;
each request starts from ``lru.fetch_nearest_cache`` on its prompt but the last token, each finished row is stored
under the tokens it holds, a "system" checkpoint is stored in memory and saved to disk), `chain_cache` (mlx-lm's
LRUPromptCache with locals' ``insert_cache``) and `DiskPromptCache` (mlx-lm ``save_prompt_cache`` safetensors plus a
``<sha1>.tokens.json`` per snapshot, read back by ``restore`` into the LRU when a prompt starts with a saved one). The
adapter does what ``locals/service.py`` does around them (lines 423-530): builds the engine and the caches (the disk
folder named as service.py names it, ``<model>--<dtype>--<_weights_fingerprint>``), wraps each request in a
``packed.Request`` with an endless controller (``ignore_eos``), and gives each prompt of 4 tokens or more a "system"
checkpoint at half its length (the server puts one at the end of the system message). Left out: ``Runtime.load``'s
fused Metal kernels and tuning (the model is mlx-lm's ``load``), the HTTP layer and chat templates. The engine reports
no log-probabilities: tokens are compared, and `audit` reads every stored entry as attended.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ncm_verify.peers.prefix_engines import EngineModel, Served
from ncm_verify.peers.prefix_peer_files import entry_gap, trie_entries

LRU_KEY = "locals"
"""The model key service.py hands ``serve`` (its default)."""


class LocalsEngine:
    name = "locals 0.2.1"
    supports = frozenset({"batch", "restart", "persist", "fail"})

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="locals-prompts-"))
        self.saved: dict[tuple[int, ...], tuple[int, ...]] = {}
        """A saved system prefix -> the prompt that saved it (what a persisted key's request looks like)."""
        self.engine = None

    def start(self, model: EngineModel, capacity: int) -> None:
        from locals.service import _weights_fingerprint
        from mlx_lm import load

        self.model, self.capacity = model, capacity
        self.net, self.tokenizer = load(str(model.path))[:2]
        name = str(model.path).strip("/").replace("/", "--")[-80:]
        tag = f"{name}--{model.dtype}--{_weights_fingerprint(str(model.path))}"  # service.py's folder name
        self.disk_dir = self.root / tag
        self._fresh()

    def _fresh(self) -> None:
        """A server process as service.py starts one: a new engine, an empty prompt cache, the disk folder read."""
        from locals.hybrid_batch import DiskPromptCache, HybridBatchEngine, chain_cache

        self.engine = HybridBatchEngine(self.net, self.tokenizer, n_slots=4)
        self.engine.disk = DiskPromptCache(self.disk_dir, 4.0)
        self.lru = chain_cache(max_size=self.capacity, max_bytes=1 << 40)

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        from locals.engine import Controller
        from locals.packed import Request

        class Endless(Controller):  # service.py's ignore_eos controller
            eos_ids = ()

        requests = []
        for prompt in prompts:
            request = Request([int(t) for t in prompt], Endless(), max_tokens)
            request.checkpoints = [(len(prompt) // 2, "system")] if len(prompt) >= 4 else []
            request.temp = 0.0
            requests.append(request)
            if len(prompt) >= 4:
                self.saved.setdefault(tuple(request.prompt[: len(prompt) // 2]), tuple(request.prompt))
        pending = list(requests)

        def source(block):
            nonlocal pending
            arrived, pending = pending, []
            return arrived

        self.engine.serve(source, temp=0.0, lru=self.lru, lru_key=LRU_KEY)
        served = []
        for request in requests:
            if request.finish.startswith(("error", "invalid", "cancelled")):
                raise RuntimeError(f"locals finished the request {request.prompt} with {request.finish!r}")
            served.append(
                Served(tuple(request.prompt), tuple(request.out), None, int(getattr(request, "cached_tokens", 0)))
            )
        return served

    def fail(self) -> str:
        """An empty prompt through `HybridBatchEngine.serve`: finished with an error (or an exception: the server's
        error reply); returns the answer. Tokens served for it instead are rule 6's failure."""
        try:
            self.serve([()], 2)
        except Exception as error:  # noqa: BLE001 - what the server turns into an error reply
            return f"serve raised {error!r}"
        raise AssertionError("rule 6: an empty prompt was served, not refused")

    def entries(self) -> list[tuple[tuple[int, ...], Any]]:
        """(key, mlx-lm CacheEntry) for every entry the prompt cache holds."""
        return trie_entries(self.lru._trie._trie.get(LRU_KEY, {}))

    def audit(self, call: str) -> None:
        """Every entry the prompt cache holds attends as its key (a copy fed one probe token against an uncached
        forward of key + probe): what the next request continuing it is served from."""
        from ncm_verify.peers.prefix_engines import Uncached
        from ncm_verify.tolerances import SERVED_LOGPROBS

        if not hasattr(self, "_oracle"):
            self._oracle = Uncached(self.model)
        for key, entry in self.entries():
            gap = entry_gap(self.net, self._oracle, copy.deepcopy(entry.prompt_cache), key)
            assert gap <= SERVED_LOGPROBS[self.model.dtype], (
                f"the {entry.cache_type} entry stored under {list(key)} attends {gap:.3g} nats off an uncached forward "
                f"of its key (offsets {[getattr(c, 'offset', None) for c in entry.prompt_cache]})\n  call: {call}"
            )

    def persist(self, folder: Path) -> list[tuple[int, ...]]:
        """The disk tier's files (every saved system prompt) copied to `folder`; returns the prompts that saved them
        (a request starting with a saved prefix is what restores one)."""
        folder.mkdir(parents=True, exist_ok=True)
        keys = []
        for file in sorted(self.disk_dir.glob("*")):
            shutil.copy2(file, folder / file.name)
        for tokens in self.engine.disk.index.values():
            if tokens in self.saved:
                keys.append(self.saved[tokens])
        return keys

    def restore(self, folder: Path) -> None:
        """`folder`'s files as the disk tier, then a server restart (the folder is read when the server starts)."""
        shutil.rmtree(self.disk_dir, ignore_errors=True)
        shutil.copytree(folder, self.disk_dir)
        self._fresh()

    def restart(self) -> None:
        self._fresh()

    def close(self) -> None:
        self.engine = None
        shutil.rmtree(self.root, ignore_errors=True)
