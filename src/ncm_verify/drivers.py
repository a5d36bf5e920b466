"""Drive an implementation's kernels over finite fixtures, vectorised over a batch.

The drafts are sampled here, from the fixture's draft table with a seeded
NumPy generator; the kernel gets the rows it would get in a real decoder: a
different target row at every position, chosen by the tokens so far.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np

from ncm_verify.checks import assert_chain_outcome_well_formed
from ncm_verify.exact import AutoregressiveFixture, LatentFixture, context_rows


def sample_categorical(rng: np.random.Generator, rows: np.ndarray) -> np.ndarray:
    """One id per row of ``[..., V]`` probabilities, by inverse CDF in float64."""
    cdf = np.cumsum(rows, axis=-1)
    draws = rng.random(rows.shape[:-1])[..., None] * cdf[..., -1:]
    return np.minimum((cdf <= draws).sum(axis=-1), rows.shape[-1] - 1)


def round_seeds(seed: int, count: int) -> list[int]:
    """Independent seeds for each round, derived from the example's seed."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(count)]


def draft_caps(batch: int, max_draft: int, mixed: bool) -> np.ndarray:
    """Per-sequence draft budgets: all `max_draft`, or cycling through 0..max_draft."""
    if mixed:
        return np.arange(batch) % (max_draft + 1)
    return np.full(batch, max_draft)


@dataclasses.dataclass
class ChainRun:
    """Sequences of `fixture.length` tokens and the first round's accepted counts."""

    sequences: np.ndarray
    first_num_accepted: np.ndarray
    first_num_draft: np.ndarray


def chain_round_inputs(fixture: AutoregressiveFixture, contexts, lengths, num_draft, max_draft, rng):
    """Draft tokens from the draft table and gather the rows the kernel reads.

    Rows past a sequence's drafts are uniform filler the kernel must not use.
    """
    batch, vocab = len(lengths), fixture.vocab
    filler = np.full(vocab, 1.0 / vocab)
    drafts = np.full((batch, max_draft), -1, dtype=np.int64)
    target = np.broadcast_to(filler, (batch, max_draft + 1, vocab)).copy()
    draft = np.broadcast_to(filler, (batch, max_draft, vocab)).copy()
    grown = np.concatenate([contexts, np.zeros((batch, max_draft + 1), dtype=np.int64)], axis=1)
    for i in range(max_draft + 1):
        live = i <= num_draft
        rows = context_rows(grown, np.where(live, lengths + i, 0), vocab)
        target[live, i] = fixture.target[rows[live]]
        if i == max_draft:
            break
        drafting = i < num_draft
        draft[drafting, i] = fixture.draft[rows[drafting]]
        tokens = sample_categorical(rng, draft[:, i])
        drafts[drafting, i] = tokens[drafting]
        np.put_along_axis(grown, (lengths + i)[:, None], np.where(drafting, tokens, 0)[:, None], axis=1)
    return target, draft, drafts


def run_chain(
    impl, fixture: AutoregressiveFixture, *, batch: int, max_draft: int, mixed: bool, seed: int,
    dtype=mx.float32, greedy: bool = False,
) -> ChainRun:
    """Repeated chain (or greedy) rounds until every sequence holds `fixture.length` tokens.

    Each round drafts ``min(cap, remaining - 1)`` tokens so that its corrected
    or bonus token still falls inside the fixture. Greedy rounds hand the
    kernel log-probabilities (-inf where p = 0) as logits.
    """
    length = fixture.length
    caps = draft_caps(batch, max_draft, mixed)
    contexts = np.zeros((batch, length), dtype=np.int64)
    lengths = np.zeros(batch, dtype=np.int64)
    first_accepted = first_draft = None
    for round_seed in round_seeds(seed, length):
        active = np.flatnonzero(lengths < length)
        if not len(active):
            break
        rng = np.random.default_rng(round_seed)
        num_draft = np.minimum(caps[active], length - lengths[active] - 1)
        target, draft, drafts = chain_round_inputs(
            fixture, contexts[active], lengths[active], num_draft, max_draft, rng
        )
        draft_ids, draft_lengths = mx.array(drafts, dtype=mx.int32), mx.array(num_draft, dtype=mx.int32)
        if greedy:
            with np.errstate(divide="ignore"):
                logits = mx.array(np.log(target), dtype=dtype)
            outcome = impl.verify_greedy(logits, draft_ids, num_draft=draft_lengths)
        else:
            outcome = impl.verify_chain(
                mx.array(target, dtype=dtype), mx.array(draft, dtype=dtype), draft_ids,
                key=mx.random.key(round_seed), num_draft=draft_lengths,
            )
        assert_chain_outcome_well_formed(outcome, drafts, num_draft, fixture.vocab)
        tokens = np.array(outcome.tokens).astype(np.int64)
        accepted = np.array(outcome.num_accepted).astype(np.int64)
        if first_accepted is None:
            first_accepted, first_draft = accepted, num_draft
        emitted = accepted + 1
        for j in range(max_draft + 1):
            writing = j < emitted
            rows, cols = active[writing], lengths[active][writing] + j
            contexts[rows, np.minimum(cols, length - 1)] = tokens[writing, j]
        lengths[active] += emitted
    return ChainRun(contexts, first_accepted, first_draft)


def run_first_round(
    impl, fixture: AutoregressiveFixture, *, batch: int, num_draft: int, seed: int
) -> np.ndarray:
    """Accepted counts of one round of `num_draft` drafts at the empty context."""
    rng = np.random.default_rng(seed)
    lengths = np.zeros(batch, dtype=np.int64)
    drafts_per_row = np.full(batch, num_draft)
    target, draft, drafts = chain_round_inputs(
        fixture, np.zeros((batch, 0), dtype=np.int64), lengths, drafts_per_row, num_draft, rng
    )
    outcome = impl.verify_chain(
        mx.array(target, dtype=mx.float32), mx.array(draft, dtype=mx.float32),
        mx.array(drafts, dtype=mx.int32), key=mx.random.key(seed),
    )
    assert_chain_outcome_well_formed(outcome, drafts, drafts_per_row, fixture.vocab)
    return np.array(outcome.num_accepted).astype(np.int64)


@dataclasses.dataclass
class LatentRun:
    """Emitted latents ``[B]`` and tokens ``[B, N]``."""

    latents: np.ndarray
    tokens: np.ndarray


def batched(table: np.ndarray, batch: int, dtype) -> mx.array:
    return mx.broadcast_to(mx.array(table, dtype=dtype), (batch,) + table.shape)


def run_latent_chain(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> LatentRun:
    """The draft samples a latent from q(z), tokens from q(x | z); the kernel verifies."""
    rng = np.random.default_rng(seed)
    draft_latent = sample_categorical(rng, np.broadcast_to(fixture.draft_latent, (batch, len(fixture.draft_latent))))
    draft_tokens = sample_categorical(rng, fixture.draft_tokens[draft_latent])
    outcome = impl.verify_latent_chain(
        batched(fixture.target_latent, batch, dtype), batched(fixture.draft_latent, batch, dtype),
        mx.array(draft_latent, dtype=mx.int32), batched(fixture.target_tokens, batch, dtype),
        batched(fixture.draft_tokens, batch, dtype), mx.array(draft_tokens, dtype=mx.int32),
        key=mx.random.key(seed),
    )
    return LatentRun(np.array(outcome.latent).astype(np.int64), np.array(outcome.tokens).astype(np.int64))


def run_factorized(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> np.ndarray:
    """The target samples z ~ p(z); both models condition on it; the kernel verifies."""
    rng = np.random.default_rng(seed)
    latent = sample_categorical(rng, np.broadcast_to(fixture.target_latent, (batch, len(fixture.target_latent))))
    target, draft = fixture.target_tokens[latent], fixture.draft_tokens[latent]
    draft_tokens = sample_categorical(rng, draft)
    outcome = impl.verify_factorized(
        mx.array(target, dtype=dtype), mx.array(draft, dtype=dtype), mx.array(draft_tokens, dtype=mx.int32),
        key=mx.random.key(seed),
    )
    return np.array(outcome.tokens).astype(np.int64)
