"""The source NCM's sampling law in float64: top-k (exactly k, ties to the lower index), then the
temperature, then softmax; one-hot on the first maximum at temperature 0."""

from __future__ import annotations

import numpy as np

__all__ = ["sampling_law64"]


def sampling_law64(logits, temperature: float, top_k: int | None) -> np.ndarray:
    """Probabilities ``[..., K]`` of each code given float logits ``[..., K]``."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return (np.arange(logits.shape[-1]) == np.argmax(logits, axis=-1)[..., None]).astype(np.float64)
    if top_k is not None and top_k < logits.shape[-1]:
        ranks = np.argsort(np.argsort(-logits, axis=-1, kind="stable"), axis=-1, kind="stable")
        logits = np.where(ranks < top_k, logits, -np.inf)
    scaled = logits / temperature
    scaled = scaled - scaled.max(axis=-1, keepdims=True)
    weights = np.exp(scaled)
    return weights / weights.sum(axis=-1, keepdims=True)
