"""Block verification in MLX, batch-first, on the chain's arguments.

Sun et al., "Block Verification Accelerates Speculative Decoding" (arXiv 2403.10444, ICLR 2025),
Algorithm 2. With the prefix weights ``w_0 = 1``, ``w_i = min(w_{i-1} p_i(x_i) / q_i(x_i), 1)`` and the
residual masses ``rho_i = sum_x max(w_{i-1} p_i(x) - q_i(x), 0)`` (row i - 1 of the inputs is position i),
position i of a block of g drafts passes iff ``u_i < h_i``, where ``h_i = rho_{i+1} / (rho_{i+1} + 1 - w_i)``
for i < g (1 where that is 0 / 0, as vllm-project/vllm-ascend#11985 does) and ``h_g = w_g``. The *longest*
passing prefix stands (tau = the last passing i, 0 if none; the rule vllm-project/vllm#46781 merged). Then
one token: from ``norm(max(w_tau p - q, 0))`` at row tau when tau < g, else the bonus from the target's row g.
Exact (their Theorem 1) and never fewer accepted drafts in expectation than the chain rule (Theorem 2).

This module is the public face, with the protocol's signatures; the step is built in
:mod:`ncm_verify.reference._kernels.block` from the decisions it is made of.
"""

from __future__ import annotations

from ncm_verify.reference._kernels.chain import ChainOutcome
from ncm_verify.reference._kernels.factory import REFERENCE_KERNELS

__all__ = ["apply_block", "verify_block"]


def apply_block(target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> ChainOutcome:
    """Block verification given uniforms ``[B, 2, G+1]``: ``u[b, 0, i]`` judges position i + 1, ``u[b, 1, 0]``
    draws the last token. Unvalidated and traceable by ``mx.compile``; the chain's outcome."""
    return REFERENCE_KERNELS.apply_block(target_probs, draft_probs, draft_tokens, num_draft, uniforms)


def verify_block(
    target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate: bool = True
) -> ChainOutcome:
    """Block speculative verification (Sun et al., arXiv 2403.10444): the longest prefix the block's
    thresholds pass stands, then one corrected or bonus token. Exact; accepts at least the chain's drafts.

    Args:
        target_probs: ``[B, G+1, V]`` target distributions; row i follows draft i-1.
        draft_probs: ``[B, G, V]`` the distributions the drafts were sampled from.
        draft_tokens: ``[B, G]`` drafted ids (-1 allowed beyond ``num_draft``).
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
        num_draft: ``[B]`` per-sequence draft lengths in [0, G]; default G.
        validate: check the input (set False only under ``mx.compile``).

    Returns:
        ChainOutcome: emitted tokens ``[B, G+1]`` and accepted counts ``[B]``.
    """
    return REFERENCE_KERNELS.verify_block(
        target_probs, draft_probs, draft_tokens, key=key, num_draft=num_draft, validate=validate
    )
