"""mlx-lm 0.32.2's prefix caches as its users serve them, behind `PrefixEngine` adapters (`make verify-peers
PEERS=mlx-lm`; `mlx_peer_properties/test_mlx_lm.py`).

`MlxLmServer` starts the real ``mlx_lm server`` on 127.0.0.1 (a free port, a bounded lifetime) on a model folder and
sends ``/v1/completions`` requests: the prompt as words of the folder's word-level vocabulary (ids pass unchanged),
``temperature`` 0, ``logprobs`` true; the reused count is the server's ``usage.prompt_tokens_details.cached_tokens``
(``len(prompt) - len(rest)`` after ``LRUPromptCache.fetch_nearest_cache``, server.py:843-846). Several prompts are
sent at once from threads: the server's BatchGenerator serves them as one batch. `MlxLmPromptFiles` runs mlx-lm's own
``cache_prompt`` and ``generate`` entry points in-process (``save_prompt_cache``/``load_prompt_cache``) and records
what ``generate`` streams.

Imports the standard library and `prefix_engines` at module level; mlx-lm inside the adapters (its environment only).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from ncm_verify.peers.prefix_engines import EngineModel, LongestPrefixLRU, Served, text_of

LIFETIME_S = 600
"""A server this adapter starts is killed after this long whatever happens to the test process."""
READY_S = 90
REQUEST_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlxLmServer:
    """The real ``mlx_lm server`` process; `draft` (a model folder) turns on its ``--draft-model`` path."""

    name = "mlx-lm 0.32.2 mlx_lm.server"

    def __init__(self, draft: EngineModel | None = None, extra: Sequence[str] = (), planted: bool = False):
        self.draft, self.extra, self.planted = draft, tuple(extra), planted
        self.supports = frozenset({"batch", "restart", "fail"} | ({"speculative"} if draft else set()))
        if draft:  # with a draft model the server serves one request at a time (server.py:460)
            self.supports -= {"batch"}
        self.process: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="mlx-lm-server-", suffix=".log", delete=False)

    def start(self, model: EngineModel, capacity: int) -> None:
        self.model, self.capacity = model, capacity
        self.port = free_port()
        server = ["-m", "ncm_verify.peers.mlx_lm_serve", "--planted"] if self.planted else ["-m", "mlx_lm", "server"]
        command = [sys.executable, *server, "--model", str(model.path), "--host", "127.0.0.1",
                   "--port", str(self.port), "--prompt-cache-size", str(capacity), "--max-tokens", "64",
                   *(("--draft-model", str(self.draft.path), "--num-draft-tokens", "2") if self.draft else ()),
                   *self.extra]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=dict(os.environ))
        self.killer = threading.Timer(LIFETIME_S, self.process.kill)
        self.killer.daemon = True
        self.killer.start()
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlx_lm server exited ({self.process.returncode}): {self.tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=2):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"mlx_lm server not ready in {READY_S} s: {self.tail()}")

    def tail(self, lines: int = 12) -> str:
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])

    def policy(self, documented: bool = False) -> LongestPrefixLRU:
        """LRUPromptCache as documented (models/cache.py:1652-1715): the nearest entry, exact, a longer one trimmed
        to the common prefix (leaving one prompt token) or a shorter prefix; keys are prompt + completion; a
        trimmable insert drops its stored prefixes; `--prompt-cache-size` entries, least recently inserted out; the
        prompt's head stored first (server.py:940-969, the end of the segment generate.py:1701-1703 splits off).
        Unless `documented`, a one-token stored prefix is not reused (PromptTrie.search, cache.py:1578 `last_index >
        0`): a finding of its own (`test_a_stored_one_token_prefix_is_reused`), left out here so that the
        machine's runs judge the rest."""
        return LongestPrefixLRU(
            self.capacity,
            window=self.model.window,
            recurrent=self.model.family == "hybrid",
            checkpoint_head=True,
            shortest_prefix=1 if documented else 2,
        )

    def post(self, body: dict) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_S) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            return {"error": error.read().decode(errors="replace"), "status": error.code}
        except (OSError, http.client.HTTPException) as error:  # closed without a reply, refused, timed out
            return {"error": f"no reply: {error!r}", "status": None}

    def complete(self, prompt: Sequence[int], max_tokens: int, **fields) -> Served:
        """One ``/v1/completions`` request (`fields` added to its body: a seed sends it down the sequential path)."""
        body = {"prompt": text_of(prompt), "max_tokens": max_tokens, "temperature": 0.0, "logprobs": True, **fields}
        reply = self.post(body)
        if "choices" not in reply:
            raise AssertionError(f"mlx_lm server refused {body}: {reply}\n  server log: {self.tail()}")
        content = reply["choices"][0]["logprobs"]["content"]
        details = reply.get("usage", {}).get("prompt_tokens_details") or {}
        return Served(
            tuple(prompt),
            tuple(int(c["id"]) for c in content),
            tuple(float(c["logprob"]) for c in content),
            details.get("cached_tokens"),
        )

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        prompts = [tuple(int(t) for t in p) for p in prompts]
        if len(prompts) == 1:
            return [self.complete(prompts[0], max_tokens)]
        results: list = [None] * len(prompts)

        def one(i: int) -> None:
            try:
                results[i] = self.complete(prompts[i], max_tokens)
            except BaseException as error:  # re-raised below, in the test's thread
                results[i] = error

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(REQUEST_S + 5)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return results

    def fail(self) -> str:
        """An empty prompt: the server must refuse it (an error reply) and keep serving."""
        return json.dumps(self.post({"prompt": "", "max_tokens": 2, "temperature": 0.0}))

    def restart(self) -> None:
        self.close()
        self.start(self.model, self.capacity)

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.killer.cancel()
            self.process = None


def flip_first_key_bit(file: Path) -> str:
    """Flip the top exponent bit of the first value of the first array a prompt-cache file names (safetensors:
    8-byte header length, JSON header, data); returns the array's name."""
    raw = bytearray(file.read_bytes())
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    name = sorted(k for k in header if k != "__metadata__" and header[k]["dtype"] in ("F32", "BF16"))[0]
    start = 8 + length + header[name]["data_offsets"][0]
    raw[start + (3 if header[name]["dtype"] == "F32" else 1)] ^= 0x40
    file.write_bytes(bytes(raw))
    return name


class MlxLmPromptFiles:
    """mlx-lm's prompt-cache files as a user runs them: ``mlx_lm.cache_prompt`` writes the cache of a prompt,
    ``mlx_lm.generate --prompt-cache-file`` continues it with the rest of a later prompt. Both are run in-process
    through their own ``main`` (argv as on the command line); what ``generate`` streams is recorded. Without a file, a
    prompt is generated from scratch (``mlx_lm.generate`` without one)."""

    name = "mlx-lm 0.32.2 prompt-cache files"
    supports = frozenset({"persist", "restart"})

    restored: tuple[Path, tuple[int, ...]] | None = None
    last: tuple[int, ...] | None = None

    def start(self, model: EngineModel, capacity: int) -> None:
        self.model, self.restored, self.last = model, None, None

    def run(self, module: str, *argv: str) -> list[tuple[int, float]]:
        """``mlx_lm.<module>.main()`` with `argv`; the (token, log-probability) pairs ``stream_generate`` yielded."""
        import importlib
        import io
        from unittest import mock

        generating = importlib.import_module("mlx_lm.generate")  # the module (``mlx_lm.generate`` is also a function)
        main = importlib.import_module(f"mlx_lm.{module}").main
        own, seen = generating.stream_generate, []

        def recording(*args, **kwargs):
            for response in own(*args, **kwargs):
                seen.append((int(response.token), float(response.logprobs[response.token].item())))
                yield response

        with (
            mock.patch.object(generating, "stream_generate", recording),
            mock.patch.object(sys, "argv", [f"mlx_lm.{module}", *argv]),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            main()
        return seen

    def serve(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Served]:
        served = []
        for prompt in map(tuple, prompts):
            argv = ["--model", str(self.model.path), "--max-tokens", str(max_tokens), "--temp", "0"]
            reused = 0
            if (
                self.restored
                and prompt[: len(self.restored[1])] == self.restored[1]
                and len(prompt) > len(self.restored[1])
            ):
                reused = len(self.restored[1])
                argv += ["--prompt-cache-file", str(self.restored[0])]
            seen = self.run("generate", *argv, "--prompt", text_of(prompt[reused:]))
            served.append(Served(prompt, tuple(t for t, _ in seen), tuple(lp for _, lp in seen), reused))
            self.last = prompt
        return served

    def persist(self, folder: Path) -> list[tuple[int, ...]]:
        """The last prompt served, cached by ``mlx_lm.cache_prompt`` into ``folder/prompt.safetensors``; its tokens
        noted in ``folder/adapter/`` (the user's own note of what the file holds, never damaged)."""
        folder.mkdir(parents=True, exist_ok=True)
        prompt = self.last or (0, 1)
        file = folder / "prompt.safetensors"
        self.run("cache_prompt", "--model", str(self.model.path), "--prompt", text_of(prompt),
                 "--prompt-cache-file", str(file))  # fmt: skip
        (folder / "adapter").mkdir(exist_ok=True)
        (folder / "adapter" / "tokens.json").write_text(json.dumps(list(prompt)))
        return [prompt]

    def restore(self, folder: Path) -> None:
        """The file's first use (one token after it, as ``generate --prompt-cache-file`` would): raises what mlx-lm
        raises for a file it refuses."""
        file, tokens = (
            folder / "prompt.safetensors",
            tuple(json.loads((folder / "adapter" / "tokens.json").read_text())),
        )
        self.run("generate", "--model", str(self.model.path), "--max-tokens", "1", "--temp", "0",
                 "--prompt-cache-file", str(file), "--prompt", text_of((0,)))  # fmt: skip
        self.restored = (file, tokens)

    def restart(self) -> None:
        self.restored = None

    def close(self) -> None:
        self.restored = None


@contextlib.contextmanager
def running_server(capacity: int = 4, **options):
    """An `MlxLmServer(**options)` started on a fresh attention model folder in a temporary folder, closed after: the
    reproduction scripts' set-up."""
    from ncm_verify.peers.prefix_engines import attention_model

    with tempfile.TemporaryDirectory() as folder:
        server = MlxLmServer(**options)
        server.start(attention_model(Path(folder) / "attention"), capacity)
        try:
            yield server
        finally:
            server.close()
