"""Every Hypothesis strategy of the suite. Strategies are plural nouns."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import mlx.core as mx
import numpy as np
from hypothesis import Phase, event, settings
from hypothesis import strategies as st

from ncm_verify.harness.run_state import run_state

seeds = st.integers(min_value=0, max_value=2**32 - 1)
"""Sampler seeds: drawn by Hypothesis so that every failure reproduces from its example."""


table_seeds = st.integers(min_value=0, max_value=2**32 - 1).map(int)
"""Fixture table seeds: a strategy apart from `seeds`, so Hypothesis never copies one into the other."""


def fresh_law_settings() -> settings:
    """The loaded profile without its target phase: for properties that test a law per example.

    Targeting can only vary an example's last draws (the sampler seed), so it re-tests one
    law; informative laws are drawn by construction instead (see `REJECTING_RELATIONS`).
    """
    return settings(phases=[phase for phase in settings.default.phases if phase is not Phase.target])


# --- NCM configs and sequences (prefix caching, claims C1-C4) ---


@st.composite
def ncm_configs(draw, config_type, *, masks=("ncm", "prefix_lm", "causal"), dtypes=("float32",), min_prefix_length=1):
    """Tiny NCM configs (d_model <= 32, layers <= 2) built with `config_type(**fields)`."""
    d_model = draw(st.sampled_from([8, 16, 32]), label="d_model")
    levels = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="level_sizes")
    return config_type(
        vocab_size=draw(st.integers(2, 6), label="vocab_size"),
        prefix_length=draw(st.integers(min_prefix_length, 6), label="prefix_length"),
        level_sizes=tuple(levels),
        codebook_size=draw(st.integers(1, 4), label="codebook_size"),
        d_model=d_model,
        num_heads=draw(st.sampled_from([h for h in (1, 2, 4) if d_model % h == 0]), label="num_heads"),
        num_layers=draw(st.integers(1, 2), label="num_layers"),
        mask=draw(st.sampled_from(masks), label="mask"),
        dtype=draw(st.sampled_from(dtypes), label="dtype"),
        seed=draw(st.integers(0, 2**16), label="model_seed"),
    )


def prefixes(config, length=None):
    """Prefix token ids for `config` (lists of `length`, default its prefix length)."""
    size = config.prefix_length if length is None else length
    return st.lists(st.integers(0, config.vocab_size - 1), min_size=size, max_size=size)


@st.composite
def distinct_prefixes(draw, config, min_size: int, max_size: int):
    """Between `min_size` and `max_size` distinct prefixes of `config`, fewer only where fewer exist.

    Built, not filtered: a small vocabulary and prefix (vocab 2, length 2: four prefixes) made
    ``st.lists(..., unique_by=tuple)`` reject a third of its examples. Each prefix is an index's digits in
    base ``vocab_size``, the indices drawn distinct (a permutation where the space is small).
    """
    vocab, length = config.vocab_size, config.prefix_length
    space = vocab**length
    count = draw(st.integers(min(min_size, space), min(max_size, space)))
    if space <= 4 * max_size:
        indices = draw(st.permutations(range(space)))[:count]
    else:
        indices = draw(st.lists(st.integers(0, space - 1), min_size=count, max_size=count, unique=True))
    return [[(index // vocab**position) % vocab for position in range(length)] for index in indices]


def level_fillings(config):
    """Contents of every generated slot: tokens or the placeholder (id `vocab_size`)."""
    size = sum(config.level_sizes)
    return st.lists(st.integers(0, config.vocab_size), min_size=size, max_size=size)


# --- speculative fixtures ---------------------------------------------------------

ROW_WEIGHTS = np.array([0, 0, 1, 1, 2, 3, 5, 8])
"""Small integer weights: zeros, ties and exactly representable ratios are common."""

DRAFT_RELATIONS = (
    "independent",
    "equal",
    "some_rows_equal",
    "argmax_of_target",
    "disjoint_support",
    "nearly_equal",
)
"""How a draft relates to its target: each reaches a corner published tests miss."""
REJECTING_RELATIONS = ("independent", "some_rows_equal", "disjoint_support")
"""Relations with rejection mass by construction: the sampled laws exercise the residual."""
RESIDUAL_MASSES = (1e-6, 1e-5, 1e-4, 1e-3)
"""Total variation of a `nearly_equal` draft: the residual's mass, down to where float32 still sees it."""


def make_rows(rng: np.random.Generator, count: int, vocab: int, *, one_hot: bool = False) -> np.ndarray:
    """``[count, vocab]`` float64 probability rows with zeros, ties and one-hot rows."""
    weights = rng.choice(ROW_WEIGHTS, size=(count, vocab)).astype(np.float64)
    if one_hot:
        weights = np.eye(vocab)[rng.integers(0, vocab, size=count)]
    empty = weights.sum(axis=1) == 0
    weights[empty, rng.integers(0, vocab, size=int(empty.sum()))] = 1.0
    return weights / weights.sum(axis=1, keepdims=True)


def make_nearly_equal_rows(rng: np.random.Generator, target: np.ndarray) -> np.ndarray:
    """`target` with a mass from `RESIDUAL_MASSES` moved, per row, from a likely id to another id.

    The other id may lie outside the target's support (q > 0 = p), and the residual
    max(p - q, 0) then holds exactly the moved mass.
    """
    count, vocab = target.shape
    if vocab < 2:  # a codebook of one code: nowhere to move mass
        return target.copy()
    rows = np.arange(count)
    source = np.argmax(target, axis=1)
    sink = (source + rng.integers(1, vocab, size=count)) % vocab
    mass = rng.choice(RESIDUAL_MASSES, size=count)
    draft = target.copy()
    draft[rows, source] -= mass
    draft[rows, sink] += mass
    return draft


def make_draft_rows(rng: np.random.Generator, target: np.ndarray, relation: str) -> np.ndarray:
    """Draft rows related to `target` as `relation` says (see `DRAFT_RELATIONS`)."""
    count, vocab = target.shape
    independent = make_rows(rng, count, vocab)
    if relation == "equal":
        return target.copy()
    if relation == "some_rows_equal":
        return np.where(rng.random((count, 1)) < 0.5, target, independent)
    if relation == "argmax_of_target":  # a greedy draft: the q = 0 where p > 0 corner
        return np.eye(vocab)[np.argmax(target, axis=1)]
    if relation == "disjoint_support":  # draft mass mostly where the target has none
        flipped = np.where(target > 0, 0.0, 1.0) + 1e-3 * independent
        return flipped / flipped.sum(axis=1, keepdims=True)
    if relation == "nearly_equal":
        return make_nearly_equal_rows(rng, target)
    return independent


def mean_total_variation(target: np.ndarray, draft: np.ndarray) -> float:
    """Mean TV(p, q) over rows: the rejection mass of a draft."""
    return float(0.5 * np.abs(target - draft).sum(axis=-1).mean())


def table_generator(table_seed: int, *shape_and_relations) -> np.random.Generator:
    """The tables' generator, seeded by every draw that shapes the fixture, not the seed alone.

    Hypothesis often draws one seed (0 first) beside different sizes or relations, and its
    mutator copies one draw over another (the sampler seed, G) leaving the tables alone.
    Mixing the sizes, relations and a property's other draws (its salt) in makes each of
    those examples a new law instead of one law re-tested.
    """
    words = [RELATION_WORDS.get(x, x) if isinstance(x, str) else int(x) for x in shape_and_relations]
    return np.random.default_rng([table_seed, *words])


RELATION_WORDS = {relation: i for i, relation in enumerate(DRAFT_RELATIONS)}


def make_autoregressive_fixture(
    vocab: int, length: int, relation: str, one_hot_target: bool, table_seed: int, salt: tuple[int, ...] = ()
):
    """Tables whose rows differ by context; the call Hypothesis prints to rebuild a drawn fixture."""
    from ncm_verify.oracles.exact import AutoregressiveFixture

    rng = table_generator(table_seed, vocab, length, relation, one_hot_target, *salt)
    contexts = sum(vocab**t for t in range(length))
    target = make_rows(rng, contexts, vocab, one_hot=one_hot_target and relation != "equal")
    draft = make_draft_rows(rng, target, relation)
    return AutoregressiveFixture(target=target, draft=draft, vocab=vocab, length=length)


@st.composite
def autoregressive_fixtures(
    draw,
    max_vocab: int = 8,
    max_length: int = 4,
    max_outcomes: int = 4096,
    min_length: int = 1,
    one_hot_targets=st.booleans(),
    relations=st.sampled_from(DRAFT_RELATIONS),
    salt: tuple[int, ...] = (),
):
    """Target and draft tables p(x_t | x_<t), q(x_t | x_<t) whose rows differ by context.

    A `salt` (the example's other draws) is mixed into the tables: see `table_generator`.
    """
    vocab = draw(fixture_vocabularies(max_vocab, min_length, max_outcomes), label="vocab")
    longest = max(t for t in range(min_length, max_length + 1) if vocab**t <= max_outcomes)
    length = draw(st.integers(min_length, longest), label="length")
    salt = tuple(int(x) for x in salt)
    return draw(autoregressive_fixture_calls(vocab, length, relations, one_hot_targets, salt), label="fixture")


@functools.lru_cache(maxsize=64)
def fixture_vocabularies(max_vocab: int, min_length: int, max_outcomes: int):
    """Vocabularies in [2, `max_vocab`] with a sequence of `min_length` within `max_outcomes` (built once)."""
    return st.integers(2, max_vocab).filter(lambda v: v**min_length <= max_outcomes)


@functools.lru_cache(maxsize=1024)
def autoregressive_fixture_calls(vocab: int, length: int, relations, one_hot_targets, salt: tuple[int, ...]):
    """The `make_autoregressive_fixture` calls of one size, built once: a fresh strategy is validated anew."""
    return st.builds(
        make_autoregressive_fixture,
        vocab=st.just(vocab),
        length=st.just(length),
        relation=relations,
        one_hot_target=one_hot_targets,
        table_seed=table_seeds,
        salt=st.just(salt),
    )


def make_latent_fixture(
    codes: int,
    positions: int,
    vocab: int,
    latent_relation: str,
    token_relation: str,
    table_seed: int,
    salt: tuple[int, ...] = (),
):
    """One NCM level from its sizes, relations and seed; the call Hypothesis prints to rebuild it."""
    from ncm_verify.oracles.exact import LatentFixture

    rng = table_generator(table_seed, codes, positions, vocab, latent_relation, token_relation, *salt)
    target_latent = make_rows(rng, 1, codes)
    target_tokens = make_rows(rng, codes * positions, vocab)
    return LatentFixture(
        target_latent=target_latent[0],
        target_tokens=target_tokens.reshape(codes, positions, vocab),
        draft_latent=make_draft_rows(rng, target_latent, latent_relation)[0],
        draft_tokens=make_draft_rows(rng, target_tokens, token_relation).reshape(codes, positions, vocab),
    )


@st.composite
def latent_fixtures(
    draw,
    max_codes: int = 4,
    max_positions: int = 3,
    max_vocab: int = 6,
    max_outcomes: int = 256,
    relations=st.sampled_from(DRAFT_RELATIONS),
    salt: tuple[int, ...] = (),
):
    """One NCM level: p(z), p(x_i | z), q(z), q(x_i | z) with related drafts, salted as `autoregressive_fixtures`."""
    codes = draw(st.integers(1, max_codes), label="codebook size")
    vocab = draw(st.integers(2, max_vocab), label="vocab")
    longest = max(n for n in range(1, max_positions + 1) if codes * vocab**n <= max_outcomes)
    positions = draw(st.integers(1, longest), label="positions")
    salt = tuple(int(x) for x in salt)
    return draw(latent_fixture_calls(codes, positions, vocab, relations, salt), label="fixture")


@functools.lru_cache(maxsize=1024)
def latent_fixture_calls(codes: int, positions: int, vocab: int, relations, salt: tuple[int, ...]):
    """The `make_latent_fixture` calls of one size, built once (as `autoregressive_fixture_calls`)."""
    return st.builds(
        make_latent_fixture,
        codes=st.just(codes),
        positions=st.just(positions),
        vocab=st.just(vocab),
        latent_relation=relations,
        token_relation=relations,
        table_seed=table_seeds,
        salt=st.just(salt),
    )


draft_lengths = st.integers(min_value=0, max_value=4)
"""G: drafts per round, zero included (then only the target's own token is emitted)."""
drafting_lengths = st.integers(min_value=1, max_value=4)
"""G for examples that judge acceptance: at least one draft in every example."""


FLOAT_DTYPES = ("float32", "float16", "bfloat16")
LARGE_VOCABULARIES = st.integers(2**16 + 1, 2**17 + 7)
"""Vocabularies past 16-bit ids (65 536): real tokenizers (128 256) have them."""
LARGE_VOCAB_BATCH = 8
"""Sequences of a large-vocabulary case: its rows are dense, so the batch stays small."""


def make_case(
    kernel,
    fixture,
    *,
    batch: int,
    max_draft: int,
    draft_seed: int,
    wide_vocab: int | None = None,
    column_seed: int = 0,
    dtype: str = "float32",
    options: dict | None = None,
):
    """A case of `kernel` (a `KernelSpec`) from a fixture with its `options`, widened to `wide_vocab` ids and cast.

    The call Hypothesis prints to rebuild it.
    """
    from ncm_verify.harness.drivers import make_kernel_case, make_wide_columns

    case = make_kernel_case(kernel, fixture, batch=batch, seed=draft_seed, max_draft=max_draft, options=options)
    if wide_vocab is not None:
        case = case.widen(make_wide_columns(case.vocab, wide_vocab, seed=column_seed), wide_vocab)
    return case.cast(getattr(mx, dtype))


def provided(kernels) -> list:
    """Those of `kernels` (specs) the module under test provides (`RunState.kernels`); all when it provides none."""
    names = run_state().kernels
    return [k for k in kernels if names is None or k.name in names] or list(kernels)


@functools.lru_cache(maxsize=64)
def provided_kernels(kernels: tuple):
    """One of `kernels` (specs) the module under test provides, decided when drawn (the run state knows then)."""
    return st.just(None).flatmap(lambda _: st.sampled_from(provided(kernels)))


@st.composite
def kernel_cases(draw, kernels, batch: int = 64, dtypes=("float32",), large_vocab=st.booleans(), drafting=False):
    """A batch of valid inputs for one of `kernels` (specs of sampling kernels) the module provides, drafts from q.

    A large-vocabulary case spreads a small fixture's columns over ids up to V - 1 > 65 535,
    id x beside its 16-bit alias x - 65 536, so a kernel that truncates ids reads the wrong column.
    With `drafting`, a case with draft lengths drafts at least one token in some sequence.
    """
    kernel = draw(provided_kernels(tuple(kernels)), label="kernel")
    wide = draw(large_vocab, label="vocabulary above 65 536")
    rows = min(batch, LARGE_VOCAB_BATCH) if wide else batch
    return draw(kernel_case_calls(kernel, rows, tuple(dtypes), drafting, wide), label="case")


@functools.lru_cache(maxsize=256)
def kernel_case_calls(kernel, rows: int, dtypes: tuple[str, ...], drafting: bool, wide: bool):
    """The `make_case` calls of `kernel` (a spec) with `rows` sequences, built once per kernel and size."""
    return st.builds(
        make_case,
        kernel=st.just(kernel),
        fixture=kernel.fixtures(drafting=drafting),
        batch=st.just(rows),
        max_draft=drafting_lengths if drafting else draft_lengths,
        draft_seed=seeds,
        wide_vocab=LARGE_VOCABULARIES if wide else st.none(),
        column_seed=seeds if wide else st.just(0),
        dtype=st.sampled_from(dtypes),
        options=kernel_options(kernel),
    )


def kernel_options(kernel, fixed: dict | None = None):
    """The keyword options of a case of `kernel` (a spec): each drawn from the values it takes, or `fixed`."""
    drawn = {option.name: st.sampled_from(option.values) for option in kernel.options}
    return st.fixed_dictionaries({**drawn, **{name: st.just(value) for name, value in (fixed or {}).items()}})


# --- autoregressive decoding, mlx-lm conventions (claim C8) -----------------------

invalid_budgets = st.one_of(
    st.integers(max_value=0),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=2),
)
"""Output budgets that are not positive integers: 0, negatives, floats (2.0 too), booleans, None, strings."""

update_sizes = st.lists(st.integers(1, 4), min_size=1, max_size=8)
"""Positions per cache update: one at a time (decoding) or several (prefill, verification)."""


# --- level drafting on the model (claim C6 on the NCM) ---------------------------------


@st.composite
def level_drafting_configs(
    draw, config_type, *, max_outcomes: int = 1024, dtypes=("float32",), masks=("ncm", "prefix_lm", "causal")
):
    """Tiny NCMs whose whole-generation law can be enumerated: vocabulary <= 4, two or three
    levels of one or two slots, codebook <= 3, at most `max_outcomes` (latents, tokens) outcomes."""
    # Built to fit `max_outcomes` rather than filtered: a filter turned 13 of 28 examples away.
    codes = draw(st.integers(1, 3), label="codebook_size")
    vocabs = [v for v in range(2, 5) if (codes * v) ** 2 <= max_outcomes] or [2]
    vocab = draw(st.sampled_from(vocabs), label="vocab_size")
    fitting = [
        sizes
        for length in (2, 3)
        for sizes in itertools.product((1, 2), repeat=length)
        if int(np.prod([codes * vocab**n for n in sizes])) <= max_outcomes
    ] or [(1, 1)]
    levels = draw(st.sampled_from(fitting), label="level_sizes")
    d_model = draw(st.sampled_from([8, 16]), label="d_model")
    return config_type(
        vocab_size=vocab,
        prefix_length=draw(st.integers(1, 3), label="prefix_length"),
        level_sizes=tuple(levels),
        codebook_size=codes,
        d_model=d_model,
        num_heads=draw(st.sampled_from([1, 2]), label="num_heads"),
        num_layers=draw(st.integers(1, 2), label="num_layers"),
        mask=draw(st.sampled_from(masks), label="mask"),
        dtype=draw(st.sampled_from(dtypes), label="dtype"),
        seed=draw(st.integers(0, 2**16), label="model_seed"),
    )


DRAFT_MODELS = ("perturbed 0.3", "perturbed 1", "perturbed 3", "smaller")
"""How a draft NCM relates to its target: the target's weights moved by a relative scale, or a
smaller network (one layer, d_model 8) sharing vocabulary, codebook and layout."""

draft_models = st.sampled_from(DRAFT_MODELS)
level_draft_counts = st.integers(1, 3)
"""k: levels drafted per target pass."""


# --- tiny mlx-lm models (claims C7, C8 on mlx-lm's own code) -------------------------


def tiny_specs(spec_type, kind: str):
    """`spec_type(kind=kind, vocab_size, seed, window)` for a tiny mlx-lm model of `kind`."""
    return st.builds(
        spec_type,
        kind=st.just(kind),
        vocab_size=st.sampled_from([8, 16, 32]),
        seed=st.integers(0, 2**16),
        window=st.integers(2, 5),
    )


@st.composite
def hybrid_specs(draw, spec_type, kinds: dict[str, tuple[str, str, tuple[str, ...] | None]], *, keep: bool = False):
    """`spec_type(kind, layers, vocab_size, seed, window, keep)`: a tiny mlx-lm model mixing attention (A),
    recurrent (R) and sliding-window (S) layers.

    `kinds` maps a kind to (its letters, the letters every pattern holds, its
    only patterns or None): one to three layers. Windows of 1-4 entries are
    smaller than a generation, so a ring wraps, often inside one verify pass.
    With `keep`, a llama whose last layer is sliding may keep a prefix.
    """
    kind = draw(st.sampled_from(sorted(kinds)), label="model kind")
    letters, required, patterns = kinds[kind]
    if patterns is not None:
        layers = draw(st.sampled_from(patterns), label="layers")
    else:
        extra = draw(st.lists(st.sampled_from(letters), max_size=3 - len(required)), label="extra layers")
        layers = "".join(draw(st.permutations(list(required) + extra), label="layers"))
    window = draw(st.integers(1, 4), label="window")
    prefix = 0
    if keep and kind == "llama" and layers.endswith("S") and window > 1:
        prefix = draw(st.integers(0, window - 1), label="keep prefix")
    return spec_type(
        kind=kind,
        layers=layers,
        vocab_size=draw(st.sampled_from([8, 16, 32]), label="vocab_size"),
        seed=draw(st.integers(0, 2**16), label="seed"),
        window=window,
        keep=prefix,
    )


rollback_draft_lengths = st.integers(1, 8)
"""Drafts per speculative round over hybrid models: up to 8, so a verify pass outgrows every window drawn."""
rollback_batches = st.integers(1, 3)
"""Rows of a batched rollback: one, and more whose prompts differ."""


def token_lists(vocab_size: int, min_size: int, max_size: int):
    """Token id lists in [0, vocab_size)."""
    return st.lists(st.integers(0, vocab_size - 1), min_size=min_size, max_size=max_size)


# --- exact step checks (apply_* against float64): big ids, near-equal rows, drawn uniforms ---

LARGE_VOCAB = 1000
"""Above this vocabulary the fixtures shrink (batch, drafts, codes) to stay cheap."""
HIGH_IDS = 65536
"""Ids from here on do not fit 16 bits: large-vocabulary rows put mass on one of them."""
step_vocabs = st.one_of(
    st.sampled_from([65541, 100_003, 70001]), st.integers(2, 8), st.sampled_from([65541, 300, 65536, 100_003])
)
"""Vocabularies of one step: half above 2^16 (ids past 65 535), the rest tiny (ties, exact ratios) or medium."""
STEP_ROW_KINDS = ("small_weights", "sparse", "dense", "one_hot")
STEP_ONLY_RELATIONS = ("tiny_q_where_p_large",)
"""Relations only a step draws (`make_step_draft_rows`): q cut to a sliver of p at the target's likeliest ids."""
step_relations = st.one_of(st.just("nearly_equal"), st.sampled_from(DRAFT_RELATIONS + STEP_ONLY_RELATIONS))
"""Half the drafts nearly equal their target: a residual of tiny mass is where precision bugs hide."""
TINY_Q_DECADES = (-7.0, -3.0)
"""A `tiny_q_where_p_large` draft keeps 1e-7..1e-3 of p at the target's 1-3 likeliest ids (half rounds some to 0)."""
NEAR_EQUAL_DECADES = (-7.0, -3.0)
"""Each nearly equal row moves q around p by a relative scale log-uniform in 1e-7..1e-3 (its residual's mass ~0.4x)."""
STEP_DTYPES = ("float32", "float16", "float32", "bfloat16")
"""float32 twice as often: half rounding turns most nearly equal rows into equal ones."""
UNIFORM_KINDS = ("boundary", "random", "near_one", "boundary", "near_zero", "boundary")
"""Where a drawn uniform lies: some ulps from its decision's boundary (half of them), anywhere, next to 1 or 0."""
ulp_offsets = st.one_of(
    st.integers(-4, 4),
    st.builds(lambda exponent, sign: sign * 2**exponent, st.integers(3, 13), st.sampled_from([1, -1])),
    st.builds(lambda exponent, sign: sign * 2**exponent, st.integers(14, 16), st.sampled_from([1, -1])),
)
"""float32 ulps between a uniform and its boundary: within rounding, or up to 2^16 ulps (~4e-3) away."""


EXACT_UNITS = 2**24
"""Exactly summed rows hold integer multiples of 2^-24 summing to 1: float32 sums every prefix exactly in any order
(`tolerances.exactly_summed`), so a draw is judged to 2 ulps, not the any-order bound."""
MOVED_MASS_EXPONENTS = (1, 21)
"""An exactly summed draft moves 2^-m of its target's mass, m in 1..20: its residual's mass is a power of two."""


def make_exactly_summed_rows(rng: np.random.Generator, count: int, vocab: int) -> np.ndarray:
    """``[count, vocab]`` rows of integer multiples of 2^-24 summing to exactly 1 (dense, log-normal weights)."""
    weights = np.exp(2.0 * rng.standard_normal((count, vocab)))
    units = np.floor(weights / weights.sum(axis=1, keepdims=True) * EXACT_UNITS).astype(np.int64)
    units[np.arange(count), np.argmax(units, axis=1)] += EXACT_UNITS - units.sum(axis=1)
    return units * 2.0**-24


def make_exact_mass_moved_rows(rng: np.random.Generator, target: np.ndarray) -> np.ndarray:
    """Exactly summed `target` rows with 2^-m of their mass moved from their likeliest ids to a few others.

    q(x) is 0 or tiny where p(x) is largest (a large ratio p/q, a residual peaked there) and the residual's mass is
    exactly 2^-m, so its normalisation is exact too. Half the rows take it greedily, the likeliest id first; the
    others take an equal share from each of their 2-8 likeliest ids, so the residual has steps a correction's
    uniform can sit next to (greedy takes a small mass from one id: a residual without steps).
    """
    draft = np.rint(target * EXACT_UNITS).astype(np.int64)
    for row in draft:
        moved = EXACT_UNITS >> int(rng.integers(*MOVED_MASS_EXPONENTS))
        order = np.argsort(-row, kind="stable")
        givers = max(1, min(int(rng.integers(2, 9)), len(row) - 1))
        shares = np.zeros(len(row), np.int64)
        shares[:givers] = moved // givers
        shares[0] += moved - shares.sum()
        taken = np.minimum(row[order], shares)
        if rng.random() < 0.5 or taken.sum() != moved:  # greedy, or shares past what the likeliest ids hold
            before = np.cumsum(row[order]) - row[order]
            taken = np.minimum(row[order], np.maximum(moved - before, 0))
        receivers = order[taken == 0]
        if not len(receivers) or taken.sum() != moved:  # nowhere to move it: the draft equals its target
            continue
        row[order] -= taken
        chosen = rng.choice(receivers, size=min(8, len(receivers)), replace=False)
        row[chosen] += rng.multinomial(moved, np.full(len(chosen), 1.0 / len(chosen)))
    return draft * 2.0**-24


SMOLLM2_ROWS = Path(__file__).parents[1] / "data" / "fixtures" / "smollm2_rows.npz"
"""Real next-token logits of SmolLM2-135M (V = 49 152) at real prompts, float32 and quantised forms (built by
`python -m ncm_verify.mlx_lm_real.smollm2_rows`, its record inside): no model is needed to draw them."""
SMOLLM2_RELATIONS = ("quantized", "temperature", "top_p", "other_context", "argmax_of_quantized")
"""A real draft row beside its target (the float32 form's): the quantised form's row (nearly equal: real rounding),
at 1.5x the temperature, untruncated where the target is top-p truncated, another context's row, its argmax."""
smollm2_rows = st.sampled_from((False,) * 3 + (True,))
"""Whether a step case draws SmolLM2's rows: one in four (shrinks to the synthetic rows)."""
smollm2_temperatures = st.sampled_from((1.0, 0.7, 0.3))
smollm2_top_ps = st.sampled_from((1.0, 0.9))
SMOLLM2_VOCAB = 49_152


@functools.lru_cache(maxsize=1)
def smollm2_logits() -> dict[str, np.ndarray]:
    """The shipped logits, float64 ``[N, V]`` per form ("float32", "quantized")."""
    with np.load(SMOLLM2_ROWS) as data:
        return {name.removeprefix("logits_"): data[name].astype(np.float64) for name in data.files if "logits" in name}


def softmax_rows(logits: np.ndarray, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """softmax(logits / temperature) in float64, kept to the smallest top set of mass >= `top_p` (ties kept)."""
    scaled = logits / temperature
    rows = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    rows /= rows.sum(axis=-1, keepdims=True)
    if top_p < 1.0:
        ordered = -np.sort(-rows, axis=-1)
        before = np.cumsum(ordered, axis=-1) - ordered
        cut = np.where(before < top_p, ordered, np.inf).min(axis=-1, keepdims=True)
        rows = np.where(rows >= cut, rows, 0.0)
        rows /= rows.sum(axis=-1, keepdims=True)
    return rows


def make_smollm2_tables(
    rng: np.random.Generator, count: int, relation: str, temperature: float, top_p: float
) -> tuple[np.ndarray, np.ndarray]:
    """Target and draft rows ``[count, 49 152]`` from SmolLM2's logits, related as `relation` says."""
    logits = smollm2_logits()
    picks = rng.integers(0, len(logits["float32"]), size=count)
    top_p = 0.9 if relation == "top_p" else top_p
    target = softmax_rows(logits["float32"][picks], temperature, top_p)
    quantized = logits["quantized"][picks]
    if relation == "quantized":
        draft = softmax_rows(quantized, temperature, top_p)
    elif relation == "temperature":
        draft = softmax_rows(quantized, 1.5 * temperature, top_p)
    elif relation == "top_p":
        draft = softmax_rows(quantized, temperature)
    elif relation == "other_context":
        draft = softmax_rows(logits["quantized"][rng.integers(0, len(logits["quantized"]), count)], temperature)
    else:
        draft = np.zeros_like(target)
        np.put_along_axis(draft, np.argmax(quantized, axis=1)[:, None], 1.0, axis=1)
    return target, draft


def make_step_rows(rng: np.random.Generator, count: int, vocab: int, kind: str) -> np.ndarray:
    """``[count, vocab]`` float64 rows of `kind` (see `STEP_ROW_KINDS`); above 2^16 ids some mass sits past 65535."""
    if kind == "exactly_summed":
        return make_exactly_summed_rows(rng, count, vocab)
    if kind == "small_weights":
        return make_rows(rng, count, vocab)
    if kind == "dense":
        weights = np.exp(2.0 * rng.standard_normal((count, vocab)))
    else:
        weights = np.zeros((count, vocab))
        for row in weights:
            size = 1 if kind == "one_hot" else int(rng.integers(1, min(vocab, 32) + 1))
            ids = rng.choice(vocab, size=size, replace=False)
            if vocab > HIGH_IDS:
                ids[0] = rng.integers(HIGH_IDS, vocab)
            row[ids] = rng.random(size) + 0.05
    if vocab > HIGH_IDS:  # at least half the mass past 65 535, where a 16-bit id goes wrong
        low, high = weights[:, :HIGH_IDS].sum(axis=1), weights[:, HIGH_IDS:].sum(axis=1)
        weights[:, HIGH_IDS:] *= np.maximum(1.0, low / np.maximum(high, 1e-300))[:, None]
    return weights / weights.sum(axis=1, keepdims=True)


def make_tiny_q_rows(rng: np.random.Generator, target: np.ndarray) -> np.ndarray:
    """`target` with q cut to p * 10^-U(3, 7) at each row's 1-3 likeliest ids, the mass cut spread over the rest:
    large ratios p/q, residuals peaked where p is, and q in half precision near its smallest (subnormal) values."""
    draft = target.copy()
    vocab = target.shape[1]
    if vocab < 2:
        return draft
    for row, p in zip(draft, target):
        top = np.argsort(-p, kind="stable")[: int(rng.integers(1, min(3, vocab - 1) + 1))]
        cut = p[top] * (1.0 - 10.0 ** rng.uniform(*TINY_Q_DECADES, size=len(top)))
        row[top] -= cut
        others = np.setdiff1d(np.arange(vocab), top)
        spread = rng.random(len(others)) + 0.05
        row[others] += cut.sum() * spread / spread.sum()
    return draft


def make_step_draft_rows(rng: np.random.Generator, target: np.ndarray, relation: str) -> np.ndarray:
    """Draft rows for `target` as `relation` says; ``nearly_equal`` moves each row by its own tiny scale."""
    if relation == "exact_mass_moved":
        return make_exact_mass_moved_rows(rng, target)
    if relation == "tiny_q_where_p_large":
        return make_tiny_q_rows(rng, target)
    if relation == "nearly_equal":
        scale = 10.0 ** rng.uniform(*NEAR_EQUAL_DECADES, size=(len(target), 1))
        draft = target * np.exp(scale * rng.standard_normal(target.shape))
        return draft / draft.sum(axis=1, keepdims=True)
    if relation == "argmax_of_target":  # without an identity matrix: vocabularies reach 70 001
        draft = np.zeros_like(target)
        np.put_along_axis(draft, np.argmax(target, axis=1)[:, None], 1.0, axis=1)
        return draft
    return make_draft_rows(rng, target, relation)


def make_drafting_rows(target: np.ndarray, draft: np.ndarray, over_drafted: bool) -> np.ndarray:
    """Rows to sample drafts from: q, or (`over_drafted`) q's excess over p, where a draft risks rejection."""
    if not over_drafted:
        return draft
    excess = np.maximum(draft - target, 0.0)
    return np.where(excess.sum(axis=-1, keepdims=True) > 0, excess, draft)


def place_uniform(kind: str, offset: int, fraction: float, boundaries: np.ndarray) -> np.float32:
    """A float32 uniform strictly inside (0, 1), of `kind`, `offset` ulps from a chosen boundary."""
    steps = abs(offset) + 1
    if kind == "near_zero":
        # The smallest floats (subnormal) or a few grid steps of 2^-24 above 0.
        u = np.array([steps], np.int32).view(np.float32)[0] if fraction < 0.25 else np.float32(steps * 2.0**-24)
    elif kind == "near_one":
        u = np.float32(1.0 - steps * 2.0**-24)
    elif kind == "boundary" and len(boundaries):
        base = np.array([boundaries[int(fraction * len(boundaries))]], np.float32).view(np.int32)
        u = np.maximum(base + offset, 1).view(np.float32)[0]
    else:
        u = np.float32(fraction)
    return np.clip(u, np.float32(1e-45), np.float32(1.0 - 2.0**-24))


@st.composite
def step_uniforms(
    draw,
    kernel,
    args: tuple,
    shape: tuple[int, int, int],
    options: dict | None = None,
    *,
    kinds=UNIFORM_KINDS,
    offsets=ulp_offsets,
):
    """Float32 uniforms ``[B, 2, C]`` for one step of `kernel` (a spec) on float64 `args`, many near their boundaries.

    Row 0 first, then row 1 column by column: a correction's boundaries depend on the decisions before it.
    `kinds` are the places a uniform may take (`UNIFORM_KINDS`), `offsets` a strategy of ulps from a boundary.
    """
    size = int(np.prod(shape))
    kinds = draw(st.lists(st.sampled_from(kinds), min_size=size, max_size=size), label="uniform kinds")
    offsets = draw(st.lists(offsets, min_size=size, max_size=size), label="uniform ulp offsets")
    fractions = draw(
        st.lists(st.floats(0, 1, exclude_max=True), min_size=size, max_size=size), label="uniform fractions"
    )
    uniforms = np.full(shape, 0.5, dtype=np.float32)
    for index, (b, row, column) in enumerate(np.ndindex(*shape)):
        boundaries = ()
        if kinds[index] == "boundary":
            boundaries = kernel.boundaries(args, uniforms, b, row, column, **(options or {}))
        uniforms[b, row, column] = place_uniform(kinds[index], offsets[index], fractions[index], boundaries)
    return uniforms


@st.composite
def step_cases(
    draw,
    kernel,
    options: dict | None = None,
    *,
    vocabs=step_vocabs,
    row_kinds=STEP_ROW_KINDS,
    relations=None,
    dtypes=STEP_DTYPES,
    uniform_kinds=UNIFORM_KINDS,
    offsets=ulp_offsets,
    real_rows=smollm2_rows,
):
    """One step of `kernel` (a spec with an apply step): inputs, their float64 values and drawn uniforms.

    The kernel's keyword options are drawn, or fixed by `options`; the keywords narrow what is drawn (a vocabulary
    strategy, row kinds, a relation strategy, dtypes, uniform kinds and ulp offsets; `real_rows`, whether SmolLM2's
    rows are drawn: they fix the vocabulary, row kind and relation).
    """
    from ncm_verify.harness.drivers import make_step_case

    real = draw(real_rows, label="SmolLM2 rows")
    vocab = SMOLLM2_VOCAB if real else draw(vocabs, label="vocab")
    small = vocab <= LARGE_VOCAB
    batch = draw(st.integers(1, 16 if small else 4), label="batch")
    kind = "dense" if real else draw(st.sampled_from(row_kinds), label="target row kind")
    if relations is None:
        relations = step_relations if kernel.step_relations is None else kernel.step_relations
    relation = draw(st.sampled_from(SMOLLM2_RELATIONS) if real else relations, label="draft relation")
    temperature = draw(smollm2_temperatures, label="SmolLM2 temperature") if real else 1.0
    top_p = draw(smollm2_top_ps, label="SmolLM2 top-p") if real else 1.0
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    over_drafted = draw(st.booleans(), label="drafts only where q > p")
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    if real:
        event(f"step rows: SmolLM2 ({relation})")

    def tables(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        count = int(np.prod(shape[:-1]))
        if real and shape[-1] == SMOLLM2_VOCAB:  # a latent's codebook row stays synthetic
            target, draft = make_smollm2_tables(rng, count, relation, temperature, top_p)
        else:
            target = make_step_rows(rng, count, shape[-1], kind)
            draft = make_step_draft_rows(rng, target, "independent" if real else relation)
        return target.reshape(shape), draft.reshape(shape)

    fixed = draw(kernel_options(kernel, options), label="options")
    arrays, columns = kernel.step_arrays(
        draw, tables, rng, batch=batch, vocab=vocab, small=small, over_drafted=over_drafted, **fixed
    )
    step = make_step_case(kernel, arrays, dtype, options=fixed)
    shape = (batch, 2, columns)
    uniforms = step_uniforms(kernel, step.exact_args, shape, fixed, kinds=uniform_kinds, offsets=offsets)
    step.uniforms = draw(uniforms, label="uniforms")
    return step


# --- greedy steps: ties, masked rows, ids past 65 535 ---

greedy_vocabs = st.one_of(st.integers(1, 70), st.sampled_from([32, 4096, 65536, 65568, 100_003, 131_072]))
"""Greedy vocabularies: tiny (ties everywhere), multiples of 32 (a blockwise argmax) and not, past 2^16."""
GREEDY_SCORE_KINDS = ("ties", "masked", "all_masked", "distinct")
"""Score rows: small integers (many tied maxima), half -inf, whole rows -inf, or normal draws."""


def make_greedy_scores(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Float64 scores ``[..., V]`` of `kind`; past 2^16 ids, half the rows hold their maximum at a high id."""
    if kind == "distinct":
        scores = rng.standard_normal(shape)
    else:
        scores = rng.integers(-2, 3, size=shape).astype(np.float64)
        if kind != "ties":
            scores[rng.random(shape) < (1.0 if kind == "all_masked" else 0.5)] = -np.inf
    rows = scores.reshape(-1, shape[-1])
    if shape[-1] > HIGH_IDS:
        for row in rows[rng.random(len(rows)) < 0.5]:
            row[rng.integers(HIGH_IDS, shape[-1], size=2)] = np.max(row) + 1.0  # -inf rows stay masked
    return scores


def make_smollm2_scores(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """SmolLM2's logits ``[..., 49 152]`` of either form; half the rows top-p (0.9) masked to -inf, as samplers do."""
    logits = smollm2_logits()
    forms = [logits[form] for form in sorted(logits)]
    rows = np.stack(
        [forms[rng.integers(len(forms))][rng.integers(len(forms[0]))] for _ in range(int(np.prod(shape[:-1])))]
    )
    masked = rng.random(len(rows)) < 0.5
    rows[masked] = np.where(softmax_rows(rows[masked], 1.0, 0.9) > 0, rows[masked], -np.inf)
    return rows.reshape(shape)


@st.composite
def greedy_steps(draw):
    """Scores ``[B, G+1, V]`` (float64 and the dtype they go in as), drafts that match each argmax half the time."""
    real = draw(smollm2_rows, label="SmolLM2 rows")
    vocab = SMOLLM2_VOCAB if real else draw(greedy_vocabs, label="vocab")
    batch = draw(st.integers(1, 8 if vocab <= LARGE_VOCAB else 2), label="batch")
    max_draft = draw(draft_lengths, label="max drafts")
    kind = "smollm2" if real else draw(st.sampled_from(GREEDY_SCORE_KINDS), label="score kind")
    dtype = draw(st.sampled_from(STEP_DTYPES), label="dtype")
    rng = np.random.default_rng(draw(seeds, label="table seed"))
    if real:
        event("greedy scores: SmolLM2")
        scores = make_smollm2_scores(rng, (batch, max_draft + 1, vocab))
    else:
        scores = make_greedy_scores(rng, (batch, max_draft + 1, vocab), kind)
    # The values the kernel sees: rounding to half precision may tie what float64 told apart.
    scores = np.array(mx.array(scores.astype(np.float32)).astype(getattr(mx, dtype)).astype(mx.float32), np.float64)
    best = np.argmax(scores[:, :max_draft], axis=-1)
    drafts = np.where(rng.random(best.shape) < 0.5, best, rng.integers(0, vocab, size=best.shape))
    num_draft = rng.integers(0, max_draft + 1, size=batch)
    drafts = np.where(np.arange(max_draft)[None] < num_draft[:, None], drafts, -1)
    return scores, dtype, drafts, num_draft


# --- the source's NCM: what path (a) and path (b) draw besides a config ---

concept_starts = st.one_of(st.just(0), st.integers(1, 64), st.integers(65, 2**16))
"""Where the prefix's first position sits: 0, near it, or across the rotary range (base 10 000's longest
wavelength is 2 pi 10^4, about 62 832 positions): an offset a cache must keep and a port must not wrap or round."""

concept_batches = st.one_of(st.integers(1, 3), st.integers(4, 8))
"""Rows of a request: as many of 4-8 as of 1-3 (a bug that shows only past a few rows)."""

concept_prefix_lengths = st.one_of(st.integers(1, 8), st.integers(9, 64))
"""Prefix lengths of drawn instances (any length is theirs): short, or long (a checkpoint's context is 6-32)."""

concept_dtypes = st.sampled_from(("float32", "bfloat16", "float16"))
"""The dtype a drawn instance is built in (a config field of that name, where its config type has one)."""

concept_perturbations = st.one_of(st.none(), st.tuples(seeds, st.sampled_from((0.1, 0.5))))
"""How far a drawn instance moves from initialisation: not at all, or (seed, scale) for
`concept_instances.perturb_parameters` (every gain, bias and weight)."""


@st.composite
def concept_prefixes(draw, layout, *, batch=None, any_length=False):
    """``[B, P]`` token ids: P the layout's prefix length, or (for the reference's drawn instances,
    whose prefixes may be any length) `concept_prefix_lengths`; B `concept_batches` unless given."""
    length = draw(concept_prefix_lengths) if any_length else layout.prefix_length
    rows = batch if batch is not None else draw(concept_batches)
    row = st.lists(st.integers(0, layout.vocab_size - 1), min_size=length, max_size=length)
    return draw(st.lists(row, min_size=rows, max_size=rows))


@st.composite
def concept_codes(draw, layout, batch: int):
    """Every level's codes, level l ``[batch, n_l]`` ids of its own codebook (lists)."""
    return [
        draw(st.lists(st.lists(st.integers(0, size - 1), min_size=n, max_size=n), min_size=batch, max_size=batch))
        for n, size in zip(layout.level_lengths, layout.codebook_sizes)
    ]


@st.composite
def concept_sampling(draw, layout):
    """(temperature, top_k): greedy, peaked, plain and flat temperatures; top-k None or 1..max K."""
    temperature = draw(st.sampled_from((0.0, 0.5, 1.0, 2.0)))
    top_k = draw(st.one_of(st.none(), st.integers(1, max(layout.codebook_sizes))))
    return temperature, top_k
