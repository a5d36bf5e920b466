"""A port of one protocol name, written as a user would: the correction law of speculative sampling."""

import mlx.core as mx

from ncm_verify.tolerances import normalisation_for  # the protocol's row-sum tolerance per dtype


def check_rows(name: str, rows, ndim: int | None = None) -> None:
    """Probability rows: a floating mx.array, finite, non-negative, each row summing to 1."""
    if not isinstance(rows, mx.array) or not mx.issubdtype(rows.dtype, mx.floating):
        raise ValueError(f"{name}: expected floating probabilities, got {type(rows).__name__}")
    if rows.ndim < 1 or (ndim is not None and rows.ndim != ndim):
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(rows.shape)}")
    as_float = rows.astype(mx.float32)
    if not mx.all(mx.isfinite(as_float)).item():
        raise ValueError(f"{name}: contains NaN or infinite values")
    if not mx.all(as_float >= 0).item():
        raise ValueError(f"{name}: contains negative probabilities")
    if not mx.all(mx.abs(as_float.sum(axis=-1) - 1) <= normalisation_for(name, rows.dtype)).item():
        raise ValueError(f"{name}: rows do not sum to 1")


def residual_distribution(p: mx.array, q: mx.array) -> mx.array:
    """Normalised max(p - q, 0) over the last axis; p itself where that is zero."""
    check_rows("p", p)
    check_rows("q", q, p.ndim)
    if q.shape != p.shape:
        raise ValueError(f"q: expected shape {tuple(p.shape)}, got {tuple(q.shape)}")
    p32 = p.astype(mx.float32)
    residual = mx.maximum(p32 - q.astype(mx.float32), 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    return mx.where(mass > 1e-30, residual / mx.maximum(mass, 1e-30), p32)
