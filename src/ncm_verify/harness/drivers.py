"""Drive an implementation's kernels over finite fixtures, vectorised over a batch.

The drafts are sampled here, from the fixture's draft table with a seeded
NumPy generator; the kernel gets the rows it would get in a real decoder: a
different target row at every position, chosen by the tokens so far.
"""

from __future__ import annotations

import dataclasses
import hashlib

import mlx.core as mx
import numpy as np

from ncm_verify.harness.checks import assert_chain_outcome_well_formed
from ncm_verify.harness.kernel_spec import BorrowingKernel, KernelSpec, SteppedKernel
from ncm_verify.oracles.exact import AutoregressiveFixture, LatentFixture, context_offsets, context_rows


def sample_categorical(rng: np.random.Generator, rows: np.ndarray) -> np.ndarray:
    """One id per row of ``[..., V]`` probabilities, by inverse CDF in float64."""
    cdf = np.cumsum(rows, axis=-1)
    draws = rng.random(rows.shape[:-1])[..., None] * cdf[..., -1:]
    return np.minimum((cdf <= draws).sum(axis=-1), rows.shape[-1] - 1)


def sampler_seed(seed: int, fixture) -> int:
    """The example's seed mixed with the fixture's tables.

    Hypothesis draws seed 0 first in every property: mixed, those examples still sample
    independent streams, so their chi-square tests are not correlated through the seed.
    """
    tables = [getattr(fixture, field.name) for field in dataclasses.fields(fixture)]
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(t).tobytes() for t in tables if isinstance(t, np.ndarray)))
    words = np.frombuffer(digest.digest()[:16], dtype=np.uint32).tolist()
    return int(np.random.SeedSequence([seed, *words]).generate_state(1)[0])


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
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = context_offsets(vocab, np.asarray(contexts).shape[1] + max_draft + 1)
    # Each context's mixed-radix index (as `context_rows` reads it), grown by one drafted token per position.
    index = context_rows(contexts, lengths, vocab) - offsets[lengths]
    for i in range(max_draft + 1):
        live = i <= num_draft
        rows = offsets[lengths + i] + index
        target[live, i] = fixture.target[rows[live]]
        if i == max_draft:
            break
        drafting = i < num_draft
        draft[drafting, i] = fixture.draft[rows[drafting]]
        tokens = sample_categorical(rng, draft[:, i])
        drafts[drafting, i] = tokens[drafting]
        index = index * vocab + np.where(drafting, tokens, 0)
    return target, draft, drafts


def run_chain(
    impl,
    fixture: AutoregressiveFixture,
    *,
    batch: int,
    max_draft: int,
    mixed: bool,
    seed: int,
    dtype=mx.float32,
    greedy: bool = False,
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
    for round_seed in round_seeds(sampler_seed(seed, fixture), length):
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
                mx.array(target, dtype=dtype),
                mx.array(draft, dtype=dtype),
                draft_ids,
                key=mx.random.key(round_seed),
                num_draft=draft_lengths,
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
    fixture: AutoregressiveFixture, *, caps: np.ndarray, max_draft: int, rng, dtype=mx.float32
) -> tuple:
    """Kernel arguments of one chain round at the empty context: (target, draft, drafts, num_draft).

    Sequence b drafts ``caps[b]`` tokens, fewer when the fixture is too short.
    """
    batch = len(caps)
    num_draft = np.maximum(np.minimum(caps, fixture.length - 1), 0)
    target, draft, drafts = chain_round_inputs(
        fixture, np.zeros((batch, 0), dtype=np.int64), np.zeros(batch, dtype=np.int64), num_draft, max_draft, rng
    )
    return (
        mx.array(target, dtype=dtype),
        mx.array(draft, dtype=dtype),
        mx.array(drafts, dtype=mx.int32),
        mx.array(num_draft, dtype=mx.int32),
    )


@dataclasses.dataclass
class FirstRound:
    """One chain round at the empty context: per sequence its drafts, accepted count and emitted token."""

    num_draft: np.ndarray
    num_accepted: np.ndarray
    emitted: np.ndarray


def run_first_round(
    impl, fixture: AutoregressiveFixture, *, batch: int, max_draft: int, seed: int, verify: str = "verify_chain"
) -> FirstRound:
    """One round in which each sequence drafts a uniformly drawn 0..`max_draft` tokens (mixed lengths).

    `verify` names the entry point: any kernel with the chain's arguments and outcome (``verify_block``).
    """
    seed = sampler_seed(seed, fixture)
    rng = np.random.default_rng(seed)
    caps = rng.integers(0, max_draft + 1, size=batch)
    target, draft, drafts, num_draft = first_round_inputs(fixture, caps=caps, max_draft=max_draft, rng=rng)
    outcome = getattr(impl, verify)(target, draft, drafts, key=mx.random.key(seed), num_draft=num_draft)
    drafts, num_draft = np.array(drafts), np.array(num_draft).astype(np.int64)
    assert_chain_outcome_well_formed(outcome, drafts, num_draft, fixture.vocab)
    tokens = np.array(outcome.tokens).astype(np.int64)
    accepted = np.array(outcome.num_accepted).astype(np.int64)
    return FirstRound(num_draft, accepted, np.take_along_axis(tokens, accepted[:, None], axis=1)[:, 0])


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
        batched(fixture.target_latent, batch, dtype),
        batched(fixture.draft_latent, batch, dtype),
        mx.array(draft_latent, dtype=mx.int32),
        batched(fixture.target_tokens, batch, dtype),
        batched(fixture.draft_tokens, batch, dtype),
        mx.array(draft_tokens, dtype=mx.int32),
    )


def factorized_draw(fixture: LatentFixture, *, batch: int, rng, dtype=mx.float32) -> tuple[np.ndarray, tuple]:
    """The target samples z ~ p(z); both models condition on it: z and the three kernel arguments."""
    latent = sample_categorical(rng, np.broadcast_to(fixture.target_latent, (batch, len(fixture.target_latent))))
    target, draft = fixture.target_tokens[latent], fixture.draft_tokens[latent]
    draft_tokens = sample_categorical(rng, draft)
    return latent, (mx.array(target, dtype=dtype), mx.array(draft, dtype=dtype), mx.array(draft_tokens, dtype=mx.int32))


def run_latent_chain(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> LatentRun:
    """Latent-chain verification of a batch of drafts; returns what it emitted."""
    seed = sampler_seed(seed, fixture)
    inputs = latent_chain_inputs(fixture, batch=batch, rng=np.random.default_rng(seed), dtype=dtype)
    outcome = impl.verify_latent_chain(*inputs, key=mx.random.key(seed))
    return LatentRun(np.array(outcome.latent).astype(np.int64), np.array(outcome.tokens).astype(np.int64))


def run_factorized(impl, fixture: LatentFixture, *, batch: int, seed: int, dtype=mx.float32) -> LatentRun:
    """Factorised verification of a batch of drafts; returns the latent each was drafted under and the tokens."""
    seed = sampler_seed(seed, fixture)
    latent, inputs = factorized_draw(fixture, batch=batch, rng=np.random.default_rng(seed), dtype=dtype)
    tokens = np.array(impl.verify_factorized(*inputs, key=mx.random.key(seed)).tokens).astype(np.int64)
    return LatentRun(latent.astype(np.int64), tokens)


SIXTEEN_BITS = 2**16


def make_wide_columns(narrow: int, vocab: int, *, seed: int) -> np.ndarray:
    """`narrow` distinct ids in [0, `vocab`): V - 1 first, then ids above 65 535 each beside its 16-bit alias."""
    rng = np.random.default_rng(seed)
    high = np.concatenate([[vocab - 1], rng.integers(SIXTEEN_BITS, vocab, size=narrow)])
    # Random ids after the pairs: a vocabulary just past 2^16 has few distinct pairs.
    candidates = np.concatenate([np.stack([high, high - SIXTEEN_BITS], axis=1).ravel(), rng.choice(vocab, 2 * narrow)])
    _, first = np.unique(candidates, return_index=True)
    return rng.permutation(candidates[np.sort(first)][:narrow])


@dataclasses.dataclass
class KernelCase:
    """One batch of inputs for a kernel: its spec, the arguments it holds in order, the draft lengths, options."""

    spec: KernelSpec
    args: tuple
    num_draft: mx.array | None = None
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def batch(self) -> int:
        return self.args[0].shape[0]

    def call(self, impl, key, **options):
        """The implementation's ``verify_*`` on these inputs."""
        return self.spec.call(impl, self.args, self.num_draft, key, **self.options, **options)

    def stepped(self, lacking: str) -> SteppedKernel:
        """The case's spec, refused (``lacking`` says what it lacks) unless it has an apply step of its own."""
        if not isinstance(self.spec, SteppedKernel):
            raise ValueError(f"kernel: {self.spec.name} {lacking}")
        return self.spec

    def apply(self, impl, uniforms):
        """The implementation's ``apply_*`` on these inputs, given its uniforms."""
        return self.stepped("has no apply step").call_apply(impl, self.args, self.num_draft, uniforms, **self.options)

    def uniform_shape(self) -> tuple[int, ...]:
        """Shape of the uniforms `apply` takes: ``[B, 2, columns]``."""
        return (self.batch, 2, self.stepped("takes no uniforms").uniform_columns(self.args))

    @property
    def vocab(self) -> int:
        """The token vocabulary V (latent codes are not tokens)."""
        return self.args[self.spec.positions("probs")[0]].shape[-1]

    def widen(self, columns: np.ndarray, vocab: int) -> KernelCase:
        """The same case over `vocab` ids: token column j becomes id ``columns[j]``, the rest have mass 0."""
        args = list(self.args)
        for i in self.spec.positions("probs"):
            narrow = np.array(args[i].astype(mx.float32))
            wide = np.zeros(narrow.shape[:-1] + (vocab,), dtype=np.float32)
            wide[..., columns] = narrow
            args[i] = mx.array(wide, dtype=args[i].dtype)
        for i in self.spec.positions("ids"):
            narrow = np.array(args[i]).astype(np.int64)
            args[i] = mx.array(np.where(narrow >= 0, columns[np.maximum(narrow, 0)], narrow), dtype=args[i].dtype)
        return dataclasses.replace(self, args=tuple(args))

    def cast(self, dtype) -> KernelCase:
        """The same case with its probabilities in `dtype` (ids untouched)."""
        return dataclasses.replace(
            self, args=tuple(a.astype(dtype) if mx.issubdtype(a.dtype, mx.floating) else a for a in self.args)
        )

    def rows(self, start: int, stop: int) -> KernelCase:
        """Sequences start..stop of the batch."""
        num_draft = None if self.num_draft is None else self.num_draft[start:stop]
        return dataclasses.replace(self, args=tuple(a[start:stop] for a in self.args), num_draft=num_draft)

    def emitted_target_probability(self, outcome) -> np.ndarray:
        """The target's probability of every emitted token (and latent)."""
        return self.stepped("does not say what it emits").emitted_target_probability(self, outcome)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The arguments as NumPy arrays (probabilities in float32)."""
        return tuple(
            np.array(a.astype(mx.float32)) if mx.issubdtype(a.dtype, mx.floating) else np.array(a) for a in self.args
        )


def make_kernel_case(
    spec: KernelSpec, fixture, *, batch: int, seed: int, max_draft: int = 2, options: dict | None = None
) -> KernelCase:
    """Inputs for the kernel of `spec` from a fixture its cases are built from, with its `options` fixed."""
    if not isinstance(spec, SteppedKernel):
        borrowed = spec.cases_from if isinstance(spec, BorrowingKernel) else None
        raise ValueError(f"kernel: {spec.name} has no cases of its own (it borrows {borrowed}'s)")
    rng, options = np.random.default_rng(seed), options or {}
    arguments = spec.make_arguments(fixture, batch=batch, rng=rng, max_draft=max_draft, **options)
    if spec.lengths is None:
        return KernelCase(spec, arguments, options=options)
    return KernelCase(spec, arguments[:-1], arguments[-1], options)


def make_nearly_equal_rejection(
    spec: KernelSpec, *, batch: int, positions: int, vocab: int, mass: float, seed: int
) -> tuple[KernelCase, np.ndarray]:
    """Drafts q(x) = p(x) + `mass` at the drafted x, the mass taken from one other id `s`.

    Every draft has p(x) < q(x), so at a uniform just below 1 each is rejected, and
    the residual max(p - q, 0) is `mass` at `s` alone: the only correction allowed.
    For a kernel taking (target, draft, draft ids), such as chain and factorized (a kernel with draft
    lengths drafts all `positions`). Returns the case and ``s [B, positions]``.
    """
    rng = np.random.default_rng(seed)
    rows = positions + spec.bonus_row
    target = 0.5 * rng.dirichlet(np.ones(vocab), size=(batch, rows)) + 0.5 / vocab  # every id above mass
    drafts = rng.integers(0, vocab, size=(batch, positions))
    source = (drafts + rng.integers(1, vocab, size=drafts.shape)) % vocab
    draft = target[:, :positions].copy()
    np.put_along_axis(draft, drafts[..., None], np.take_along_axis(draft, drafts[..., None], -1) + mass, -1)
    np.put_along_axis(draft, source[..., None], np.take_along_axis(draft, source[..., None], -1) - mass, -1)
    args = (mx.array(target, dtype=mx.float32), mx.array(draft, dtype=mx.float32), mx.array(drafts, dtype=mx.int32))
    num_draft = None if spec.lengths is None else mx.full((batch,), positions, dtype=mx.int32)
    return KernelCase(spec, args, num_draft), source


@dataclasses.dataclass
class StepCase:
    """One step of a kernel: its inputs in their dtype, the same values in float64, and uniforms.

    ``exact_args`` hold exactly the numbers the kernel reads (half rows widened), draft
    lengths last where the kernel takes them; ``uniforms`` are float32 ``[B, 2, columns]``.
    """

    case: KernelCase
    exact_args: tuple
    uniforms: np.ndarray
    dtype: str

    def describe(self) -> str:
        """A short account of the inputs for failure messages."""
        shapes = ", ".join(str(tuple(a.shape)) for a in self.case.args)
        spec = self.case.spec
        lengths = ""
        if spec.lengths is not None and self.case.num_draft is not None:
            lengths = f", {spec.lengths.name}={np.array(self.case.num_draft).tolist()}"
        ids = "".join(f", {a.name}={np.array(self.case.args[i]).tolist()}" for i, a in self._node_arguments())
        options = "".join(f", {name}={value!r}" for name, value in self.case.options.items())
        return (
            f"{self.case.stepped('has no apply step').apply}({self.dtype} {shapes}{ids}{lengths}{options}, "
            f"uniforms={self.uniforms.tolist()})"
        )

    def _node_arguments(self):
        """Node-index arguments (a tree's parents): what a reader needs to redraw the tree."""
        return [(i, a) for i, a in enumerate(self.case.spec.positional) if a.role == "nodes"]


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


def make_step_case(
    spec: KernelSpec, arrays: tuple, dtype: str, uniforms: np.ndarray | None = None, options: dict | None = None
) -> StepCase:
    """A `StepCase` from float64 probabilities and integer ids (draft lengths last), rounded to `dtype`."""
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
    num_draft = None if spec.lengths is None else rounded.pop()
    return StepCase(KernelCase(spec, tuple(rounded), num_draft, options or {}), exact_args, uniforms, dtype)
