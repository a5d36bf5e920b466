"""Every Hypothesis strategy of the suite. Strategies are plural nouns."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from hypothesis import Phase, settings
from hypothesis import strategies as st

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
def ncm_configs(draw, config_type, *, masks=("ncm", "prefix_lm", "causal"), dtypes=("float32",),
                min_prefix_length=1):
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


def level_fillings(config):
    """Contents of every generated slot: tokens or the placeholder (id `vocab_size`)."""
    size = sum(config.level_sizes)
    return st.lists(st.integers(0, config.vocab_size), min_size=size, max_size=size)


# --- speculative fixtures ---------------------------------------------------------

ROW_WEIGHTS = np.array([0, 0, 1, 1, 2, 3, 5, 8])
"""Small integer weights: zeros, ties and exactly representable ratios are common."""

DRAFT_RELATIONS = (
    "independent", "equal", "some_rows_equal", "argmax_of_target", "disjoint_support", "nearly_equal",
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
    from ncm_verify.exact import AutoregressiveFixture

    rng = table_generator(table_seed, vocab, length, relation, one_hot_target, *salt)
    contexts = sum(vocab**t for t in range(length))
    target = make_rows(rng, contexts, vocab, one_hot=one_hot_target and relation != "equal")
    draft = make_draft_rows(rng, target, relation)
    return AutoregressiveFixture(target=target, draft=draft, vocab=vocab, length=length)


@st.composite
def autoregressive_fixtures(
    draw, max_vocab: int = 8, max_length: int = 4, max_outcomes: int = 4096, min_length: int = 1,
    one_hot_targets=st.booleans(), relations=st.sampled_from(DRAFT_RELATIONS), salt: tuple[int, ...] = (),
):
    """Target and draft tables p(x_t | x_<t), q(x_t | x_<t) whose rows differ by context.

    A `salt` (the example's other draws) is mixed into the tables: see `table_generator`.
    """
    vocab = draw(
        st.integers(2, max_vocab).filter(lambda v: v**min_length <= max_outcomes), label="vocab"
    )
    longest = max(t for t in range(min_length, max_length + 1) if vocab**t <= max_outcomes)
    length = draw(st.integers(min_length, longest), label="length")
    built = st.builds(
        make_autoregressive_fixture, vocab=st.just(vocab), length=st.just(length), relation=relations,
        one_hot_target=one_hot_targets, table_seed=table_seeds, salt=st.just(tuple(int(x) for x in salt)),
    )
    return draw(built, label="fixture")


def make_latent_fixture(
    codes: int, positions: int, vocab: int, latent_relation: str, token_relation: str, table_seed: int,
    salt: tuple[int, ...] = (),
):
    """One NCM level from its sizes, relations and seed; the call Hypothesis prints to rebuild it."""
    from ncm_verify.exact import LatentFixture

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
    draw, max_codes: int = 4, max_positions: int = 3, max_vocab: int = 6, max_outcomes: int = 256,
    relations=st.sampled_from(DRAFT_RELATIONS), salt: tuple[int, ...] = (),
):
    """One NCM level: p(z), p(x_i | z), q(z), q(x_i | z) with related drafts, salted as `autoregressive_fixtures`."""
    codes = draw(st.integers(1, max_codes), label="codebook size")
    vocab = draw(st.integers(2, max_vocab), label="vocab")
    longest = max(n for n in range(1, max_positions + 1) if codes * vocab**n <= max_outcomes)
    positions = draw(st.integers(1, longest), label="positions")
    built = st.builds(
        make_latent_fixture, codes=st.just(codes), positions=st.just(positions), vocab=st.just(vocab),
        latent_relation=relations, token_relation=relations, table_seed=table_seeds,
        salt=st.just(tuple(int(x) for x in salt)),
    )
    return draw(built, label="fixture")


draft_lengths = st.integers(min_value=0, max_value=4)
"""G: drafts per round, zero included (then only the target's own token is emitted)."""
drafting_lengths = st.integers(min_value=1, max_value=4)
"""G for examples that judge acceptance: at least one draft in every example."""


KERNELS = ("chain", "factorized", "latent_chain")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
LARGE_VOCABULARIES = st.integers(2**16 + 1, 2**17 + 7)
"""Vocabularies past 16-bit ids (65 536): real tokenizers (128 256) have them."""
LARGE_VOCAB_BATCH = 8
"""Sequences of a large-vocabulary case: its rows are dense, so the batch stays small."""


def make_case(
    kernel: str, fixture, *, batch: int, max_draft: int, draft_seed: int, wide_vocab: int | None = None,
    column_seed: int = 0, dtype: str = "float32",
):
    """A kernel case from a fixture, widened to `wide_vocab` ids and cast; the call Hypothesis prints to rebuild it."""
    from ncm_verify.drivers import make_kernel_case, make_wide_columns

    case = make_kernel_case(kernel, fixture, batch=batch, seed=draft_seed, max_draft=max_draft)
    if wide_vocab is not None:
        case = case.widen(make_wide_columns(case.vocab, wide_vocab, seed=column_seed), wide_vocab)
    return case.cast(getattr(mx, dtype))


@st.composite
def kernel_cases(
    draw, batch: int = 64, kernels=KERNELS, dtypes=("float32",), large_vocab=st.booleans(), drafting: bool = False
):
    """A batch of valid inputs for one of the sampling kernels, drafts sampled from q.

    A large-vocabulary case spreads a small fixture's columns over ids up to V - 1 > 65 535,
    id x beside its 16-bit alias x - 65 536, so a kernel that truncates ids reads the wrong column.
    With `drafting`, a chain case drafts at least one token in some sequence.
    """
    kernel = draw(st.sampled_from(kernels), label="kernel")
    if kernel == "chain":
        fixtures = autoregressive_fixtures(max_outcomes=512, min_length=2 if drafting else 1)
    else:
        fixtures = latent_fixtures()
    wide = draw(large_vocab, label="vocabulary above 65 536")
    rows = min(batch, LARGE_VOCAB_BATCH) if wide else batch
    built = st.builds(
        make_case, kernel=st.just(kernel), fixture=fixtures, batch=st.just(rows),
        max_draft=drafting_lengths if drafting else draft_lengths, draft_seed=seeds,
        wide_vocab=LARGE_VOCABULARIES if wide else st.none(), column_seed=seeds if wide else st.just(0),
        dtype=st.sampled_from(dtypes),
    )
    return draw(built, label="case")


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
def level_drafting_configs(draw, config_type, *, max_outcomes: int = 1024, dtypes=("float32",),
                           masks=("ncm", "prefix_lm", "causal")):
    """Tiny NCMs whose whole-generation law can be enumerated: vocabulary <= 4, two or three
    levels of one or two slots, codebook <= 3, at most `max_outcomes` (latents, tokens) outcomes."""
    vocab = draw(st.integers(2, 4), label="vocab_size")
    codes = draw(st.integers(1, 3), label="codebook_size")
    levels = draw(st.lists(st.integers(1, 2), min_size=2, max_size=3)
                  .filter(lambda sizes: int(np.prod([codes * vocab**n for n in sizes])) <= max_outcomes),
                  label="level_sizes")
    d_model = draw(st.sampled_from([8, 16]), label="d_model")
    return config_type(
        vocab_size=vocab, prefix_length=draw(st.integers(1, 3), label="prefix_length"), level_sizes=tuple(levels),
        codebook_size=codes, d_model=d_model, num_heads=draw(st.sampled_from([1, 2]), label="num_heads"),
        num_layers=draw(st.integers(1, 2), label="num_layers"), mask=draw(st.sampled_from(masks), label="mask"),
        dtype=draw(st.sampled_from(dtypes), label="dtype"), seed=draw(st.integers(0, 2**16), label="model_seed"),
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
        spec_type, kind=st.just(kind), vocab_size=st.sampled_from([8, 16, 32]),
        seed=st.integers(0, 2**16), window=st.integers(2, 5),
    )


def token_lists(vocab_size: int, min_size: int, max_size: int):
    """Token id lists in [0, vocab_size)."""
    return st.lists(st.integers(0, vocab_size - 1), min_size=min_size, max_size=max_size)
