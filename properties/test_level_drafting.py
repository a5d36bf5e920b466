"""C6 on the model: speculative drafting of whole NCM levels keeps the target's exact law.

A draft NCM proposes k levels (latent and tokens), one target pass verifies them,
the latent chain decides level by level through the implementation's kernels.
"""

from __future__ import annotations

import hypothesis
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from ncm_verify.harness import checks
from ncm_verify.harness.level_models import generate_greedy_levels, level_draft_api, make_draft_model, make_level_tables
from ncm_verify.harness.strategies import draft_models, level_draft_counts, level_drafting_configs, prefixes, seeds
from ncm_verify.oracles import exact, exact_levels
from ncm_verify.reference.ncm.config import DTYPES
from ncm_verify.reference.ncm.level_draft import level_distributions

pytestmark = pytest.mark.claim("C6")

SAMPLED_OUTCOMES = 64
"""Largest outcome space of the sampling property: keeps its n (and its run time) small."""


def draw_case(data, api, *, max_outcomes: int = 1024, dtypes=("float32",)):
    """A target, its draft, k and the call that reproduces them."""
    config = data.draw(level_drafting_configs(api.NCMConfig, max_outcomes=max_outcomes, dtypes=dtypes), label="config")
    relation = data.draw(draft_models, label="draft model")
    num_draft = data.draw(level_draft_counts, label="num_draft")
    target = api.make_model(config)
    draft = make_draft_model(target, relation, seed=config.seed + 1)
    call = f"make_model({config}); draft {relation!r}; num_draft={num_draft}"
    return target, draft, num_draft, call


def outcome_indices(generation, config) -> np.ndarray:
    """Each row's latents and tokens, level by level, as one index into `outcome_shape`."""
    columns = []
    for level in range(len(config.level_sizes)):
        columns.append(np.array(generation.latents[:, level]))
        columns += list(np.array(generation.tokens[level]).T)
    return np.ravel_multi_index(tuple(columns), exact_levels.outcome_shape(config))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@given(data=st.data())
def test_one_target_pass_reads_every_drafted_level_as_level_by_level_generation_does(impl, dtype, data):
    api = level_draft_api(impl)
    config = data.draw(level_drafting_configs(api.NCMConfig, dtypes=(dtype,)), label="config")
    model, levels = api.make_model(config), len(config.level_sizes)
    level = data.draw(st.integers(0, levels - 1), label="first drafted level")
    count = data.draw(st.integers(1, levels - level), label="drafted levels")
    bonus = level + count < levels and data.draw(st.booleans(), label="bonus block")
    cached = data.draw(st.integers(0, level), label="levels whose K/V are cached")
    batch = data.draw(st.integers(1, 2), label="batch")
    earlier = data.draw(
        st.lists(prefixes(config, config.level_start(level)), min_size=batch, max_size=batch),
        label="prefix and earlier levels",
    )
    drafted = [
        data.draw(
            st.lists(prefixes(config, config.level_sizes[lv]), min_size=batch, max_size=batch),
            label=f"drafted level {lv}",
        )
        for lv in range(level, level + count)
    ]
    tokens, drafted = mx.array(earlier, dtype=mx.int32), [mx.array(d, dtype=mx.int32) for d in drafted]
    covered = config.level_start(cached)
    call = (
        f"verify_drafted_levels(make_model({config}), covered={covered}, level={level}, count={count}, bonus={bonus})"
    )
    note(call)
    kv = model(tokens[:, :covered])[1]
    with_kv = api.verify_drafted_levels(model, kv, covered, tokens, drafted, level, bonus)
    from_scratch = api.verify_drafted_levels(model, None, 0, tokens, drafted, level, bonus)
    sequence = tokens
    for index, lv in enumerate(range(level, level + count + int(bonus))):
        expected = level_distributions(model, sequence)
        for name, result in (("cached K/V", with_kv), ("from scratch", from_scratch)):
            for part, (actual, wanted) in (
                ("latent logits", (result[0][index], expected[0])),
                ("token logits", (result[1][index], expected[1])),
            ):
                checks.assert_close(
                    actual,
                    wanted,
                    dtype=DTYPES[dtype],
                    label=f"one pass ({name}) vs level by level: {part}",
                    call=f"{call}; level {lv}",
                )
        if index < count:
            sequence = mx.concatenate([sequence, drafted[index]], axis=1)


@given(data=st.data())
def test_level_drafting_enumerates_to_the_target_law_of_latents_and_tokens(impl, data):
    api = level_draft_api(impl)
    target, draft, num_draft, call = draw_case(data, api)
    prefix = data.draw(prefixes(target.config), label="prefix")
    note(call)
    target_tables = make_level_tables(target, prefix)
    law = exact_levels.speculative_level_law(target_tables, make_level_tables(draft, prefix), num_draft)
    checks.assert_distributions_equal(
        exact_levels.outcome_law(law),
        exact_levels.target_level_law(target_tables),
        label="speculative level drafting (z, x per level) vs the target's level-by-level law",
        call=f"speculative_level_law({call}, prefix={prefix})",
    )


@pytest.mark.statistical(tests=1)
@settings(max_examples=max(5, settings.default.max_examples // 2))  # each example samples ~1e5 generations
@given(data=st.data())
def test_level_drafting_samples_the_target_law_of_latents_and_tokens(impl, data):
    api = level_draft_api(impl)
    target, draft, num_draft, call = draw_case(data, api, max_outcomes=SAMPLED_OUTCOMES)
    prefix = data.draw(prefixes(target.config), label="prefix")
    seed = data.draw(seeds, label="sampler_seed")
    config = target.config
    probs = exact.as_vector(
        exact_levels.target_level_law(make_level_tables(target, prefix)),
        exact_levels.outcome_shape(config),
    )
    call = f"generate_level_speculative({call}, prefix={prefix}, key=mx.random.key({seed}), recompute=True)"
    note(call)

    def sample(n):
        generation = api.generate_level_speculative(
            target,
            draft,
            mx.array([prefix] * n, dtype=mx.int32),
            mx.random.key(seed),
            num_draft=num_draft,
            recompute=True,
            kernels=impl,
        )
        return outcome_indices(generation, config)

    checks.assert_sampler_matches("level drafting (z, x per level)", probs, sample, seed=seed, call=call)


def steer_to_rejections(result) -> None:
    """Rejected levels are where K/V must be dropped and tokens redrawn: seek examples with many."""
    hypothesis.target(float((result.verified_levels - result.accepted_levels).sum()), label="rejected drafted levels")


def draw_generation(data, api, *, dtypes=("float32",), greedy: bool = False):
    """A target, its draft, a batch of prefixes and `generate(**options)`, which runs level drafting on them."""
    target, draft, num_draft, call = draw_case(data, api, dtypes=dtypes)
    batch = data.draw(st.lists(prefixes(target.config), min_size=1, max_size=3), label="prefixes")
    seed = None if greedy else data.draw(seeds, label="sampler_seed")
    prefix, key = mx.array(batch, dtype=mx.int32), None if greedy else mx.random.key(seed)
    call = f"generate_level_speculative({call}, prefix={batch}, key={'None' if greedy else f'mx.random.key({seed})'})"
    note(call)

    def generate(**options):
        return api.generate_level_speculative(target, draft, prefix, key, num_draft=num_draft, kernels=api, **options)

    return target, draft, prefix, generate, call


@given(data=st.data())
def test_cached_and_uncached_level_drafting_emit_the_same_levels(impl, data):
    target, draft, prefix, generate, call = draw_generation(data, level_draft_api(impl))
    reference = generate(recompute=True)
    steer_to_rejections(reference)
    cache = impl.PrefixCache()
    runs = {
        "no prefix cache": generate(),
        "cold prefix cache": generate(cache=cache),
        "warm prefix cache": generate(cache=cache),
    }
    checks.assert_equal(cache.hits, 2 * prefix.shape[0], label="warm prefix cache hits (target and draft)", call=call)
    for name, result in runs.items():
        for level, (actual, expected) in enumerate(zip(result.tokens, reference.tokens)):
            checks.assert_equal(actual, expected, label=f"{name} vs recomputed: level {level} tokens", call=call)
        checks.assert_equal(result.latents, reference.latents, label=f"{name} vs recomputed: latents", call=call)
        checks.assert_equal(result.target_passes, reference.target_passes, label=f"{name}: target passes", call=call)


@given(data=st.data())
def test_a_batch_drafts_the_levels_of_its_rows_one_at_a_time(impl, data):
    """Rows advance at their own pace in cohorts; each row's draws come from its own key.

    From scratch (the cached path equals it by the property above), which is the cheaper run here.
    """
    api = level_draft_api(impl)
    target, draft, num_draft, call = draw_case(data, api)
    batch = data.draw(st.lists(prefixes(target.config), min_size=2, max_size=3), label="prefixes")
    seed = data.draw(seeds, label="sampler_seed")
    keys = mx.random.split(mx.random.key(seed), len(batch))
    call = f"generate_level_speculative({call}, prefix={batch}, key=split(mx.random.key({seed}), {len(batch)}))"
    note(call)
    together = api.generate_level_speculative(
        target, draft, mx.array(batch, dtype=mx.int32), keys, num_draft=num_draft, kernels=api, recompute=True
    )
    steer_to_rejections(together)
    for row, prefix in enumerate(batch):
        alone = api.generate_level_speculative(
            target,
            draft,
            mx.array([prefix], dtype=mx.int32),
            keys[row : row + 1],
            num_draft=num_draft,
            kernels=api,
            recompute=True,
        )
        for level, tokens in enumerate(alone.tokens):
            checks.assert_equal(
                together.tokens[level][row : row + 1],
                tokens,
                label=f"level {level} tokens in a batch vs alone",
                call=f"{call}; row {row}",
            )
        checks.assert_equal(
            together.latents[row : row + 1],
            alone.latents,
            label="latents in a batch vs alone",
            call=f"{call}; row {row}",
        )


@given(data=st.data())
def test_the_kv_kept_after_level_drafting_is_the_kv_of_the_emitted_levels_only(impl, data):
    """Like C8's rewind: what survives equals the K/V rebuilt from the emitted tokens."""
    target, draft, prefix, generate, call = draw_generation(data, level_draft_api(impl))
    result = generate()
    steer_to_rejections(result)
    emitted = mx.concatenate([prefix, *result.tokens], axis=1)
    dtype = DTYPES[target.config.dtype]
    finished = np.sort(np.concatenate([state[0] for state in result.final_states]))
    checks.assert_equal(finished, np.arange(prefix.shape[0]), label="rows with a final K/V state", call=call)
    for rows, target_covered, target_kv, draft_covered, draft_kv in result.final_states:
        tokens = emitted[mx.array(rows)]
        for name, model, covered, kept in (
            ("target", target, target_covered, target_kv),
            ("draft", draft, draft_covered, draft_kv),
        ):
            rebuilt = model(tokens[:, :covered])[1]
            checks.assert_equal(len(kept), len(rebuilt), label=f"{name} layers with K/V kept", call=call)
            for layer, ((k, v), (k_fresh, v_fresh)) in enumerate(zip(kept, rebuilt)):
                for part, actual, expected in (("K", k, k_fresh), ("V", v, v_fresh)):
                    checks.assert_close(
                        actual,
                        expected,
                        dtype=dtype,
                        label=f"{name} {part} kept vs rebuilt from the emitted tokens",
                        call=f"{call}; rows {rows.tolist()}, layer {layer}",
                    )


@given(data=st.data())
def test_greedy_level_drafting_reproduces_the_target_greedy_level_by_level_generation(impl, data):
    target, _, prefix, generate, call = draw_generation(
        data, level_draft_api(impl), dtypes=("float32", "float16"), greedy=True
    )
    result = generate()
    tokens, latents, decisive = generate_greedy_levels(target, prefix)
    margin = min(checks.top_two_gap(logits) for logits in decisive)
    scale = max(float(np.abs(checks.as_numpy(logits)).max()) for logits in decisive)
    actual = np.concatenate([np.array(result.latents), *[np.array(t) for t in result.tokens]], axis=1)
    expected = np.concatenate([np.array(latents), *[np.array(t) for t in tokens]], axis=1)
    checks.assert_decodings_equal(
        actual.ravel().tolist(),
        expected.ravel().tolist(),
        margin=margin,
        scale=scale,
        dtype=DTYPES[target.config.dtype],
        label="greedy level drafting vs target greedy",
        call=call,
    )


BAD_GENERATION_CALLS = {
    "num_draft 0": ("num_draft", {"num_draft": 0}),
    "num_draft 1.5": ("num_draft", {"num_draft": 1.5}),
    "num_draft True": ("num_draft", {"num_draft": True}),
    "draft of another vocabulary": ("draft", {"draft": {"vocab_size": 3}}),
    "draft of other level sizes": ("draft", {"draft": {"level_sizes": (1, 2)}}),
    "target under full attention": ("target", {"target": {"mask": "full"}, "draft": {"mask": "full"}}),
    "prefix one token short": ("prefix", {"prefix": [[0]]}),
    "prefix of floats": ("prefix", {"prefix": [[0.0, 1.0]]}),
    "prefix id beyond the vocabulary": ("prefix", {"prefix": [[0, 4]]}),
    "key of the wrong dtype": ("key", {"key": mx.array([1.0, 2.0])}),
}
TINY = dict(vocab_size=4, prefix_length=2, level_sizes=(2, 1), codebook_size=2, d_model=8, num_heads=1, num_layers=1)


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@pytest.mark.parametrize("case", sorted(BAD_GENERATION_CALLS))
def test_invalid_level_drafting_arguments_raise_a_value_error_naming_the_argument(impl, case):
    api = level_draft_api(impl)
    name, changes = BAD_GENERATION_CALLS[case]
    target = api.make_model(api.NCMConfig(**{**TINY, **changes.get("target", {})}))
    draft = api.make_model(api.NCMConfig(**{**TINY, "seed": 1, **changes.get("draft", {})}))
    prefix = mx.array(changes.get("prefix", [[0, 1]]))
    key = changes.get("key", mx.random.key(0))
    with pytest.raises(ValueError, match=rf"^{name}:"):
        api.generate_level_speculative(target, draft, prefix, key, num_draft=changes.get("num_draft", 2), kernels=api)


BAD_PASS_CALLS = {
    "level beyond the last": ("level", dict(level=2)),
    "no drafted level": ("drafted", dict(drafted=[])),
    "bonus block past the last level": ("drafted", dict(level=1, tokens_length=4, drafted=[[[0]]], bonus=True)),
    "covered inside a level": ("covered", dict(covered=1)),
    "covered without K/V": ("covered", dict(kv=None, covered=2)),
    "tokens one short": ("tokens", dict(tokens_length=1)),
    "drafted level of the wrong size": ("drafted", dict(drafted=[[[0]]])),
}


@pytest.mark.claim("C11")  # a protocol requirement: replaces the module's claims
@pytest.mark.parametrize("case", sorted(BAD_PASS_CALLS))
def test_invalid_verification_pass_arguments_raise_a_value_error_naming_the_argument(impl, case):
    api = level_draft_api(impl)
    name, changes = BAD_PASS_CALLS[case]
    model = api.make_model(api.NCMConfig(**TINY))
    tokens = mx.zeros((1, changes.get("tokens_length", 2)), dtype=mx.int32)
    kv = changes.get("kv", model(mx.zeros((1, 2), dtype=mx.int32))[1])
    drafted = [mx.array(d, dtype=mx.int32) for d in changes.get("drafted", [[[0, 1]]])]
    with pytest.raises(ValueError, match=rf"^{name}:"):
        api.verify_drafted_levels(
            model, kv, changes.get("covered", 2), tokens, drafted, changes.get("level", 0), changes.get("bonus", False)
        )
