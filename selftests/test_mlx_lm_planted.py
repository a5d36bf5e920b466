"""The C8/C11 and mlx-lm loop properties have teeth: each planted decoding bug fails every property aimed at it.

Each variant is the reference implementation (or the exact verifier on mlx-lm
models) with one decoding decision changed, run in-process through the
property's own Hypothesis test under fixed settings.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import types
from pathlib import Path

import mlx.core as mx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mlx_lm.models import cache as mlx_lm_cache
from rollback_planted import ROLLBACK_BUGS

import ncm_verify.reference as reference
from ncm_verify.reference import speculative
from ncm_verify.reference.drafting import speculative_step as exact_verifier  # where its names are looked up
from ncm_verify.reference.ncm import decode, kv_cache

ROOT = Path(__file__).resolve().parents[1]
PLANTED_SETTINGS = settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
CONVENTIONS = "test_mlx_lm_conventions.py"
LOOP = "test_mlx_lm_loop.py"
ROLLBACK = "test_rollback.py"
EXACT_LOOP = "test_every_target_sampler_call_is_handed_the_target_conditional_of_the_tokens_emitted_before_it"
SAMPLED_LOOP = "test_sampled_first_tokens_follow_the_target_law_and_drafts_stand_at_the_rate_of_their_rule"


def load_properties(filename: str) -> types.ModuleType:
    """A property module under a private name, so its collected tests stay untouched."""
    spec = importlib.util.spec_from_file_location(f"_planted_{Path(filename).stem}", ROOT / "properties" / filename)
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
    """mlx-lm PR #1512: moves its offset back and reports success, keeping the trimmed entries."""

    def trim(self, n):
        n = min(self.offset, n)
        self.offset -= n
        return n


class NoOpRotatingKVCache(kv_cache.RotatingKVCache):
    """Reports every trim as done and does nothing."""

    def trim(self, n):
        return n


class StaleValuesKVCache(kv_cache.KVCache):
    """Stores the right K/V but returns the keys as the values of every earlier position."""

    def update_and_fetch(self, keys, values):
        held = self.offset
        all_keys, all_values = super().update_and_fetch(keys, values)
        return all_keys, mx.concatenate([all_keys[:, :, :held], all_values[:, :, held:]], axis=2)


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


def make_prompt_cache_with(cache_type):
    def make_prompt_cache(model, max_kv_size=None):
        return [cache_type() for _ in model.layers]

    return make_prompt_cache


def generate_without_cut(target, draft, prompt, max_tokens, **options):
    """Returns the last round's surplus tokens too."""
    emitted = decode.speculative_generate(target, draft, prompt, max_tokens, **options)
    if max_tokens > 1:
        return emitted + emitted[-1:]
    return emitted


def generate_accepting_negative_budgets(target, draft, prompt, max_tokens, **options):
    """Treats a negative budget as 'nothing to do'."""
    if isinstance(max_tokens, int) and max_tokens < 0:
        return []
    return decode.speculative_generate(target, draft, prompt, max_tokens, **options)


def rewind_ignoring_refusal(model_cache, draft_cache, num_draft, num_accepted):
    """mlx-lm's `_rewind_cache`: a trim that returns 0 (refused) goes unnoticed (#1423)."""
    mlx_lm_cache.trim_prompt_cache(model_cache, num_draft - num_accepted)
    mlx_lm_cache.trim_prompt_cache(draft_cache, max(num_draft - num_accepted - 1, 0))


@contextlib.contextmanager
def swapped(module: types.ModuleType, changes: dict):
    """`module`'s names `changes` swapped in, and the originals back on exit."""
    saved = {name: getattr(module, name) for name in changes}
    vars(module).update(changes)
    try:
        yield
    finally:
        vars(module).update(saved)


def verifier_with(**changes):
    """The exact verifier's `speculative_generate_step` with its module's names `changes` swapped in while it
    runs (its functions look each other up there): around the call and each step, never while the generator
    waits, so a property that fails and leaves it suspended leaves the module as it found it."""

    def speculative_generate_step(*args, **kwargs):
        with swapped(exact_verifier, changes):
            steps = exact_verifier.speculative_generate_step(*args, **kwargs)
        while True:
            with swapped(exact_verifier, changes):
                step = next(steps, None)
            if step is None:
                return
            yield step

    return speculative_generate_step


speculative_ignoring_refused_trims = verifier_with(
    rewind=rewind_ignoring_refusal, make_prompt_cache=mlx_lm_cache.make_prompt_cache, rewinds_by_trim=lambda c: True
)
"""The exact verifier on mlx-lm's own caches (rotating for a sliding window), trimming them as mlx-lm's loop does
and ignoring refused trims."""

speculative_keeping_a_rejected_draft = verifier_with(rewind=rewind_one_short)
"""The target's cache keeps the first rejected draft, so the next block is scored after it."""


def verifier_with_a_stale_conditional(after: int):
    """After a rejection, once `after` tokens are out, the sampler is handed as the next block's first row the
    row the correction was drawn from: the conditional one position before. Caches, yields and greedy
    decoding stay right."""

    def speculative_generate_step(*args, **kwargs):
        verify, stale, emitted = exact_verifier.verify, [], [0]

        def verify_with_stale_row(kernels, sampler, logprobs, q, drafts):
            late = stale and emitted[0] >= after and not sampler.greedy
            handed = mx.concatenate([stale[0], logprobs[1:]]) if late else logprobs
            accepted, tokens = verify(kernels, sampler, handed, q, drafts)
            stale[:] = [logprobs[accepted : accepted + 1]] if accepted < drafts.size else []
            emitted[0] += len(tokens)
            return accepted, tokens

        yield from verifier_with(verify=verify_with_stale_row)(*args, **kwargs)

    return speculative_generate_step


def verify_accepting_every_draft(target_probs, draft_probs, draft_tokens, *, key, num_draft=None):
    """Every draft stands, then a bonus token from the target's last row: the draft's law, not the target's."""
    bonus = mx.argmax(target_probs[:, -1], axis=-1, keepdims=True).astype(mx.int32)
    tokens = mx.concatenate([draft_tokens.astype(mx.int32), bonus], axis=1)
    return speculative.ChainOutcome(tokens, mx.full((tokens.shape[0],), draft_tokens.shape[1], dtype=mx.int32))


def speculative_accepting_every_draft(*args, **kwargs):
    kernels = types.SimpleNamespace(verify_chain=verify_accepting_every_draft, verify_greedy=speculative.verify_greedy)
    return exact_verifier.speculative_generate_step(*args, kernels=kernels, **kwargs)


def planted_decoder(**changes) -> types.ModuleType:
    """The exact verifier decoder with `changes` swapped in."""
    module = types.ModuleType("planted_decoder")
    module.__dict__.update({k: v for k, v in vars(exact_verifier).items() if not k.startswith("__")})
    module.__dict__.update(changes)
    return module


PLANTED = {
    "silent_rotating_trim": (
        CONVENTIONS,
        dict(impl=planted(RotatingKVCache=SilentRotatingKVCache)),
        "test_a_trimmed_rotating_cache_attends_to_exactly_the_entries_it_kept_or_refuses",
    ),
    "no_op_rotating_trim": (
        CONVENTIONS,
        dict(impl=planted(RotatingKVCache=NoOpRotatingKVCache)),
        "test_a_trimmed_rotating_cache_attends_to_exactly_the_entries_it_kept_or_refuses",
    ),
    "fetch_returns_stale_values": (
        CONVENTIONS,
        dict(impl=planted(make_prompt_cache=make_prompt_cache_with(StaleValuesKVCache)), dtype="float32"),
        "test_prefilling_all_but_the_last_token_then_feeding_it_gives_the_whole_prompt_logits",
    ),
    "rewind_one_short": (
        CONVENTIONS,
        dict(impl=planted(rewind_caches=rewind_one_short)),
        "test_caches_rewound_by_the_rejected_count_equal_caches_built_from_the_accepted_tokens",
    ),
    "draft_never_rewound": (
        CONVENTIONS,
        dict(impl=planted(rewind_caches=rewind_target_only)),
        "test_caches_rewound_by_the_rejected_count_equal_caches_built_from_the_accepted_tokens",
    ),
    "prefill_whole_prompt": (
        CONVENTIONS,
        dict(impl=planted(apply_prefill=prefill_whole_prompt), dtype="float32"),
        "test_prefilling_all_but_the_last_token_then_feeding_it_gives_the_whole_prompt_logits",
    ),
    "surplus_not_cut": (
        CONVENTIONS,
        dict(impl=planted(speculative_generate=generate_without_cut)),
        "test_speculative_decoding_emits_exactly_max_tokens_for_every_budget_including_zero",
    ),
    "negative_budget_accepted": (
        CONVENTIONS,
        dict(impl=planted(speculative_generate=generate_accepting_negative_budgets)),
        "test_a_budget_that_is_negative_not_an_integer_or_beyond_the_context_raises_a_value_error_naming_max_tokens",
    ),
    "loop_ignores_a_refused_trim": (
        LOOP,
        dict(
            decoder_name=planted_decoder(speculative_generate_step=speculative_ignoring_refused_trims),
            kind="sliding-window llama",
        ),
        "test_greedy_speculative_decoding_emits_the_tokens_of_plain_greedy_decoding",
    ),
    "every_draft_stands": (
        LOOP,
        dict(decoder_name=planted_decoder(speculative_generate_step=speculative_accepting_every_draft), kind="llama"),
        (EXACT_LOOP, SAMPLED_LOOP),
    ),
    "sampler_handed_a_stale_conditional": (
        LOOP,
        dict(
            decoder_name=planted_decoder(speculative_generate_step=verifier_with_a_stale_conditional(0)), kind="llama"
        ),
        EXACT_LOOP,
    ),
    # past the two tokens whose law the sampled smoke tests: only the call-by-call check can see it
    "sampler_handed_a_stale_conditional_from_the_third_token": (
        LOOP,
        dict(
            decoder_name=planted_decoder(speculative_generate_step=verifier_with_a_stale_conditional(2)), kind="llama"
        ),
        EXACT_LOOP,
    ),
    "target_cache_keeps_a_rejected_draft": (
        LOOP,
        dict(
            decoder_name=planted_decoder(speculative_generate_step=speculative_keeping_a_rejected_draft), kind="llama"
        ),
        EXACT_LOOP,
    ),
}
"""Planted bug -> (property file, arguments, the property or properties aimed at it: each must fail)."""
PLANTED.update(
    {
        name: (
            ROLLBACK,
            # the loop properties take the module under test, the batched one the suite's rollback functions
            dict(impl=decoder, decoder_name=decoder, family=family),
            aimed,
        )
        for name, (changes, family, aimed) in ROLLBACK_BUGS.items()
        for decoder in [planted_decoder(speculative_generate_step=verifier_with(**changes), **changes)]
    }
)
SAMPLING = {SAMPLED_LOOP}
"""Properties too costly to rerun at 30 examples here; `make verify PROFILE=thorough` runs them on the correct
decoders (they are thorough_only: C7 rests on the exact call-by-call check)."""


def aimed_at(name: str) -> tuple[str, ...]:
    prop = PLANTED[name][2]
    return (prop,) if isinstance(prop, str) else prop


def run_property(filename: str, name: str, **arguments) -> None:
    """Run property `name` of `filename` with `arguments` under `PLANTED_SETTINGS`."""
    inner = getattr(load_properties(filename), name).hypothesis.inner_test
    taken = inspect.signature(inner).parameters
    PLANTED_SETTINGS(given(data=st.data())(inner))(**{k: v for k, v in arguments.items() if k in taken})


@pytest.mark.parametrize(
    ("name", "prop"),
    [pytest.param(name, prop, id=f"{name}-{prop}") for name in sorted(PLANTED) for prop in aimed_at(name)],
)
def test_each_planted_decoding_bug_fails_every_property_aimed_at_it(name, prop):
    filename, arguments, _ = PLANTED[name]
    # A property fails by an assertion, or by pytest.raises seeing no ValueError.
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        run_property(filename, prop, **arguments)


def test_the_same_properties_pass_on_the_reference_under_these_settings():
    for filename, arguments, prop in {
        prop: (f, a, prop) for name, (f, a, _) in PLANTED.items() for prop in aimed_at(name) if prop not in SAMPLING
    }.values():
        correct = {"impl": reference} if "impl" in arguments else {}
        correct |= {"decoder_name": "exact verifier"} if "decoder_name" in arguments else {}
        run_property(filename, prop, **{**arguments, **correct})


def test_the_greedy_decoding_property_catches_a_rewind_that_keeps_a_rejected_draft():
    # Stale entries either change a token (AssertionError) or overrun the context the
    # reference refuses to exceed (ValueError on valid input): both fail the property.
    with pytest.raises((AssertionError, ValueError)):
        run_property(
            CONVENTIONS,
            "test_greedy_speculative_decoding_emits_exactly_the_target_greedy_decoding",
            impl=planted(speculative_generate=generate_with_stale_rewind),
        )


def generate_with_stale_rewind(target, draft, prompt, max_tokens, **options):
    """The reference loop with `rewind_one_short` in place of `rewind_caches`."""
    original = decode.rewind_caches
    decode.rewind_caches = rewind_one_short
    try:
        return decode.speculative_generate(target, draft, prompt, max_tokens, **options)
    finally:
        decode.rewind_caches = original
