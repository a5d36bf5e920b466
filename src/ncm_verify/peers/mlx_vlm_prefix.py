"""mlx-vlm 0.7.10's automatic prefix caching (`mlx_vlm/apc.py`), served through its server engine's `BatchGenerator`.

The server (`mlx_vlm/server/generation.py`) builds one `BatchGenerator` over the language model with the process's
`APCManager`, calls ``apc.prepare_prefill`` and inserts each request's token ids with its input embeddings and a
semantic salt (`apc.semantic_extra_hash` of tenant, image, audio, video, model and processor): this adapter does the
same for text requests. `APCCoordinator` picks a mode from the model's caches (`model_apc_mode`): ``block`` (every
layer a `KVCache`: full blocks of the prompt but its last token, found by chained hashes, stored after prefill) or
``exact`` (sliding-window or recurrent layers: a snapshot of the whole cache at the prompt's last token but one,
reused when a later prompt extends it). The folder's model is loaded by mlx-vlm's own `load` (its ``llama`` and
``qwen3_next`` text models). `reused` is the prompt response's ``cached_tokens``; log-probabilities are the engine's
``token_logprob``. Two settings are lowered so that the machine's short prompts take part, each one of the
manager's own: blocks of 4 tokens (``APC_BLOCK_SIZE``, 16 by default) and exact snapshots from 2 tokens
(``APC_EXACT_MIN_TOKENS``, 16).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from ncm_verify.peers.prefix_engines import EngineModel, Served

PACKAGE = "mlx-vlm"
VERSION = "0.7.10"
BLOCK = 4
BLOCKS_PER_ENTRY = 4
MIN_SNAPSHOT = 2
"""The block pool holds `capacity` x this many blocks (a prompt of the machine spans up to 5): fills evict."""


class MlxVlmApc:
    """A `PrefixEngine` over mlx-vlm's server engine (`BatchGenerator` with an `APCManager`)."""

    name = f"mlx-vlm {VERSION} APC (server BatchGenerator)"

    def __init__(self, blocks_per_entry: int = BLOCKS_PER_ENTRY, disk: bool = False):
        """`blocks_per_entry`: the block pool's size per entry of capacity (large: nothing is evicted). `disk`: with
        the disk tier (the server's default once APC is on, ``APC_DISK_ENABLED``), which outlives a restart."""
        self.engine: Any = None
        self.manager: Any = None
        self.blocks_per_entry = blocks_per_entry
        self.disk_root = Path(tempfile.mkdtemp(prefix="apc-disk-")) if disk else None
        self.supports = frozenset({"batch", "restart", "fail", *({"persist"} if disk else ())})

    def start(self, model: EngineModel, capacity: int) -> None:
        from mlx_vlm.utils import load

        self.model, self.capacity = model, capacity
        self.served: dict[tuple[int, ...], None] = {}
        self.fresh: Any = None
        self.memo: dict[tuple[int, ...], Any] = {}
        self.net, self.processor = load(str(model.path))
        self.restart()

    def uncached_rows(self, tokens: Sequence[int]):
        """The oracle in mlx-vlm's own implementation of the family: a fresh copy of the model (never the engine's),
        one full forward, float32 log-softmax per position ``[T, V]`` (mlx-lm's classes differ by roundoff)."""
        import mlx.core as mx
        from mlx_vlm.utils import load

        if self.fresh is None:
            self.fresh = load(str(self.model.path))[0]
        key = tuple(int(t) for t in tokens)
        if key not in self.memo:
            logits = self.fresh.language_model(mx.array([key])).logits[0].astype(mx.float32)
            self.memo[key] = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            mx.eval(self.memo[key])
        return self.memo[key]

    @property
    def mode(self) -> str | None:
        from mlx_vlm.apc import model_apc_mode

        return model_apc_mode(self.net.language_model)

    def policy(self):
        """APC's documented reuse (apc.py `apc_lookup_plan`): block mode, the prompt's whole blocks (all its tokens
        but the last looked up) along a chain stored from earlier prompts' whole blocks, no eviction modelled (the
        rule-2 node runs with a pool too large to evict); exact mode, the snapshot at an earlier prompt's last token
        but one (its guard token; the whole prompt where that is under ``APC_EXACT_MIN_TOKENS`` and nothing was reused,
        generate/ar.py:2393-2418), kept for `capacity` prompts (``checkpoint_entries``, least recent first out, a hit
        counting as use: apc.py:3381), reused by any prompt extending its tokens by at least one."""
        from ncm_verify.peers.prefix_engines import BlockPrefixLRU, SnapshotLRU

        if self.mode == "block":
            return BlockPrefixLRU(10**9, key_holds_completion=False, drop_prefixes=False, block=BLOCK)
        return SnapshotLRU(self.capacity, trimmable=False, touch_on_hit=True, drop_prefixes=False, minimum=MIN_SNAPSHOT)

    def restart(self) -> None:
        """A new manager and engine: what a restarted server holds (its disk tier, where configured, stays)."""
        from mlx_vlm.apc import APCManager, semantic_extra_hash

        self.close()
        manager = APCManager(
            disk=self.disk_store(),
            num_blocks=self.capacity * self.blocks_per_entry,
            block_size=BLOCK,
            overrides={"checkpoint_entries": self.capacity},
        )
        manager.exact_cache_min_tokens = MIN_SNAPSHOT
        self.manager = manager
        self.engine = self.generator()
        self.salt = semantic_extra_hash(
            tenant=None, image_hash=0, media={"audio": None, "video": None}, model=self.net.language_model,
            processor=self.processor,
        )  # fmt: skip

    def generator(self):
        """A `BatchGenerator` over the current APC manager, as the server's generation thread makes one."""
        from mlx_vlm.generate.ar import BatchGenerator

        processor = self.processor
        if not hasattr(processor, "tokenizer"):  # a bare tokenizer: the engine reads .tokenizer.stopping_criteria
            processor = types.SimpleNamespace(tokenizer=processor)
        return BatchGenerator(self.net.language_model, processor, apc_manager=self.manager, compute_logprobs=True)

    def fail(self) -> str:
        """An empty prompt inserted as the server's generation thread inserts a request (its tokens, its embeddings).
        Its step raises; what follows is the server's recovery (server/generation.py:1885-1897: every active request
        answered with the error, the generator dropped, a new one made over the same APC manager). Returns the
        error; a step that serves the empty prompt instead is rule 6's failure."""
        import mlx.core as mx

        embedded = self.net.get_input_embeddings(mx.array([[]], dtype=mx.int32)).to_dict()
        kwargs = {**{k: v for k, v in embedded.items() if v is not None}, "_apc_semantic_hash": self.salt}
        try:
            self.engine.insert([[]], max_tokens=2, prompt_kwargs=[kwargs])
            for _ in range(64):  # a bound
                self.engine.next()
                if not self.engine.has_work:
                    break
        except Exception as error:  # noqa: BLE001 - the server catches every exception of its generation step
            self.engine = self.generator()
            return f"its step raised {error!r}; the server's recovery: a new BatchGenerator, the same APC manager"
        raise AssertionError("rule 6: an empty prompt was served, not refused")

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        import mlx.core as mx

        engine = self.engine
        prompts = [[int(t) for t in p] for p in prompts]
        if engine.apc is not None:
            for prompt in prompts:
                engine.apc.prepare_prefill(len(prompt))
        kwargs = []
        for prompt in prompts:
            embedded = self.net.get_input_embeddings(mx.array([prompt])).to_dict()
            kwargs.append({**{k: v for k, v in embedded.items() if v is not None}, "_apc_semantic_hash": self.salt})
        uids = engine.insert(prompts, max_tokens=max_tokens, prompt_kwargs=kwargs)
        tokens: dict[int, list[int]] = {uid: [] for uid in uids}
        logprobs: dict[int, list[float]] = {uid: [] for uid in uids}
        reused: dict[int, int] = {}
        for _ in range(len(prompts) * (max_tokens + 2) + 64):  # a bound, never reached by a sound engine
            progress, generated = engine.next()
            for response in progress or []:
                if getattr(response, "cached_tokens", None) is not None and response.uid in tokens:
                    reused[response.uid] = max(reused.get(response.uid, 0), int(response.cached_tokens))
            for response in generated:
                if response.token is not None and response.uid in tokens:
                    tokens[response.uid].append(int(response.token))
                    logprobs[response.uid].append(float(response.token_logprob))
            if not engine.has_work:
                break
        else:
            raise RuntimeError(f"{self.name}: requests unfinished after the step bound: {prompts}")
        self.served.update(dict.fromkeys(tuple(p) for p in prompts))
        return [Served(tuple(p), tuple(tokens[u]), tuple(logprobs[u]), reused.get(u, 0)) for p, u in zip(prompts, uids)]

    def disk_store(self):
        """The server's disk tier (`apc.from_env`): a `DiskBlockStore` under the namespace it names from the model
        path, adapter and KV quantization (`apc_disk_namespace`, server/app.py:919), or None."""
        if self.disk_root is None:
            return None
        from mlx_vlm.apc import DiskBlockStore, apc_disk_namespace

        return DiskBlockStore(self.disk_root, namespace=apc_disk_namespace(str(self.model.path)))

    def persist(self, folder) -> list[tuple[int, ...]]:
        """The disk tier's files after its queued writes finish, copied to `folder`; returns the prompts served
        since the start (what the tier may hold: it keeps prompt blocks and snapshots, not completions)."""
        self.manager.disk.flush()
        shutil.copytree(self.manager.disk.dir, Path(folder), dirs_exist_ok=True)
        return list(self.served)

    def restore(self, folder) -> None:
        """`folder`'s files as the disk tier of the (restarted) engine's namespace: what a server restarted on the
        same model path finds (the namespace hashes the path string, not the weights)."""
        if self.disk_root is None:
            raise ValueError("restore: this engine was made without its disk tier (MlxVlmApc(disk=True))")
        self.close()
        target = self.disk_root / "restored"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(Path(folder), target)
        store = self.disk_store()
        own = store.dir
        store.close()
        shutil.rmtree(own)
        target.rename(own)
        self.restart()

    def close(self) -> None:
        if self.engine is not None and callable(getattr(self.engine, "close", None)):
            self.engine.close()
        if self.manager is not None:
            self.manager.close()
        self.engine = self.manager = None


@contextlib.contextmanager
def planted() -> Iterator[None]:
    """APC's own caches with one known-wrong change each: the block hash drops its parent (a stored block matches
    after any other prefix), and an exact snapshot's lookup claims one prompt token more than it holds."""
    from mlx_vlm import apc

    own_hash, own_exact = apc._hash_tokens, apc.APCManager.lookup_exact_cache

    def hash_without_parent(parent, tokens, extra):
        return own_hash(0, tokens, extra)

    def one_more(self, token_ids, *args, **kwargs):
        cache, length = own_exact(self, token_ids, *args, **kwargs)
        return (cache, length + 1) if cache is not None and 0 < length < len(token_ids) - 1 else (cache, length)

    with mock.patch.object(apc, "_hash_tokens", hash_without_parent):
        with mock.patch.object(apc.APCManager, "lookup_exact_cache", one_more):
            yield
