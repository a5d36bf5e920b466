"""mlx-lm's known upstream bugs: the one table of the suite's expected failures, keyed by node id.

A known upstream bug is a property that fails on mlx-lm's own code for a reason reported upstream. The plugin
(`ncm_verify.pytest_plugin.expected`) marks each listed node a strict expected failure at collection, so a
release that fixes the bug turns the run red until its row is removed, and warns of a row that matches nothing.
"""

from __future__ import annotations

SLIDING_WINDOW_REWIND = (
    "mlx-lm #1423 (fix PR #1427 unmerged): once a RotatingKVCache layer wraps, trim_prompt_cache refuses "
    "(returns 0) and speculative_generate_step ignores the refusal, keeping rejected drafts. Repro: "
    "make_tiny_model(TinySpec('sliding-window llama', seed=1)) as target, seed 2 as draft, prompt [1, 2, 3], "
    "max_tokens=16, num_draft_tokens=3: tokens differ from generate_step's from token 1 on"
)
WRAPPED_TRIM = (
    "mlx-lm PR #1512 (unmerged): RotatingKVCache.trim on a wrapped ring moves offset back and reports success "
    "but keeps the trimmed entries. Repro: c = RotatingKVCache(4); 5 single-position updates; c.trim(1) == 1; "
    "the next update_and_fetch still returns position 4's key"
)
UNBOUNDED_BUDGET = (
    "mlx-lm PR #1591 (unmerged): speculative_generate_step(max_tokens=-1), documented as an infinite "
    "generator, raises 'No arrays provided' (min(-1 - ntoks, num_draft) drafts). Repro: "
    "next(speculative_generate_step(mx.array([1]), target, draft, max_tokens=-1))"
)

RECURRENT_DRAFT = (
    "unreported upstream (mlx-lm's issues searched; PR #1109, merged, refuses a non-trimmable *target* cache only): "
    "speculative_generate_step accepts a recurrent draft, trim_prompt_cache then returns 0 for the whole draft cache "
    "and the loop ignores it, so the draft's caches keep every rejected draft (output stays exact, drafting degrades). "
    "Repro: .venv/bin/python mlx_peer_properties/repro/mlx_lm_recurrent_draft.py"
)
KEEP_RING_CHUNKS = (
    "unreported upstream (mlx-lm's issues searched; the keep prefix is the attention-sink design of mlx-examples "
    "PR #931, and mlx-examples #1000 notes the ring assumes one long prompt, then one token at a time): a "
    "RotatingKVCache with keep > 0 masks a multi-token pass as a plain sliding window, so past the window no query "
    "of the pass sees the keep prefix one-token steps attend to. Repro: "
    ".venv/bin/python mlx_peer_properties/repro/mlx_lm_keep_ring_chunks.py"
)

_LOOP = "properties/test_mlx_lm_loop.py::"
_ROLLBACK = "properties/test_rollback.py::"
KNOWN_UPSTREAM_BUGS: dict[str, str] = {
    # node id (a property on [decoder-model kind]) -> the upstream reference and repro
    f"{_LOOP}test_greedy_speculative_decoding_emits_the_tokens_of_plain_greedy_decoding[mlx-lm-sliding-window llama]": (
        SLIDING_WINDOW_REWIND
    ),
    f"{_LOOP}test_caches_after_speculative_decoding_hold_exactly_the_tokens_their_offset_claims"
    "[mlx-lm-sliding-window llama]": SLIDING_WINDOW_REWIND,
    f"{_LOOP}test_every_target_sampler_call_is_handed_the_target_conditional_of_the_tokens_emitted_before_it"
    "[mlx-lm-sliding-window llama]": SLIDING_WINDOW_REWIND,
    f"{_LOOP}test_a_budget_of_minus_one_is_unbounded[mlx-lm-llama]": UNBOUNDED_BUDGET,
    f"{_LOOP}test_a_budget_of_minus_one_is_unbounded[mlx-lm-sliding-window llama]": UNBOUNDED_BUDGET,
    f"{_LOOP}test_a_trimmed_rotating_cache_attends_to_exactly_the_entries_it_kept[mlx-lm-cache alone]": WRAPPED_TRIM,
    f"{_ROLLBACK}test_a_loop_given_a_recurrent_draft_refuses_it_or_rolls_its_caches_back_to_the_tokens_emitted"
    "[mlx-lm]": RECURRENT_DRAFT,
    f"{_ROLLBACK}test_a_sliding_window_ring_gives_every_position_the_same_logits_in_one_pass_as_one_token_at_a_time"
    "[a keep prefix]": KEEP_RING_CHUNKS,
}

BUG_RAISES: dict[str, tuple[type[BaseException], ...]] = {UNBOUNDED_BUDGET: (AssertionError, ValueError)}
"""What a known bug fails with when not an assertion: mlx-lm's own error ('No arrays provided')."""


def expected_failure(reason: str) -> type[BaseException] | tuple[type[BaseException], ...]:
    """The exceptions a known upstream bug fails with: an assertion unless `BUG_RAISES` says more."""
    return BUG_RAISES.get(reason, AssertionError)
