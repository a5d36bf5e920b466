"""`PrefixCache`: exact full-prefix reuse of per-layer K/V, byte-bounded LRU, and
checksummed safetensors persistence that never turns a bad file into a hit."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import struct
import tempfile
from pathlib import Path

import mlx.core as mx
import numpy as np

from ncm_verify.reference.ncm.masks import is_prefix_isolated
from ncm_verify.reference.ncm.model import NCM, fingerprint

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Entry",
    "CacheRefusedError",
    "CacheFileError",
    "CacheKey",
    "require_reusable",
    "entry_nbytes",
    "PrefixCache",
]

FORMAT = "ncm-verify/prefix-cache"
FORMAT_VERSION = "1"
# safetensors dtype names <-> MLX dtypes; bfloat16 travels as its uint16 bits
_ST_DTYPES = {"F32": mx.float32, "F16": mx.float16, "BF16": mx.bfloat16}
_ST_NAMES = {dtype: name for name, dtype in _ST_DTYPES.items()}
_NP_VIEWS = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}

Entry = tuple[tuple[mx.array, mx.array], ...]
"""Per layer ``(K, V)``, each ``[heads, prefix_length, head_dim]``."""


class CacheRefusedError(ValueError):
    """Prefix reuse is invalid for this model (mask not prefix isolated, or dropout active)."""


class CacheFileError(ValueError):
    """A persisted cache file is corrupted, truncated, foreign or inconsistent."""


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """Everything a prefix's K/V depends on; compared only through its typed encoding."""

    tokens: tuple[int, ...]
    fingerprint: str
    mask: str
    dtype: str
    namespace: str = ""

    def encode(self) -> bytes:
        """Typed, length-prefixed bytes: no two distinct keys share an encoding."""
        fields = [
            (b"T", np.asarray(self.tokens, dtype="<i8").tobytes()),
            (b"F", self.fingerprint.encode()),
            (b"M", self.mask.encode()),
            (b"D", self.dtype.encode()),
            (b"N", self.namespace.encode()),
        ]
        return b"".join(tag + struct.pack("<Q", len(payload)) + payload for tag, payload in fields)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "tokens": list(self.tokens)}


def require_reusable(model: NCM) -> None:
    """Raise `CacheRefusedError` unless prefix states are a function of the prefix alone."""
    config = model.config
    if not is_prefix_isolated(model.mask, config.prefix_length):
        raise CacheRefusedError(
            f"model: mask {config.mask!r} lets prefix rows attend to generated positions; prefix K/V cannot be reused"
        )
    if model.training and config.dropout > 0:
        raise CacheRefusedError(
            f"model: in training mode with dropout={config.dropout}, prefix states are random; "
            "call model.eval() before caching"
        )


def entry_nbytes(entry: Entry) -> int:
    return sum(k.nbytes + v.nbytes for k, v in entry)


class PrefixCache:
    """Exact full-prefix K/V cache bounded by `max_bytes`, evicting least recently used."""

    def __init__(self, max_bytes: int = 64 * 2**20):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes: expected an integer >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[bytes, tuple[CacheKey, Entry]] = collections.OrderedDict()
        self._nbytes = 0  # running total of entry_nbytes over _entries, kept by store
        self.hits = self.misses = self.evictions = self.stores = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of K/V held, as the arrays report them (a running total, O(1))."""
        return self._nbytes

    def keys_for(self, model: NCM, prefixes, namespace: str = "") -> list[CacheKey]:
        """One key per prefix (rows of token ids, any length); refuses a model whose
        prefix states are not reusable."""
        require_reusable(model)
        if isinstance(prefixes, mx.array) and prefixes.ndim == 2 and mx.issubdtype(prefixes.dtype, mx.integer):
            rows = [tuple(row) for row in np.asarray(prefixes).tolist()]  # one host copy, not one per row
        else:
            rows = [tuple(int(t) for t in np.asarray(row).reshape(-1)) for row in prefixes]
        identity = fingerprint(model)
        return [CacheKey(row, identity, model.config.mask, model.config.dtype, namespace) for row in rows]

    def lookup(self, key: CacheKey) -> Entry | None:
        """The entry stored under exactly `key`, or None; counts the hit or miss."""
        encoded = key.encode()
        found = self._entries.get(encoded)
        if found is None:
            self.misses += 1
            return None
        self._touch(encoded)
        self.hits += 1
        return found[1]

    def store(self, key: CacheKey, entry: Entry) -> None:
        """Hold `entry` under `key`, evicting the least recently used to stay in budget."""
        size = entry_nbytes(entry)
        if size > self.max_bytes:
            return
        encoded = key.encode()
        self._discard(encoded)
        self._entries[encoded] = (key, tuple(entry))
        self._nbytes += size
        self.stores += 1
        while self._nbytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self._nbytes -= entry_nbytes(evicted)
            self.evictions += 1

    def _touch(self, encoded: bytes) -> None:
        """Mark the entry under `encoded` as the most recently used."""
        self._entries.move_to_end(encoded)

    def _discard(self, encoded: bytes) -> None:
        """Drop the entry under `encoded`, if any, from the entries and the byte total."""
        replaced = self._entries.pop(encoded, None)
        if replaced is not None:
            self._nbytes -= entry_nbytes(replaced[1])

    def save(self, path: str | Path) -> None:
        """Write every entry atomically (temporary file in the same folder, then rename)."""
        tensors, fields = {}, []
        for index, (key, entry) in enumerate(self._entries.values()):
            fields.append(key.to_dict())
            for layer, (k, v) in enumerate(entry):
                tensors[f"e{index}.l{layer}.k"], tensors[f"e{index}.l{layer}.v"] = k, v
        _write_cache_file(Path(path), tensors, fields)

    def load(self, path: str | Path) -> int:
        """Add the entries of the file at `path`; a bad file raises `CacheFileError`
        and adds nothing. Returns the number of entries added."""
        tensors, fields = _read_cache_file(Path(path))
        loaded = []
        for index, key_fields in enumerate(fields):
            key = _key_from_fields(key_fields)
            entry = _entry_from_tensors(tensors, index, key)
            loaded.append((key, entry))
        if len(tensors) != 2 * sum(len(entry) for _, entry in loaded):
            raise CacheFileError(f"path: {path} holds tensors that belong to no entry")
        for key, entry in loaded:
            self.store(key, entry)
        return len(loaded)


def _key_from_fields(fields) -> CacheKey:
    try:
        key = CacheKey(
            tuple(fields["tokens"]), fields["fingerprint"], fields["mask"], fields["dtype"], fields["namespace"]
        )
    except (KeyError, TypeError) as error:
        raise CacheFileError(f"path: malformed entry key {fields!r}") from error
    if (
        not all(isinstance(t, int) and not isinstance(t, bool) for t in key.tokens)
        or not all(isinstance(value, str) for value in (key.fingerprint, key.mask, key.dtype, key.namespace))
        or set(fields) != {"tokens", "fingerprint", "mask", "dtype", "namespace"}
    ):
        raise CacheFileError(f"path: malformed entry key {fields!r}")
    return key


def _entry_from_tensors(tensors: dict, index: int, key: CacheKey) -> Entry:
    entry, layer = [], 0
    while f"e{index}.l{layer}.k" in tensors:
        k, v = tensors[f"e{index}.l{layer}.k"], tensors.get(f"e{index}.l{layer}.v")
        if (
            v is None
            or k.shape != v.shape
            or k.ndim != 3
            or k.shape[1] != len(key.tokens)
            or str(k.dtype).split(".")[-1] != key.dtype
            or v.dtype != k.dtype
        ):
            raise CacheFileError(f"path: entry {index} layer {layer} does not match its key")
        entry.append((k, v))
        layer += 1
    if not entry:
        raise CacheFileError(f"path: entry {index} has no tensors")
    return tuple(entry)


def _digest(fields: list, header_tensors: dict, data: bytes) -> str:
    """sha256 over the format version, the key fields and every tensor (name, dtype, shape, bytes)."""
    digest = hashlib.sha256(FORMAT_VERSION.encode() + b"\0" + _canonical(fields).encode())
    for name in sorted(header_tensors):
        info = header_tensors[name]
        begin, end = info["data_offsets"]
        digest.update(f"\0{name}|{info['dtype']}|{info['shape']}|".encode())
        digest.update(data[begin:end])
    return digest.hexdigest()


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _write_cache_file(path: Path, tensors: dict[str, mx.array], fields: list) -> None:
    """Serialise as safetensors with format, version, key fields and sha256 in the metadata."""
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        array = tensors[name]
        dtype = _ST_NAMES[array.dtype]
        raw = np.asarray(array.view(mx.uint16) if array.dtype == mx.bfloat16 else array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    data = b"".join(chunks)
    header["__metadata__"] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "entries": _canonical(fields),
        "sha256": _digest(fields, header, data),
    }
    encoded = _canonical(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(struct.pack("<Q", len(encoded)) + encoded + data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read_cache_file(path: Path) -> tuple[dict[str, mx.array], list]:
    """Parse and verify a cache file strictly; any deviation is a `CacheFileError`."""
    try:
        blob = path.read_bytes()
    except OSError as error:
        raise CacheFileError(f"path: cannot read {path}: {error}") from error
    if len(blob) < 8:
        raise CacheFileError(f"path: {path} is truncated ({len(blob)} bytes)")
    (header_length,) = struct.unpack("<Q", blob[:8])
    if header_length > len(blob) - 8:
        raise CacheFileError(f"path: {path} is truncated: header of {header_length} bytes announced")
    raw_header, data = blob[8 : 8 + header_length], blob[8 + header_length :]
    try:
        header = json.loads(raw_header.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as error:
        raise CacheFileError(f"path: {path} has an unreadable header: {error}") from error
    # canonical re-encoding: any edited header byte, even whitespace, is caught
    canonical = _canonical(header).encode()
    if not isinstance(header, dict) or raw_header != canonical + b" " * (-len(canonical) % 8):
        raise CacheFileError(f"path: {path} header is not in canonical form")
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CacheFileError(f"path: {path} is not an ncm-verify prefix cache")
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CacheFileError(
            f"path: {path} has format version {metadata.get('format_version')!r}, expected {FORMAT_VERSION!r}"
        )
    tensors = _parse_tensors(path, header, data)
    try:
        fields = json.loads(metadata["entries"])
    except (KeyError, TypeError, ValueError) as error:
        raise CacheFileError(f"path: {path} has unreadable entry keys") from error
    if not isinstance(fields, list) or metadata.get("sha256") != _digest(fields, header, data):
        raise CacheFileError(f"path: {path} fails its sha256 check")
    return tensors, fields


def _parse_tensors(path: Path, header: dict, data: bytes) -> dict[str, mx.array]:
    tensors, expected_offset = {}, 0
    for name, info in sorted(header.items(), key=lambda item: _offsets(path, item)[0]):
        begin, end = _offsets(path, (name, info))
        dtype, shape = info.get("dtype"), info.get("shape")
        if (
            dtype not in _ST_DTYPES
            or not isinstance(shape, list)
            or not all(isinstance(n, int) and n >= 0 for n in shape)
        ):
            raise CacheFileError(f"path: {path} tensor {name!r} has a bad dtype or shape")
        if begin != expected_offset or end - begin != int(np.prod(shape)) * np.dtype(_NP_VIEWS[dtype]).itemsize:
            raise CacheFileError(f"path: {path} tensor {name!r} has inconsistent offsets")
        if end > len(data):
            raise CacheFileError(f"path: {path} is truncated inside tensor {name!r}")
        array = mx.array(np.frombuffer(data[begin:end], dtype=_NP_VIEWS[dtype]).reshape(shape))
        tensors[name] = array.view(mx.bfloat16) if dtype == "BF16" else array
        expected_offset = end
    if expected_offset != len(data):
        raise CacheFileError(
            f"path: {path} is truncated or padded: {len(data)} data bytes, {expected_offset} described"
        )
    return tensors


def _offsets(path: Path, item) -> tuple[int, int]:
    name, info = item
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise CacheFileError(f"path: {path} tensor {name!r} has bad data offsets")
    return offsets[0], offsets[1]
