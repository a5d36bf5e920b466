"""What the drafting loop needs of a text drafter, and what a drafter hands it.

A drafter proposes `k` tokens for a batch of contexts together with the very rows each token was drawn
from. For an NCM block drafter those rows are q(x_i | z), the factorised decoder rows under the codes z it
sampled (never the latent marginal); for an autoregressive drafter they are its next-token rows along its own
draft. The target then verifies the block with `verify_chain` applied conditionally on z, so exactness needs
nothing but these rows.

A drafter with few enough codes to enumerate (`EnumerableDrafter`) also gives its exact block law: what C10's
exact acceptance and the NCM drafters' training and held-out loss need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import row_sums


@dataclass(frozen=True)
class DraftBlock:
    """A proposed block.

    Attributes:
        tokens: (B, k) int32, the proposed tokens.
        probs: (B, k, V) float32, row i the law `tokens[:, i]` was drawn from, at the temperature used.
        codes: (B, C) int32, the codes z the block was drawn under (NCM drafters); None for an AR drafter.
    """

    tokens: mx.array
    probs: mx.array
    codes: mx.array | None = None


class TextDrafter(Protocol):
    """A drafter over the target's vocabulary, keeping its own cache of the context it has read."""

    vocab_size: int
    max_block: int
    """The most tokens one proposal can hold (an NCM drafter's decoded length; any k for an AR drafter)."""
    reads_features: bool
    """Whether `propose` reads `features` (the loop computes the target's hidden states only then)."""

    def make_cache(self) -> list[Any]:
        """A fresh per-layer cache (mlx-lm's cache classes, so `trim_prompt_cache` rolls it back)."""
        ...

    def propose(
        self,
        cache: list[Any],
        new_tokens: mx.array,
        k: int,
        key: mx.array,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> DraftBlock:
        """Read `new_tokens` (B, n), the tokens emitted since the last call, into `cache`, then propose `k`.

        Drafting may leave entries past the context in `cache`; the loop trims the cache back to the
        accepted context after verification. `features` (B, D) is the target's hidden state at the block's
        start, for feature-conditioned drafters (others ignore it).
        """
        ...

    def block_probs(
        self,
        context: mx.array,
        tokens: mx.array,
        codes: mx.array | None,
        *,
        temperature: float = 1.0,
        features: mx.array | None = None,
    ) -> mx.array:
        """The rows ``(B, k, V)`` `propose` draws `tokens` ``(B, k)`` from after `context` ``(B, T)``, under
        `codes`, recomputed without a cache: the suite checks each proposal's rows against them."""
        ...


class EnumerableDrafter(TextDrafter, Protocol):
    """A block drafter whose codes z can be enumerated: its block law is sum_z q(z | context) prod_i q(x_i | z, ...)."""

    num_codes: int
    """How many codes z there are (`all_codes`' rows)."""

    def all_codes(self) -> mx.array:
        """Every z as `DraftBlock.codes` holds it, ``(num_codes, C)``, in the order `block_law` lists them."""
        ...

    def block_law(
        self, context: mx.array, k: int, *, temperature: float = 1.0, features: mx.array | None = None
    ) -> tuple[mx.array, mx.array]:
        """For every z: log q(z | context) ``(B, num_codes)`` and the log rows of the block's first k tokens at
        `temperature` ``(B, num_codes, k, V)`` (what `block_probs` gives under that z)."""
        ...

    def block_log_likelihood(self, context: mx.array, blocks: mx.array, *, features: mx.array | None = None):
        """The exact log q(block | context) ``(B,)`` of `blocks` ``(B, k)`` at temperature 1, z enumerated."""
        ...

    def marginal_probs(
        self, context: mx.array, k: int, *, temperature: float = 1.0, features: mx.array | None = None
    ) -> mx.array:
        """The latent marginal sum_z q(z | context) q(x_i | z, ...) ``(B, k, V)``: never what a token is drawn from."""
        ...


def softmax_rows(scores: mx.array) -> mx.array:
    """softmax over the last axis in float32, normalised by blocked sums.

    MLX's `mx.softmax` sums sequentially on the CPU: on SmolLM2's real rows (V = 49 152, T = 1) its rows sum to
    1 +- 2e-4 (within the kernels' worst-case bound, tolerances.float32_softmax_normalisation); blocked sums err ~1e-7.
    """
    scores = scores.astype(mx.float32)
    weights = mx.exp(scores - mx.max(scores, axis=-1, keepdims=True))
    return weights / row_sums(weights)[..., None]


def rows_at_temperature(logits: mx.array, temperature: float) -> mx.array:
    """float32 rows a token is drawn from at `temperature` (0: the one-hot row of the first maximum).

    The logits are scaled as mlx-lm's sampler scales them (``logits * (1 / temp)``, `categorical_sampling`), so
    that a loop's rows are those `generate_step` would draw from, to the ulp.
    """
    logits = logits.astype(mx.float32)
    if temperature == 0:
        return (mx.arange(logits.shape[-1]) == mx.argmax(logits, axis=-1, keepdims=True)).astype(mx.float32)
    return softmax_rows(logits * (1.0 / temperature))
