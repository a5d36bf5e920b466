"""The C8 properties have teeth: each planted mlx-lm-style bug fails the property aimed at it.

Each variant is the reference implementation with one decoding decision changed,
run in-process through the property's own Hypothesis test under fixed settings.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import ncm_verify.reference as reference
from ncm_verify.ncm import decode, kv_cache

ROOT = Path(__file__).resolve().parents[1]
PLANTED_SETTINGS = settings(
    max_examples=30, derandomize=True, database=None, deadline=None,
    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
)


def load_properties() -> types.ModuleType:
    """The property module under a private name, so its collected tests stay untouched."""
    spec = importlib.util.spec_from_file_location("_c8_properties", ROOT / "properties" / "test_mlx_lm_conventions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def planted(**changes) -> types.ModuleType:
    """The reference implementation with `changes` swapped in."""
    module = types.ModuleType("planted")
    module.__dict__.update({k: v for k, v in vars(reference).items() if not k.startswith("__")})
    module.__dict__.update(changes)
    return module


class SilentRotatingKVCache(kv_cache.RotatingKVCache):
    """mlx-lm #1423: a wrapped window moves its offset back and reports success, keeping the rejected entries."""

    def trim(self, n):
        n = min(self.offset, n)
        self.offset -= n
        return n


class NoOpRotatingKVCache(kv_cache.RotatingKVCache):
    """Reports every trim as done and does nothing."""

    def trim(self, n):
        return n


def rewind_one_short(target_cache, draft_cache, num_draft, num_accepted):
    """Keeps the first rejected draft in the target cache."""
    kv_cache.trim_prompt_cache(target_cache, max(num_draft - num_accepted - 1, 0))
    kv_cache.trim_prompt_cache(draft_cache, max(num_draft - num_accepted - 1, 0))


def rewind_target_only(target_cache, draft_cache, num_draft, num_accepted):
    """mlx-lm's `_rewind_cache` shape, but the draft cache is never rewound."""
    kv_cache.trim_prompt_cache(target_cache, num_draft - num_accepted)


def prefill_whole_prompt(model, prompt, cache, prefill_step_size=512):
    """Processes the last prompt token too, so the first step reads it twice."""
    prompt = kv_cache.check_tokens("prompt", prompt, model)
    kv_cache.apply_model(model, prompt, cache)
    return prompt[:, -1:]


def generate_without_cut(target, draft, prompt, max_tokens, **options):
    """Returns the last round's surplus tokens too."""
    emitted = decode.speculative_generate(target, draft, prompt, max_tokens, **options)
    if max_tokens > 1:
        return emitted + emitted[-1:]
    return emitted


def generate_accepting_any_budget(target, draft, prompt, max_tokens, **options):
    """Treats a budget below 1 as 'nothing to do'."""
    if isinstance(max_tokens, int) and max_tokens < 1:
        return []
    return decode.speculative_generate(target, draft, prompt, max_tokens, **options)


PLANTED = {
    "silent_rotating_trim": (
        dict(RotatingKVCache=SilentRotatingKVCache),
        "test_a_wrapped_rotating_cache_is_trimmed_exactly_or_refuses_never_keeps_rejected_entries",
    ),
    "no_op_rotating_trim": (
        dict(RotatingKVCache=NoOpRotatingKVCache),
        "test_a_wrapped_rotating_cache_is_trimmed_exactly_or_refuses_never_keeps_rejected_entries",
    ),
    "rewind_one_short": (
        dict(rewind_caches=rewind_one_short),
        "test_caches_rewound_by_the_rejected_count_equal_caches_built_from_the_accepted_tokens",
    ),
    "draft_never_rewound": (
        dict(rewind_caches=rewind_target_only),
        "test_caches_rewound_by_the_rejected_count_equal_caches_built_from_the_accepted_tokens",
    ),
    "prefill_whole_prompt": (
        dict(apply_prefill=prefill_whole_prompt),
        "test_prefilling_all_but_the_last_token_then_feeding_it_gives_the_whole_prompt_logits",
    ),
    "surplus_not_cut": (
        dict(speculative_generate=generate_without_cut),
        "test_speculative_decoding_emits_exactly_max_tokens_for_every_positive_budget",
    ),
    "non_positive_budget_accepted": (
        dict(speculative_generate=generate_accepting_any_budget),
        "test_a_budget_that_is_not_a_positive_integer_or_exceeds_the_context_raises_a_value_error_naming_max_tokens",
    ),
}


def run_property(name: str, implementation: types.ModuleType, **arguments) -> None:
    """Run property `name` of the C8 module against `implementation` under `PLANTED_SETTINGS`."""
    inner = getattr(load_properties(), name).hypothesis.inner_test
    PLANTED_SETTINGS(given(data=st.data())(inner))(impl=implementation, **arguments)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_decoding_bug_fails_the_property_aimed_at_it(name):
    changes, prop = PLANTED[name]
    arguments = {"dtype": "float32"} if "prefill" in prop else {}
    # A property fails by an assertion, or by pytest.raises seeing no ValueError.
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        run_property(prop, planted(**changes), **arguments)


def test_the_same_properties_pass_on_the_reference_under_these_settings():
    for changes, prop in {prop: (changes, prop) for changes, prop in PLANTED.values()}.values():
        run_property(prop, reference, **({"dtype": "float32"} if "prefill" in prop else {}))


def test_the_greedy_decoding_property_catches_a_rewind_that_keeps_a_rejected_draft():
    # Stale entries either change a token (AssertionError) or overrun the context the
    # reference refuses to exceed (ValueError on valid input): both fail the property.
    with pytest.raises((AssertionError, ValueError)):
        run_property("test_greedy_speculative_decoding_emits_exactly_the_target_greedy_decoding",
                     planted(speculative_generate=generate_with_stale_rewind))


def generate_with_stale_rewind(target, draft, prompt, max_tokens, **options):
    """The reference loop with `rewind_one_short` in place of `rewind_caches`."""
    original = decode.rewind_caches
    decode.rewind_caches = rewind_one_short
    try:
        return decode.speculative_generate(target, draft, prompt, max_tokens, **options)
    finally:
        decode.rewind_caches = original
