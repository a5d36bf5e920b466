"""C1-C4 on the source's NCM, through the model protocol (`protocol.ConceptModels`).

Every property runs on two paths: ``drawn``, tiny instances from the implementation's own config
strategy (`concept_configs`), built in a drawn dtype (float32, bfloat16, float16) and, in most examples,
moved away from initialisation (`concept_instances.perturb_parameters`: every gain, bias and weight); and
``checkpoint``, a fixed model (`--ncm-model`, ``make verify MODEL=...``; by default each example draws the
seeded fixtures/ncm_concept_tiny.safetensors or the trained ncm_concept_trained.safetensors), for which only
prefixes, earlier levels' codes, temperatures, top-k, start positions and keys are drawn. Prefixes run up to
64 tokens (a checkpoint's own length: 6 or 32), starts across the rotary range, batches up to 8 (issue 44).
Checks are exact or within the dtype's tolerance; nothing here samples a law.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from ncm_verify.harness import strategies
from ncm_verify.harness.checks import as_numpy, assert_close, assert_equal
from ncm_verify.harness.concept_checkpoint import checkpoint_paths
from ncm_verify.harness.concept_instances import (
    assert_concept_generations_agree,
    draw_concept_instance,
    model_dtype,
    perturb_parameters,
)
from ncm_verify.oracles.concept_sampling import sampling_law64
from ncm_verify.protocol import CONCEPT_CODEC_NAMES, CONCEPT_LEVEL_CACHE_NAMES, concept_api

SOURCES = ["drawn", "checkpoint", "trained"]
"""Path (a), a drawn instance; path (b), the seeded checkpoint (its tied codes meet ties in top-k) and the trained one
(away from initialisation), each its own parametrisation so that neither thins the other's examples. With
`--ncm-model` both fixed sources are that model."""
_LOADED: dict[tuple[str, str], object] = {}


def few(count: int):
    """At most `count` examples (the profile's own number when smaller): each builds a model. A claim is
    shown only on 10 distinct examples per property (report.status), hence 11 or more."""
    return settings(max_examples=min(count, settings.default.max_examples))


class Case:
    """A model under test, how to rebuild it, and the dtype its outputs are compared in."""

    def __init__(self, api, model, rebuild: str, any_length: bool):
        self.api, self.model, self.rebuild, self.any_length = api, model, rebuild, any_length
        self.layout = api.concept_layout(model)
        self.dtype = model_dtype(model)


def draw_case(data, impl, source: str, request) -> Case:
    api = concept_api(impl)
    if source == "drawn":
        _, model, how, _ = draw_concept_instance(data, api)
        return Case(api, model, how, any_length=True)
    paths = checkpoint_paths(request.config.getoption("--ncm-model"))
    path = paths[0] if source == "checkpoint" else paths[-1]
    key = (request.config.getoption("--impl"), str(path))
    if key not in _LOADED:
        _LOADED[key] = api.load_concept_model(path)
    return Case(api, _LOADED[key], f"load_concept_model({str(path)!r})", any_length=False)


def draw_request(data, case: Case, batch=None):
    """(prefix, codes of every level, start) drawn for `case`'s layout."""
    rows = data.draw(strategies.concept_prefixes(case.layout, batch=batch, any_length=case.any_length), label="prefix")
    codes = data.draw(strategies.concept_codes(case.layout, len(rows)), label="codes")
    start = data.draw(strategies.concept_starts, label="start")
    return mx.array(rows, dtype=mx.int32), [mx.array(c, dtype=mx.int32) for c in codes], start


def draw_sampling(data, case: Case, batch: int, api=None):
    """(temperature, top_k, seed, keys) for a generation of `batch` rows."""
    temperature, top_k = data.draw(strategies.concept_sampling(case.layout), label="sampling")
    seed = data.draw(strategies.seeds, label="seed")
    return temperature, top_k, seed, (api or case.api).row_keys(seed, batch)


def _reproduce(case: Case, text: str) -> str:
    return f"{case.rebuild}; {text}"


def assert_generations_agree(case: Case, actual, expected, label: str, call: str) -> None:
    assert_concept_generations_agree(actual, expected, dtype=case.dtype, label=label, call=call)


def assert_sampled_within_law(case: Case, generation, temperature, top_k, label: str, call: str) -> None:
    """Every sampled code has positive probability under the float64 law of the logits it came from."""
    for level, (codes, logits) in enumerate(zip(generation.codes, generation.logits)):
        law = sampling_law64(as_numpy(logits), temperature, top_k)
        chosen = np.take_along_axis(law, as_numpy(codes)[..., None].astype(np.int64), axis=-1)[..., 0]
        impossible = np.argwhere(chosen == 0)
        assert_equal(
            len(impossible),
            0,
            label=f"{label}: level {level} codes outside the law's support {impossible[:3].tolist()}",
            call=call,
        )


# --- the properties, the cheapest catchers first (the planted-bug sweep stops at the first failure) ---


@pytest.mark.claim("C1")
@pytest.mark.parametrize("source", SOURCES)
@few(12)
@given(data=st.data())
def test_the_models_own_mask_keeps_the_prefix_apart_and_no_level_sees_a_later_one(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    length = data.draw(st.integers(1, 8), label="prefix_length") if case.any_length else case.layout.prefix_length
    mask = np.asarray(case.api.concept_mask_of(case.model, length), dtype=bool)
    lengths = case.layout.level_lengths
    rows = length + sum(lengths)
    call = _reproduce(case, f"concept_mask_of(model, {length})")
    assert_equal(np.array(mask.shape), np.array([rows, rows]), label="mask shape (prefix + level rows)", call=call)
    blocks = np.concatenate([np.full(length, -1)] + [np.full(n, level) for level, n in enumerate(lengths)])
    later = blocks[None, :] > blocks[:, None]
    assert_equal(
        mask & later, np.zeros_like(mask), label="rows attending to a later level (or prefix to a level)", call=call
    )
    sees_prefix = mask[length:, :length].any(axis=1)
    assert_equal(sees_prefix, np.ones_like(sees_prefix), label="level rows that see the prefix", call=call)


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_the_codec_reads_each_level_with_its_own_codebook(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    api = concept_api(impl, CONCEPT_CODEC_NAMES)
    layout = case.layout
    rows = data.draw(
        st.lists(
            st.lists(
                st.integers(0, layout.vocab_size - 1), min_size=layout.sequence_length, max_size=layout.sequence_length
            ),
            min_size=1,
            max_size=3,
        ),
        label="tokens",
    )
    call = _reproduce(case, f"codec_encode(model, mx.array({rows}))")
    codes, reconstruction = api.codec_encode(case.model, mx.array(rows, dtype=mx.int32))
    for level, n in enumerate(layout.level_lengths):
        assert_equal(
            np.array(codes[level].shape), np.array([len(rows), n]), label=f"level {level} codes shape", call=call
        )
    assert_close(
        api.codec_reconstruction(case.model, codes),
        reconstruction,
        dtype=case.dtype,
        label="reconstruction of the encoder's codes vs the quantiser's",
        call=call,
    )


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(15)
@given(data=st.data())
def test_level_logits_from_the_cached_prefix_kv_equal_the_recomputed_ones(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, codes, start = draw_request(data, case)
    kv = api.prefix_kv(model, prefix, start)
    for level in range(case.layout.num_levels):
        call = _reproduce(case, f"level_logits(model, {prefix.tolist()}, codes[:{level}], {level}, start={start})")
        cached = api.level_logits(model, prefix, codes[:level], level, prefix_kv=kv, start=start)
        uncached = api.level_logits(model, prefix, codes[:level], level, start=start)
        assert_close(
            cached, uncached, dtype=case.dtype, label=f"level {level} logits, given prefix K/V vs recomputed", call=call
        )


@pytest.mark.claim("C1")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_each_levels_logits_ignore_later_levels_and_the_training_forward_equals_level_by_level(
    impl, source, request, data
):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, codes, start = draw_request(data, case)
    level = data.draw(st.integers(0, case.layout.num_levels - 1), label="level")
    other = data.draw(strategies.concept_codes(case.layout, prefix.shape[0]), label="other_codes")
    redrawn = codes[: level + 1] + [mx.array(c, dtype=mx.int32) for c in other[level + 1 :]]
    call = _reproduce(case, f"training_logits(model, {prefix.tolist()}, codes, start={start}), level {level}")
    note(call)
    full, changed = api.training_logits(model, prefix, codes, start), api.training_logits(model, prefix, redrawn, start)
    for j in range(level + 1):
        assert_close(
            changed[j], full[j], dtype=case.dtype, label=f"level {j} logits with levels > {level} redrawn", call=call
        )
        alone = api.level_logits(model, prefix, codes[:j], j, start=start)
        assert_close(
            alone, full[j], dtype=case.dtype, label=f"level {j}: its own forward vs the training forward", call=call
        )


@pytest.mark.claim("C2")
@few(11)
@given(data=st.data())
def test_the_cache_serves_an_entry_only_on_its_exact_key_over_a_run_of_requests(impl, request, data):
    """Stateful, against a model of the cache: a dict of exact keys. Requests come from a small pool
    of prefixes, starts, namespaces and two models that share the generator but not the codec."""
    api = concept_api(impl)
    config, model, how, moved = draw_concept_instance(data, api)
    codec_seed = getattr(config, "codec_seed", None)
    models = [model]
    if codec_seed is not None:  # same generator, another codec (perturbed alike: the codec's names sort first)
        models.append(api.make_concept_model(dataclasses.replace(config, codec_seed=codec_seed + 1)))
        if moved is not None:
            perturb_parameters(models[-1], *moved)
    layout = api.concept_layout(models[0])
    pool = data.draw(
        st.lists(strategies.concept_prefixes(layout, batch=1, any_length=True), min_size=2, max_size=3), label="pool"
    )
    cache, seen = api.make_concept_cache(), set()
    steps = data.draw(
        st.lists(
            st.tuples(
                st.integers(0, len(pool) - 1),
                st.integers(0, len(models) - 1),
                st.sampled_from((0, 7)),
                st.sampled_from(("", "tenant")),
            ),
            min_size=3,
            max_size=8,
        ),
        label="requests",
    )
    for step, (index, which, start, namespace) in enumerate(steps):
        model, prefix = models[which], mx.array(pool[index], dtype=mx.int32)
        call = f"{how} (codec_seed+{which}); request {step} of {steps}"
        keys = api.row_keys(step, 1)
        hits = cache.hits
        served = api.generate_cached_concepts(model, prefix, keys, start=start, cache=cache, namespace=namespace)
        key = (tuple(pool[index][0]), which, start, namespace)
        assert_equal(
            cache.hits - hits,
            int(key in seen),
            label=f"request {step}: hit (1) or miss (0) against the exact-key model",
            call=call,
        )
        seen.add(key)
        assert_generations_agree(
            Case(api, model, call, True),
            served,
            api.generate_uncached_concepts(model, prefix, keys, start=start),
            f"request {step} vs uncached",
            call,
        )


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_cached_generation_equals_uncached_generation_cold_and_warm(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, _, start = draw_request(data, case)
    temperature, top_k, seed, keys = draw_sampling(data, case, prefix.shape[0])
    options = dict(temperature=temperature, top_k=top_k, start=start)
    call = _reproduce(case, f"generate_*_concepts(model, {prefix.tolist()}, row_keys({seed}, B), **{options})")
    note(call)
    uncached = api.generate_uncached_concepts(model, prefix, keys, **options)
    assert_sampled_within_law(case, uncached, temperature, top_k, "uncached", call)
    cache = api.make_concept_cache()
    cold = api.generate_cached_concepts(model, prefix, keys, cache=cache, **options)
    assert_generations_agree(case, cold, uncached, "cold cache vs uncached", call)
    assert_sampled_within_law(case, cold, temperature, top_k, "cold cache", call)
    distinct = len({tuple(row) for row in prefix.tolist()})
    assert_equal(cache.misses, prefix.shape[0], label="cold requests' misses", call=call)
    assert_equal(len(cache), distinct, label="entries after a cold request", call=call)
    warm = api.generate_cached_concepts(model, prefix, keys, cache=cache, **options)
    assert_equal(cache.hits, prefix.shape[0], label="warm requests' hits", call=call)
    assert_generations_agree(case, warm, uncached, "warm cache vs uncached", call)
    # the same request again runs the same shapes on the same entries: identical, bit for bit, in every dtype
    again = api.generate_cached_concepts(model, prefix, keys, cache=cache, **options)
    for name in ("codes", "logits"):
        for level, (a, e) in enumerate(zip(getattr(again, name), getattr(warm, name))):
            assert_equal(a, e, label=f"warm request repeated: level {level} {name}, bit for bit", call=call)
    assert_equal(again.token_logits, warm.token_logits, label="warm request repeated: token logits", call=call)
    assert_equal(again.tokens, warm.tokens, label="warm request repeated: tokens", call=call)
    no_cache = api.generate_cached_concepts(model, prefix, keys, **options)
    assert_generations_agree(case, no_cache, uncached, "PC-1 within one generation vs uncached", call)


@pytest.mark.claim("C2")
@settings(max_examples=min(40, 2 * settings.default.max_examples))
@given(
    rows=st.lists(st.lists(st.floats(-4, 4, width=32), min_size=2, max_size=12), min_size=1, max_size=3),
    ties=st.booleans(),
    temperature=st.sampled_from((0.0, 0.25, 1.0, 3.0)),
    top_k=st.one_of(st.none(), st.integers(1, 12)),
    seed=strategies.seeds,
)
def test_the_sampler_follows_its_law_which_is_the_float64_one(impl, rows, ties, temperature, top_k, seed):
    api = concept_api(impl)
    width = min(len(r) for r in rows)
    logits = np.array([r[:width] for r in rows], dtype=np.float32)[:, None, :]
    if ties:  # a dead code reseeded onto another: exactly equal logits
        logits[..., -1] = logits[..., 0]
    call = f"sample_codes(mx.array({logits.tolist()}), row_keys({seed}, {len(rows)}), {temperature}, {top_k})"
    law = as_numpy(api.sampling_law(mx.array(logits), temperature, top_k))
    expected = sampling_law64(logits, temperature, top_k)
    worst = float(np.abs(law - expected).max())
    assert_equal(worst <= 1e-6, True, label=f"sampling law vs float64 (worst |diff| {worst:.3g})", call=call)
    keys = api.row_keys(seed, len(rows))
    codes = as_numpy(api.sample_codes(mx.array(logits), keys, temperature, top_k))
    assert_equal(
        codes,
        as_numpy(api.sample_codes(mx.array(logits), keys, temperature, top_k)),
        label="same keys, same codes",
        call=call,
    )
    chosen = np.take_along_axis(expected, codes[..., None].astype(np.int64), axis=-1)[..., 0]
    assert_equal(
        chosen > 0, np.ones_like(chosen, dtype=bool), label="sampled codes with positive float64 probability", call=call
    )


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_a_batch_generates_what_each_of_its_rows_generates_alone(impl, source, request, data):
    """Batches of 2-8 rows, uncached and PC-1, against the first, the last and one drawn row generated alone
    (uncached): three rows, not all eight, to keep the cost; a mixup of rows moves the ends."""
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, _, start = draw_request(data, case, batch=data.draw(st.integers(2, 8), label="batch"))
    temperature, top_k, seed, keys = draw_sampling(data, case, prefix.shape[0])
    options = dict(temperature=temperature, top_k=top_k, start=start)
    batch = prefix.shape[0]
    rows = sorted({0, batch - 1, data.draw(st.integers(0, batch - 1), label="row")})
    alone = {b: api.generate_uncached_concepts(model, prefix[b : b + 1], keys[b : b + 1], **options) for b in rows}
    for generate in (api.generate_uncached_concepts, api.generate_cached_concepts):
        whole = generate(model, prefix, keys, **options)
        for b in rows:
            call = _reproduce(
                case, f"{generate.__name__}(model, {prefix.tolist()}, row_keys({seed}, B), **{options}), row {b}"
            )
            for level in range(case.layout.num_levels):
                assert_equal(
                    whole.codes[level][b : b + 1],
                    alone[b].codes[level],
                    label=f"row {b} level {level} codes, batch vs alone (uncached)",
                    call=call,
                )
                assert_close(
                    whole.logits[level][b : b + 1],
                    alone[b].logits[level],
                    dtype=case.dtype,
                    label=f"row {b} level {level} logits, batch vs alone (uncached)",
                    call=call,
                )
            assert_equal(whole.tokens[b : b + 1], alone[b].tokens, label=f"row {b} tokens, batch vs alone", call=call)


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_a_saved_cache_serves_what_uncached_generation_gives_and_a_corrupted_file_never_hits(
    impl, source, request, data, tmp_path_factory
):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, _, start = draw_request(data, case)
    seed = data.draw(strategies.seeds, label="seed")
    keys = api.row_keys(seed, prefix.shape[0])
    call = _reproduce(
        case,
        f"cache.save/load then generate_cached_concepts(model, {prefix.tolist()}, row_keys({seed}, B), start={start})",
    )
    cache = api.make_concept_cache()
    api.generate_cached_concepts(model, prefix, keys, start=start, cache=cache)
    folder = tmp_path_factory.mktemp("concept-cache")
    path = folder / "cache.safetensors"
    cache.save(path)
    reloaded = api.make_concept_cache()
    reloaded.load(path)
    served = api.generate_cached_concepts(model, prefix, keys, start=start, cache=reloaded)
    assert_equal(reloaded.hits, prefix.shape[0], label="hits after reload", call=call)
    assert_generations_agree(
        case,
        served,
        api.generate_uncached_concepts(model, prefix, keys, start=start),
        "reloaded cache vs uncached",
        call,
    )
    raw = bytearray(path.read_bytes())
    where = data.draw(st.integers(0, len(raw) - 1), label="corrupted_byte")
    raw[where] ^= 0xFF
    path.write_bytes(bytes(raw))
    damaged = api.make_concept_cache()
    try:
        damaged.load(path)
    except ValueError:
        return  # rejected: the contract
    generated = api.generate_cached_concepts(model, prefix, keys, start=start, cache=damaged)
    assert_generations_agree(case, generated, served, f"a cache file with byte {where} flipped, accepted", call)


@pytest.mark.claim("C2")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_a_saved_and_loaded_model_keeps_its_fingerprint_and_outputs_and_a_damaged_file_is_refused(
    impl, source, request, data, tmp_path_factory
):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, codes, start = draw_request(data, case)
    path = tmp_path_factory.mktemp("concept-model") / "model.safetensors"
    api.save_concept_model(model, path)
    loaded = api.load_concept_model(path)
    call = _reproduce(case, f"save_concept_model/load_concept_model({path})")
    assert_equal(
        api.concept_fingerprint(loaded),
        api.concept_fingerprint(model),
        label="fingerprint after a round trip",
        call=call,
    )
    level = case.layout.num_levels - 1
    assert_close(
        api.level_logits(loaded, prefix, codes[:level], level, start=start),
        api.level_logits(model, prefix, codes[:level], level, start=start),
        dtype=case.dtype,
        label="last level's logits after a round trip",
        call=call,
    )
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="path"):
        api.load_concept_model(path)


@pytest.mark.claim("C3")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_the_cache_misses_every_head_and_extension_of_a_stored_prefix_and_heads_states_differ(
    impl, source, request, data
):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, _, start = draw_request(data, case, batch=1)
    cache = api.make_concept_cache()
    keys = api.row_keys(0, 1)
    api.generate_cached_concepts(model, prefix, keys, start=start, cache=cache)
    row = prefix.tolist()[0]
    # the one-token change first: of the stored length, a cache that aliases it serves an entry of the right shape
    near = [row[:-1] + [(row[-1] + 1) % case.layout.vocab_size], row[:-1], row + [row[0]]]
    near = [n for n in near if n and (case.any_length or len(n) == len(row))]
    for other in [*near, row]:  # each near miss is stored beside the prefix, which is asked for again last
        call = _reproduce(case, f"stored {row}, then generate_cached_concepts(model, [{other}], start={start})")
        hits, request_ = cache.hits, mx.array([other], dtype=mx.int32)
        served = api.generate_cached_concepts(model, request_, keys, start=start, cache=cache)
        expected = api.generate_uncached_concepts(model, request_, keys, start=start)
        assert_generations_agree(case, served, expected, "served vs uncached", call)
        hit = int(other is row)
        assert_equal(cache.hits - hits, hit, label="hits on a near miss (0) or the stored prefix (1)", call=call)
    layers = len(api.prefix_kv(model, prefix, start))
    if len(row) >= 2 and layers >= 2:  # layer 0's keys see one token each; deeper ones see the whole prefix
        tail = row[:-1] + [(row[-1] + 1) % case.layout.vocab_size]
        first = api.prefix_kv(model, prefix, start)[-1][0]
        second = api.prefix_kv(model, mx.array([tail], dtype=mx.int32), start)[-1][0]
        moved = float(np.abs(as_numpy(first)[:, :, 0] - as_numpy(second)[:, :, 0]).max())
        call = _reproduce(case, f"prefix_kv(model, [{row}] vs [{tail}], {start})[-1]")
        assert_equal(
            moved > 0, True, label=f"last layer's K at position 0 moved by the last token ({moved:.3g})", call=call
        )


@pytest.mark.claim("C4")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_the_declared_schedule_and_kv_bytes_equal_the_instrumented_counts(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    api, model = case.api, case.model
    prefix, _, start = draw_request(data, case)
    batch, length = prefix.shape
    distinct = len({tuple(row) for row in prefix.tolist()})
    keys = api.row_keys(1, batch)
    runs = [
        ("uncached", lambda: api.generate_uncached_concepts(model, prefix, keys, start=start), "uncached", 0),
        ("PC-1, no cache", lambda: api.generate_cached_concepts(model, prefix, keys, start=start), "pc1", 0),
    ]
    cache = api.make_concept_cache()
    runs.append(
        (
            "PC-1, cold cache",
            lambda: api.generate_cached_concepts(model, prefix, keys, start=start, cache=cache),
            "pc1",
            batch - distinct,
        )
    )
    runs.append(
        (
            "PC-1, warm cache",
            lambda: api.generate_cached_concepts(model, prefix, keys, start=start, cache=cache),
            "pc1",
            batch,
        )
    )
    if all(hasattr(impl, name) for name in CONCEPT_LEVEL_CACHE_NAMES):
        runs.append(
            (
                "earlier levels cached",
                lambda: impl.generate_cached_levels(model, prefix, keys, start=start),
                "pc1_levels",
                0,
            )
        )
    for label, run, mode, served in runs:
        schedule = api.concept_schedule(model, length, mode)
        prefix_pass = schedule[0] if mode != "uncached" else 0
        expected = batch * sum(schedule) - served * prefix_pass
        api.reset_concept_counts(model)
        run()
        counts = api.concept_position_counts(model)
        call = _reproduce(case, f"{label}: prefix {prefix.tolist()}, start {start}, schedule {schedule}")
        assert_equal(
            np.array(counts),
            np.full(len(counts), expected),
            label=f"{label}: positions per layer, counted vs declared",
            call=call,
        )
    call = _reproduce(case, f"K/V bytes of {distinct} cached prefixes of length {length}")
    assert_equal(
        cache.nbytes,
        distinct * length * api.concept_kv_bytes(model),
        label="cache bytes vs declared K/V bytes per position",
        call=call,
    )


@pytest.mark.claim("C14")
@pytest.mark.parametrize("source", SOURCES)
@few(11)
@given(data=st.data())
def test_generation_with_earlier_levels_cached_equals_uncached_generation(impl, source, request, data):
    case = draw_case(data, impl, source, request)
    api = concept_api(impl, CONCEPT_LEVEL_CACHE_NAMES)
    prefix, _, start = draw_request(data, case)
    temperature, top_k, seed, keys = draw_sampling(data, case, prefix.shape[0])
    options = dict(temperature=temperature, top_k=top_k, start=start)
    call = _reproduce(case, f"generate_cached_levels(model, {prefix.tolist()}, row_keys({seed}, B), **{options})")
    cache = impl.make_concept_cache()
    extended = api.generate_cached_levels(case.model, prefix, keys, cache=cache, **options)
    uncached = impl.generate_uncached_concepts(case.model, prefix, keys, **options)
    assert_generations_agree(case, extended, uncached, "earlier levels cached vs uncached", call)
