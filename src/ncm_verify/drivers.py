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


def first_round_inputs(
    fixture: AutoregressiveFixture, *, batch: int, max_draft: int, mixed: bool, rng, dtype=mx.float32
) -> tuple:
    """Kernel arguments of one chain round at the empty context: (target, draft, drafts, num_draft)."""
    num_draft = np.minimum(draft_caps(batch, max_draft, mixed), fixture.length - 1)
    num_draft = np.maximum(num_draft, 0)
    target, draft, drafts = chain_round_inputs(
        fixture, np.zeros((batch, 0), dtype=np.int64), np.zeros(batch, dtype=np.int64), num_draft, max_draft, rng
    )
    return (
        mx.array(target, dtype=dtype), mx.array(draft, dtype=dtype),
        mx.array(drafts, dtype=mx.int32), mx.array(num_draft, dtype=mx.int32),
    )


def run_first_round(
    impl, fixture: AutoregressiveFixture, *, batch: int, num_draft: int, seed: int
) -> np.ndarray:
    """Accepted counts of one round of `num_draft` drafts at the empty context."""
    target, draft, drafts, lengths = first_round_inputs(
        fixture, batch=batch, max_draft=num_draft, mixed=False, rng=np.random.default_rng(seed)
    )
    outcome = impl.verify_chain(target, draft, drafts, key=mx.random.key(seed), num_draft=lengths)
    assert_chain_outcome_well_formed(outcome, np.array(drafts), np.array(lengths), fixture.vocab)
    return np.array(outcome.num_accepted).astype(np.int64)


@dataclasses.dataclass
class LatentRun:
    """Emitted latents ``[B]`` and tokens ``[B, N]``."""

    latents: np.ndarray
    tokens: np.ndarray


def batched(table: np.ndarray, batch: int, dtype) -> mx.array:
    return mx.array(np.broadcast_to(table, (batch,) + table.shape), dtype=dtype)


def latent_chain_inputs(fixture: LatentFixture, *, batch: int, rng, dtype=mx.float32) -> tuple:
    """The draft samples a latent from q(z) and tokens from q(x | z): the six kernel arguments."""
    draft_latent = sample_categorical(rng, np.broadcast_to(fixture.draft_latent, (batch, len(fixture.draft_latent))))
    draft_tokens = sample_categorical(rng, fixture.draft_tokens[draft_latent])
    return (
        batched(fixture.target_latent, batch, dtype), batched(fixture.draft_latent, batch, dtype),
        mx.array(draft_latent, dtype=mx.int32), batched(fixture.target_tokens, batch, dtype),
        batched(fixture.draft_tokens, batch, dtype), mx.array(draft_tokens, dtype=mx.int32),
    )


def factorized_inputs(fixture: LatentFixture, *, batch: int, rng, dtype=mx.float32) -> tuple:
    """The target samples z ~ p(z); both models condition on it: the three kernel arguments."""
    latent = sample_categorical(rng, np.broadcast_to(fixture.target_latent, (batch, len(fixture.target_latent))))
    target, draft = fixture.target_tokens[latent], fixture.draft_tokens[latent]
    draft_tokens = sample_categorical(rng, draft)
    return mx.array(target, dtype=dtype), mx.array(draft, dtype=dtype), mx.array(draft_tokens, dtype=mx.int32)


def run_latent_chain(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> LatentRun:
    """Latent-chain verification of a batch of drafts; returns what it emitted."""
    inputs = latent_chain_inputs(fixture, batch=batch, rng=np.random.default_rng(seed), dtype=dtype)
    outcome = impl.verify_latent_chain(*inputs, key=mx.random.key(seed))
    return LatentRun(np.array(outcome.latent).astype(np.int64), np.array(outcome.tokens).astype(np.int64))


def run_factorized(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> np.ndarray:
    """Factorised verification of a batch of drafts; returns the emitted tokens."""
    inputs = factorized_inputs(fixture, batch=batch, rng=np.random.default_rng(seed), dtype=dtype)
    return np.array(impl.verify_factorized(*inputs, key=mx.random.key(seed)).tokens).astype(np.int64)


@dataclasses.dataclass
class KernelCase:
    """One batch of inputs for a named kernel (chain, factorized or latent_chain)."""

    kernel: str
    args: tuple
    num_draft: mx.array | None = None

    @property
    def batch(self) -> int:
        return self.args[0].shape[0]

    def call(self, impl, key, **options):
        """``impl.verify_<kernel>`` on these inputs."""
        extra = {} if self.num_draft is None else {"num_draft": self.num_draft}
        return getattr(impl, f"verify_{self.kernel}")(*self.args, key=key, **extra, **options)

    def apply(self, impl, uniforms):
        """``impl.apply_<kernel>`` on these inputs, given its uniforms."""
        extra = () if self.num_draft is None else (self.num_draft,)
        return getattr(impl, f"apply_{self.kernel}")(*self.args, *extra, uniforms)

    def uniform_shape(self) -> tuple[int, ...]:
        """Shape of the uniforms `apply` takes: ``[B, 2, columns]``."""
        columns = {"chain": self.args[0].shape[1], "factorized": self.args[0].shape[1]}
        return (self.batch, 2, columns.get(self.kernel, self.args[-1].shape[1] + 1))

    def cast(self, dtype) -> "KernelCase":
        """The same case with its probabilities in `dtype` (ids untouched)."""
        return dataclasses.replace(
            self, args=tuple(a.astype(dtype) if mx.issubdtype(a.dtype, mx.floating) else a for a in self.args)
        )

    def rows(self, start: int, stop: int) -> "KernelCase":
        """Sequences start..stop of the batch."""
        num_draft = None if self.num_draft is None else self.num_draft[start:stop]
        return KernelCase(self.kernel, tuple(a[start:stop] for a in self.args), num_draft)

    def emitted_target_probability(self, outcome) -> np.ndarray:
        """The target's probability of every emitted token (and latent)."""
        if self.kernel == "latent_chain":
            latent = np.array(outcome.latent)
            rows = np.array(self.args[3].astype(mx.float32))[np.arange(self.batch), latent]
            tokens = np.array(outcome.tokens)
            p_tokens = np.take_along_axis(rows, tokens[..., None], axis=-1)[..., 0]
            p_latent = np.array(self.args[0].astype(mx.float32))[np.arange(self.batch), latent]
            return np.concatenate([p_latent[:, None], p_tokens], axis=1).ravel()
        target = np.array(self.args[0].astype(mx.float32))
        tokens = np.array(outcome.tokens)
        emitted = tokens >= 0
        p = np.take_along_axis(target, np.maximum(tokens, 0)[..., None], axis=-1)[..., 0]
        return p[emitted]


def make_kernel_case(kernel: str, fixture, *, batch: int, seed: int, max_draft: int = 2) -> KernelCase:
    """Inputs for `kernel` from an autoregressive (chain) or latent (other kernels) fixture."""
    rng = np.random.default_rng(seed)
    if kernel == "chain":
        target, draft, drafts, num_draft = first_round_inputs(
            fixture, batch=batch, max_draft=max_draft, mixed=True, rng=rng
        )
        return KernelCase("chain", (target, draft, drafts), num_draft)
    if kernel == "factorized":
        return KernelCase("factorized", factorized_inputs(fixture, batch=batch, rng=rng))
    if kernel == "latent_chain":
        return KernelCase("latent_chain", latent_chain_inputs(fixture, batch=batch, rng=rng))
    raise ValueError(f"kernel: unknown kernel {kernel!r}")


@dataclasses.dataclass
class StepCase:
    """One step of a kernel: its inputs in their dtype, the same values in float64, and uniforms.

    ``exact_args`` hold exactly the numbers the kernel reads (half rows widened), the
    chain's with ``num_draft`` last; ``uniforms`` are float32 ``[B, 2, columns]``.
    """

    case: KernelCase
    exact_args: tuple
    uniforms: np.ndarray
    dtype: str

    def describe(self) -> str:
        """A short account of the inputs for failure messages."""
        shapes = ", ".join(str(tuple(a.shape)) for a in self.case.args)
        lengths = "" if self.case.num_draft is None else f", num_draft={np.array(self.case.num_draft).tolist()}"
        return f"apply_{self.case.kernel}({self.dtype} {shapes}{lengths}, uniforms={self.uniforms.tolist()})"


def round_rows(rows: np.ndarray, dtype: str) -> mx.array:
    """Probability rows rounded to `dtype`, each row's largest entry reset so the row still sums to 1.

    Rounding 100 003 tiny float16 entries one by one moves a sum by ~1e-3, past the 2^-10 a
    float16 row may stray; the reset entry rounds once, within half an ulp of itself.
    """
    def rounded(values: np.ndarray) -> mx.array:
        return mx.array(values.astype(np.float32)).astype(getattr(mx, dtype))

    flat = np.array(rounded(rows).astype(mx.float32)).astype(np.float64).reshape(-1, rows.shape[-1])
    largest = np.argmax(flat, axis=1)
    others = flat.sum(axis=1) - flat[np.arange(len(flat)), largest]
    flat[np.arange(len(flat)), largest] = np.maximum(1.0 - others, 0.0)
    return rounded(flat.reshape(rows.shape))


def make_step_case(kernel: str, arrays: tuple, dtype: str, uniforms: np.ndarray | None = None) -> StepCase:
    """A `StepCase` from float64 probabilities and integer ids (the chain's `num_draft` last), rounded to `dtype`."""
    rounded = []
    for array in arrays:
        if np.issubdtype(array.dtype, np.floating):
            rounded.append(round_rows(array, dtype))
        else:
            rounded.append(mx.array(array.astype(np.int32)))
    exact_args = tuple(
        np.array(a.astype(mx.float32)).astype(np.float64) if mx.issubdtype(a.dtype, mx.floating) else np.array(a)
        for a in rounded
    )
    num_draft = rounded.pop() if kernel == "chain" else None
    return StepCase(KernelCase(kernel, tuple(rounded), num_draft), exact_args, uniforms, dtype)
