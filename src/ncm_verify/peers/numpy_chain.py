"""A plain NumPy chain verifier written here, through the protocol (``--impl`` this module).

Its step is :func:`ncm_verify.oracles.numpy_steps.numpy_chain_step`, the same code the bench times
as its NumPy peer: float32 arithmetic (half inputs widened), acceptance ``u * q < p``, the correction
an inverse CDF of normalised max(p - q, 0). Uniforms come from NumPy's generator seeded by the key.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from ncm_verify.oracles.numpy_steps import numpy_chain_step, numpy_uniforms
from ncm_verify.reference.speculative import ChainOutcome, all_drafts, per_sequence_keys

ACCEPTANCE_RULE = "optimal"
"""Accept with probability min(1, p/q) as ``u * q < p``; correct from normalised max(p - q, 0)."""
CAPABILITIES = {
    "traceable": "NumPy code: mx.compile cannot trace it",
    "value_error_contract": "a plain port without the protocol's input checks: bad input is not refused",
}
"""What this peer cannot do, with the reason; a property that needs one reads 'not applicable: <reason>'."""


def versions() -> str:
    return f"numpy {np.__version__}"


def as_float32(array) -> np.ndarray:
    """Probabilities as float32 NumPy rows (NumPy has no bfloat16: half inputs are widened exactly)."""
    if isinstance(array, mx.array):
        return np.array(array.astype(mx.float32))
    return np.asarray(array, dtype=np.float32)


def draw_uniforms(key, batch: int, shape: tuple[int, ...]) -> mx.array:
    """Uniforms ``[B, *shape]`` from NumPy's generator: one stream for one key, one per sequence for ``[B, 2]``."""
    per_sequence_keys(key, batch)  # the protocol's check of the key's type and shape
    keys = np.array(key, dtype=np.uint32)
    if keys.ndim == 1:
        return mx.array(numpy_uniforms(np.random.default_rng(keys.tolist()), (batch, *shape)))
    rows = [numpy_uniforms(np.random.default_rng(k.tolist()), tuple(shape)) for k in keys]
    return mx.array(np.stack(rows) if rows else np.zeros((0, *shape), np.float32))


def apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> ChainOutcome:
    """The NumPy chain step given uniforms ``[B, 2, G+1]``."""
    tokens, accepted = numpy_chain_step(
        as_float32(target_probs),
        as_float32(draft_probs),
        np.array(draft_tokens).astype(np.int64),
        np.array(num_draft).astype(np.int64),
        np.array(uniforms).astype(np.float32),
    )
    return ChainOutcome(mx.array(tokens), mx.array(accepted))


def verify_chain(target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True) -> ChainOutcome:
    """The NumPy chain step at the uniforms `draw_uniforms(key, ...)` gives (`validate`: nothing to skip)."""
    batch, max_draft = np.shape(draft_tokens)
    if num_draft is None:
        num_draft = all_drafts(batch, max_draft)
    uniforms = draw_uniforms(key, batch, (2, max_draft + 1))
    return apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms)
