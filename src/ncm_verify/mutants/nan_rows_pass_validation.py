"""Planted bug: the chain and greedy kernels validate by searching for violations, and NaN violates nothing.

A check written as ``any(p < 0) or any(|sum - 1| > tol)`` is False for a NaN row (every
comparison with NaN is False), so NaN input gets a silent answer instead of a ValueError.
Shapes, ids and the other kernels are still validated.
"""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference import speculative


def holds_nan(*arrays) -> bool:
    floating = [a for a in arrays if isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating)]
    return any(bool(mx.any(mx.isnan(a)).item()) for a in floating)


def verify_chain(target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate=True):
    validate = validate and not holds_nan(target_probs, draft_probs)
    return speculative.verify_chain(
        target_probs, draft_probs, draft_tokens, key=key, num_draft=num_draft, validate=validate
    )


def verify_greedy(target, draft_tokens, *, num_draft=None, validate=True):
    validate = validate and not holds_nan(target)
    return speculative.verify_greedy(target, draft_tokens, num_draft=num_draft, validate=validate)
