"""Speculative accept/reject kernels in MLX, batch-first: the chain, greedy, factorised and latent-chain steps.

Each public ``verify_*`` validates its input (a ``ValueError`` naming the
argument), draws its uniforms from an explicit ``mx.random`` key and calls a
pure ``apply_*`` kernel that ``mx.compile`` can trace. Ratios and uniforms are
float32 whatever the input dtype; uniforms lie strictly inside (0, 1).

A ``key`` is one ``mx.random.key`` (split into one key per sequence) or one key
per sequence, shape ``[B, 2]``; with per-sequence keys, a batch gives the same
result as its rows one at a time.

This module is the public face, with the protocol's signatures; the kernels are built in
:mod:`ncm_verify.reference._kernels` from the rules they share.
"""

from __future__ import annotations

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import CDF_BLOCK, PAD_TOKEN, all_drafts, row_sums, select_code
from ncm_verify.reference._kernels.chain import ChainOutcome, FactorizedOutcome, LatentChainOutcome
from ncm_verify.reference._kernels.checks import check_probabilities, check_shape, per_sequence_keys
from ncm_verify.reference._kernels.factory import REFERENCE_KERNELS
from ncm_verify.reference._kernels.fused import valid_rows
from ncm_verify.reference._kernels.sampling import (
    RESIDUAL_FLOOR,
    SMALLEST_NORMAL,
    UNIFORM_GRID_BITS,
    first_argmax,
    index_in_block,
    make_uniforms,
    sample_residual,
)

__all__ = [
    "UNIFORM_GRID_BITS",
    "RESIDUAL_FLOOR",
    "PAD_TOKEN",
    "CDF_BLOCK",
    "SMALLEST_NORMAL",
    "ChainOutcome",
    "FactorizedOutcome",
    "LatentChainOutcome",
    "all_drafts",
    "per_sequence_keys",
    "make_uniforms",
    "draw_uniforms",
    "index_in_block",
    "sample_residual",
    "residual_distribution",
    "apply_chain",
    "first_argmax",
    "apply_greedy",
    "apply_factorized",
    "select_code",
    "apply_latent_chain",
    "valid_rows",
    "verify_chain",
    "verify_greedy",
    "verify_factorized",
    "verify_latent_chain",
]


def draw_uniforms(key, batch: int, shape: tuple[int, ...]) -> mx.array:
    """The uniforms ``[B, *shape]`` a ``verify_*`` call with `key` hands its ``apply_*`` (a protocol name)."""
    return REFERENCE_KERNELS.draw_uniforms(key, batch, shape)


def residual_distribution(p: mx.array, q: mx.array) -> mx.array:
    """Normalised max(p - q, 0) over the last axis; p itself where p == q."""
    check_probabilities("p", p, getattr(p, "ndim", 1))
    check_probabilities("q", q, p.ndim)
    check_shape("q", q, p.shape)
    p32 = p.astype(mx.float32)
    residual = mx.maximum(p32 - q.astype(mx.float32), 0.0)
    # in blocks: MLX's CPU sum is sequential, 1.3e-4 off on a real SmolLM2 residual (V = 49 152)
    mass = row_sums(residual)[..., None]
    return mx.where(mass > RESIDUAL_FLOOR, residual / mx.maximum(mass, RESIDUAL_FLOOR), p32)


def apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms) -> ChainOutcome:
    """Chain verification given uniforms ``[B, 2, G+1]`` (acceptance row, emission row)."""
    return REFERENCE_KERNELS.apply_chain(target_probs, draft_probs, draft_tokens, num_draft, uniforms)


def apply_greedy(target, draft_tokens, num_draft) -> ChainOutcome:
    """Longest prefix where draft == argmax(target), then the target's argmax (ties to the first index)."""
    return REFERENCE_KERNELS.apply_greedy(target, draft_tokens, num_draft)


def apply_factorized(target_probs, draft_probs, draft_tokens, uniforms) -> FactorizedOutcome:
    """Each position accepted or corrected on its own, given uniforms ``[B, 2, N]``."""
    return REFERENCE_KERNELS.apply_factorized(target_probs, draft_probs, draft_tokens, uniforms)


def apply_latent_chain(
    target_latent_probs,
    draft_latent_probs,
    draft_latent,
    target_token_probs,
    draft_token_probs,
    draft_tokens,
    uniforms,
) -> LatentChainOutcome:
    """The NCM step given uniforms ``[B, 2, N+1]`` (column 0 for the latent).

    The latent is a chain step over the codebook. If it stands, the level's
    tokens are verified factorised given it; if it changed, the chain ends and
    every token is drawn from the target given the corrected latent.
    """
    return REFERENCE_KERNELS.apply_latent_chain(
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        uniforms,
    )


def verify_chain(
    target_probs, draft_probs, draft_tokens, *, key, num_draft=None, validate: bool = True
) -> ChainOutcome:
    """Chain speculative verification (Leviathan et al.; Chen et al.).

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
    return REFERENCE_KERNELS.verify_chain(
        target_probs, draft_probs, draft_tokens, key=key, num_draft=num_draft, validate=validate
    )


def verify_greedy(target, draft_tokens, *, num_draft=None, validate: bool = True) -> ChainOutcome:
    """Greedy verification: reproduces the target's argmax decoding exactly.

    Args:
        target: ``[B, G+1, V]`` target logits or probabilities (ties go to the first index).
        draft_tokens: ``[B, G]`` drafted ids (-1 allowed beyond ``num_draft``).
        num_draft: ``[B]`` per-sequence draft lengths in [0, G]; default G.
    """
    return REFERENCE_KERNELS.verify_greedy(target, draft_tokens, num_draft=num_draft, validate=validate)


def verify_factorized(target_probs, draft_probs, draft_tokens, *, key, validate: bool = True) -> FactorizedOutcome:
    """Factorised verification: positions independent given a shared latent.

    Args:
        target_probs: ``[B, N, V]`` target distributions per position.
        draft_probs: ``[B, N, V]`` draft distributions the tokens were sampled from.
        draft_tokens: ``[B, N]`` drafted ids.
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
    """
    return REFERENCE_KERNELS.verify_factorized(target_probs, draft_probs, draft_tokens, key=key, validate=validate)


def verify_latent_chain(
    target_latent_probs,
    draft_latent_probs,
    draft_latent,
    target_token_probs,
    draft_token_probs,
    draft_tokens,
    *,
    key,
    validate: bool = True,
) -> LatentChainOutcome:
    """The NCM verification step: latent first, then the level's tokens given it.

    Args:
        target_latent_probs: ``[B, K]`` target p(z | context).
        draft_latent_probs: ``[B, K]`` draft q(z | context).
        draft_latent: ``[B]`` the draft's sampled code.
        target_token_probs: ``[B, K, N, V]`` target p(x_i | z, context) for every code.
        draft_token_probs: ``[B, K, N, V]`` draft q(x_i | z, context) for every code.
        draft_tokens: ``[B, N]`` tokens drafted under ``draft_latent``.
        key: an ``mx.random.key`` or one key per sequence ``[B, 2]``.
    """
    return REFERENCE_KERNELS.verify_latent_chain(
        target_latent_probs,
        draft_latent_probs,
        draft_latent,
        target_token_probs,
        draft_token_probs,
        draft_tokens,
        key=key,
        validate=validate,
    )
