"""What the smaller MLX servers' prefix-cache adapters share: damaging a cache file the way a disk or a copy does, and
reading a stored cache entry as attended (one probe token fed to a copy) against the uncached oracle.

Used by `prefix_yunshu`, `prefix_locals`, `prefix_mlx_textgen` and `prefix_mlx_openai_server`, each running in its
package's own environment; imports NumPy and MLX only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

DAMAGES = ("truncated", "flipped byte")


def array_offset(raw: bytes, values: np.ndarray) -> int:
    """Where `values`' bytes (its first 16, or all when shorter) start inside a file's bytes; a ValueError naming
    `values` when they are not there (a file that stores them in another form)."""
    needle = np.ascontiguousarray(values).tobytes()[:16]
    at = raw.find(needle) if needle else -1
    if at < 0:
        raise ValueError(f"values: {values.dtype} bytes not found in the file ({len(raw)} bytes)")
    return at


def damage(path: Path, kind: str, values: np.ndarray | None = None) -> str:
    """Damage `path` in place as a disk or an interrupted copy does; returns what was done, for the failure message.

    truncated: the file cut to half its length. flipped byte: one bit of the exponent of a stored float flipped
    (bit 6 of its most significant byte: the value scaled by 2**±64 or so); `values` (an array the file stores)
    locates the data, else the byte at two thirds of the file is flipped."""
    if kind not in DAMAGES:
        raise ValueError(f"kind: expected one of {DAMAGES}, got {kind!r}")
    raw = bytearray(path.read_bytes())
    if kind == "truncated":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
        return f"{path.name} truncated from {len(raw)} to {len(raw) // 2} bytes"
    if values is not None:
        width = values.dtype.itemsize
        at = array_offset(bytes(raw), values) + width - 1  # little-endian: the last byte holds sign and exponent
    else:
        at = 2 * len(raw) // 3
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))
    return f"{path.name}: bit 6 of byte {at} of {len(raw)} flipped"


def probe_logprobs(net, cache: Sequence, probe: int) -> np.ndarray:
    """Log-probabilities after feeding `probe` to `cache` (the caller passes a copy: the cache is advanced)."""
    logits = net(mx.array([[probe]], dtype=mx.int32), cache=list(cache))[0, -1].astype(mx.float32)
    rows = logits - mx.logsumexp(logits)
    mx.eval(rows)
    return np.array(rows)


def entry_gap(net, oracle, cache: Sequence, key: Sequence[int], probe: int = 0) -> float:
    """max |log p| difference between a stored entry fed one probe token and an uncached forward of key + probe."""
    served = probe_logprobs(net, cache, probe)
    want = np.array(oracle.rows([*key, probe])[-1])
    return float(np.max(np.abs(served - want)))


def trie_entries(node: dict) -> list[tuple[tuple[int, ...], Any]]:
    """(tokens, value) for every value a token trie of nested dicts holds under ``"__value__"`` keys (mlx-lm's
    `PromptTrie` layout, which locals and mlx-openai-server keep)."""
    found: list[tuple[tuple[int, ...], Any]] = []
    stack: list[tuple[tuple[int, ...], dict]] = [((), node)]
    while stack:
        key, here = stack.pop()
        for token, child in here.items():
            if token == "__value__":
                found.append((key, child))
            else:
                stack.append(((*key, token), child))
    return found
