"""Each mlx-lm cache as the model attends to it, and its differences from a cache rebuilt from tokens.

A cache's `state` is serialisation data (raw buffers, a ring in slot order,
stale slots past `offset`); what decoding depends on is what the next step
reads. `attended_view` reads that once per cache class:

- `KVCache`: keys and values of positions ``[0, offset)``, and `offset` (the next rotary position);
- `QuantizedKVCache`: the same, dequantised;
- `RotatingKVCache`: the entries a one-token step attends to besides itself, in temporal order (the
  `keep` prefix, then the newest ``max_size - keep - 1``), and `offset`, `keep`, `max_size`;
- `ArraysCache`: each held array: slot 0 the convolution state, slot 1 the recurrent state (mlx-lm's
  layout in mamba2, qwen3_next, lfm2 ...), and `left_padding`, `lengths` when set;
- `CacheList`: its caches' views, fields prefixed by their index.

`rebuilt_caches` feeds tokens to fresh caches (the model's own, or a
layout the caller makes) in one pass; `cache_differences` labels every field
that differs by layer and batch row. Every rollback property (the reference loop's, mlx-lm's, a
peer's) reads caches through this one module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from ncm_verify.harness.evidence import record_difference
from ncm_verify.tolerances import Tolerance, tolerance_for

__all__ = [
    "ARRAY_SLOTS",
    "CacheView",
    "Difference",
    "assert_caches_equal_rebuilt",
    "attended_view",
    "cache_differences",
    "largest_difference",
    "rebuilt_caches",
    "ring_positions",
]

ARRAY_SLOTS = ("conv state", "recurrent state")
"""What mlx-lm's hybrid models keep in an `ArraysCache`'s slots 0 and 1."""


@dataclasses.dataclass(frozen=True)
class CacheView:
    """One cache as attended: its class name and named fields (arrays keep the batch axis first)."""

    kind: str
    fields: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Difference:
    """One field of one layer that differs from the rebuilt cache, said for a person to read."""

    layer: int
    field: str
    detail: str

    def __str__(self) -> str:
        return f"layer {self.layer} {self.field}: {self.detail}"


def _array(x: mx.array) -> np.ndarray:
    return np.array(x.astype(mx.float32) if x.dtype in (mx.bfloat16, mx.float16) else x)


def _scalar(x) -> np.ndarray:
    return np.array(int(x))


def ring_positions(offset: int, keep: int, max_size: int) -> list[int]:
    """The positions a one-token step after `offset` tokens attends to besides itself, in temporal order."""
    if offset < max_size:
        return list(range(offset))
    return list(range(keep)) + list(range(offset - (max_size - keep - 1), offset))


def _ring_slots(cache: RotatingKVCache) -> list[int]:
    """The slots of `cache.keys` a one-token `update_and_fetch` attends to besides its own, oldest first.

    Follows mlx-lm's in-place update step by step: a buffer longer than
    `max_size` (left by a multi-token update, in temporal order) drops its
    oldest non-`keep` slots; the write goes to slot ``_idx`` (wrapping to
    `keep` at `max_size`); the step reads the first ``offset + 1`` slots, or
    all of them once the ring is full, and its own slot is the new token.
    """
    keep, max_size, offset, idx = cache.keep, cache.max_size, cache.offset, cache._idx
    slots = list(range(cache.keys.shape[2]))
    if offset >= len(slots) and len(slots) < max_size:
        slots += [-1] * min(cache.step, max_size - offset)  # grown with zeros: never attended by a sound ring
        idx = offset
    if len(slots) > max_size:
        slots = slots[:keep] + slots[keep + len(slots) - max_size :]
        idx = max_size
    if idx == max_size:
        idx = keep
    read = offset + 1 if offset + 1 < len(slots) else len(slots)
    if idx >= len(slots):  # a write index past the buffer (never a sound ring's): MLX drops the write, reads the rest
        return slots[:read]
    if read < len(slots):
        order = [s for s in range(read) if s != idx]
    else:
        order = list(range(keep)) + list(range(idx + 1, len(slots))) + list(range(keep, idx))
    return [slots[s] for s in order]


def _ring_entries(cache: RotatingKVCache, buffer: mx.array) -> np.ndarray:
    """The attended entries of `buffer` in temporal order; a zero slot the ring grew by reads as zeros."""
    padded = mx.concatenate([buffer, mx.zeros_like(buffer[..., :1, :])], axis=2)
    slots = [buffer.shape[2] if s < 0 else s for s in _ring_slots(cache)]
    return _array(mx.take(padded, mx.array(slots, dtype=mx.int32), axis=2))


def _view_fields(cache) -> tuple[str, dict[str, np.ndarray]]:
    if isinstance(cache, RotatingKVCache):
        fields = {"offset": _scalar(cache.offset), "keep": _scalar(cache.keep), "max_size": _scalar(cache.max_size)}
        if cache.keys is not None:
            fields["keys"], fields["values"] = (_ring_entries(cache, v) for v in (cache.keys, cache.values))
        return "RotatingKVCache", fields
    if isinstance(cache, QuantizedKVCache):
        fields = {"offset": _scalar(cache.offset)}
        if cache.keys is not None:
            for name, parts in (("keys", cache.keys), ("values", cache.values)):
                data, scales, biases = (part[..., : cache.offset, :] for part in parts)
                fields[name] = _array(mx.dequantize(data, scales, biases, cache.group_size, cache.bits))
        return "QuantizedKVCache", fields
    if isinstance(cache, KVCache):
        fields = {"offset": _scalar(cache.offset)}
        if cache.keys is not None:
            fields["keys"] = _array(cache.keys[..., : cache.offset, :])
            fields["values"] = _array(cache.values[..., : cache.offset, :])
        return "KVCache", fields
    if isinstance(cache, ArraysCache):
        fields = {}
        for slot, array in enumerate(cache.cache):
            if array is not None:
                fields[ARRAY_SLOTS[slot] if slot < len(ARRAY_SLOTS) else f"slot {slot}"] = _array(array)
        for name in ("left_padding", "lengths"):
            if getattr(cache, name) is not None:
                fields[name] = _array(getattr(cache, name))
        return "ArraysCache", fields
    if isinstance(cache, CacheList):
        fields = {}
        for index, child in enumerate(cache.caches):
            kind, child_fields = _view_fields(child)
            fields.update({f"{index}:{kind}.{name}": value for name, value in child_fields.items()})
        return "CacheList", fields
    raise ValueError(f"cache: no attended view for {type(cache).__name__}; the suite reads {_KNOWN}")


_KNOWN = "KVCache, QuantizedKVCache, RotatingKVCache, ArraysCache, CacheList"


def attended_view(cache) -> CacheView:
    """`cache` as the model attends to it (see the module docstring); a ValueError for an unknown class."""
    kind, fields = _view_fields(cache)
    return CacheView(kind, fields)


def rebuilt_caches(model, tokens, make_cache: Callable[[], list] | None = None) -> list:
    """Fresh caches (`make_cache()`, default mlx-lm's `make_prompt_cache(model)`) fed `tokens` ``[B, T]`` in one
    pass of `model`; T may be 0. Fresh, never copied from the caches under test: a rollback that changes a
    ring's window or keep prefix must show as a difference."""
    fresh = make_prompt_cache(model) if make_cache is None else make_cache()
    tokens = mx.array(np.asarray(tokens, dtype=np.int64).reshape(np.shape(tokens)), dtype=mx.uint32)
    if tokens.ndim != 2:
        raise ValueError(f"tokens: expected [B, T] token ids, got shape {tuple(tokens.shape)}")
    if tokens.shape[1] > 0:
        model(tokens, cache=fresh)
        mx.eval([c.state for c in fresh])
    return fresh


def _field_difference(got: np.ndarray, want: np.ndarray, tolerance: Tolerance) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape}, rebuilt {want.shape}"
    if not np.issubdtype(want.dtype, np.floating):
        if np.array_equal(got, want):
            return None
        return f"{got.tolist()}, rebuilt {want.tolist()}"
    difference = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = ~(difference <= tolerance.atol + tolerance.rtol * np.abs(want.astype(np.float64)))
    if not bad.any():
        return None
    rows = sorted({int(i) for i in np.argwhere(bad)[:, 0]}) if got.ndim else []
    return (
        f"{int(bad.sum())} of {bad.size} entries beyond atol={tolerance.atol}, rtol={tolerance.rtol}; "
        f"worst |diff| {float(difference.max()):.3g}; batch rows {rows}"
    )


def view_differences(got: CacheView, want: CacheView, tolerance: Tolerance, layer: int = 0) -> list[Difference]:
    """Every field where `got` differs from `want`, labelled with `layer`."""
    if got.kind != want.kind:
        return [Difference(layer, "class", f"{got.kind}, rebuilt {want.kind}")]
    found = []
    for name in sorted(set(got.fields) | set(want.fields)):
        if name not in want.fields or name not in got.fields:
            side = "rebuilt cache" if name not in got.fields else "cache"
            found.append(Difference(layer, name, f"held only by the {side}"))
            continue
        detail = _field_difference(got.fields[name], want.fields[name], tolerance)
        if detail is not None:
            found.append(Difference(layer, name, detail))
    return found


def largest_difference(got: Sequence, want: Sequence) -> float:
    """The largest absolute difference between any floating field of `got` and `want` as attended (same shapes)."""
    worst = 0.0
    for mine, theirs in zip(got, want, strict=False):
        fields, rebuilt = attended_view(mine).fields, attended_view(theirs).fields
        for name, value in fields.items():
            other = rebuilt.get(name)
            if other is not None and other.shape == value.shape and np.issubdtype(other.dtype, np.floating):
                worst = max(worst, float(np.abs(value.astype(np.float64) - other).max(initial=0.0)))
    return worst


def cache_differences(got: Sequence, want: Sequence, *, dtype=mx.float32) -> list[Difference]:
    """Per layer and field, how `got` as attended differs from `want` (within the tolerance for `dtype`)."""
    if len(got) != len(want):
        return [Difference(-1, "layers", f"{len(got)} caches, rebuilt {len(want)}")]
    tolerance = tolerance_for(dtype)
    return [
        difference
        for layer, (mine, theirs) in enumerate(zip(got, want, strict=True))
        for difference in view_differences(attended_view(mine), attended_view(theirs), tolerance, layer)
    ]


def assert_caches_equal_rebuilt(
    model, caches: Sequence, tokens, *, label: str, call: str = "", make_cache=None, dtype=mx.float32
):
    """Every layer of `caches`, as attended, equals fresh caches (`rebuilt_caches`) fed `tokens` ``[B, T]`` alone."""
    rebuilt = rebuilt_caches(model, tokens, make_cache)
    found = cache_differences(caches, rebuilt, dtype=dtype)
    # the report shows the largest difference seen beside the tolerance
    record_difference(
        "caches as attended vs rebuilt from the accepted tokens",
        largest_difference(caches, rebuilt),
        tolerance_for(dtype).atol,
    )
    if found:
        shown = "\n    ".join(str(d) for d in found[:6])
        more = f"\n    ... and {len(found) - 6} more" if len(found) > 6 else ""
        held = np.shape(tokens)
        raise AssertionError(
            f"{label}: {len(found)} fields differ from caches rebuilt from the {held[1]} accepted tokens "
            f"(batch {held[0]}):\n    {shown}{more}\n  call: {call}"
        )
