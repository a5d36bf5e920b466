"""Planted rollback bugs for C18: each a name of the exact verifier swapped for a wrong one.

`ROLLBACK_BUGS` maps a bug to (the exact verifier's names it replaces, the
model family the properties draw for it, the properties that must fail).
`test_mlx_lm_planted.py` runs each through the property's own Hypothesis
test. The variants are written from the bug classes peers shipped or were
reported (mlx-lm #1423, #1446, PR #1486; issue 41 of this project).
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_map
from mlx_lm.models.cache import RotatingKVCache

from ncm_verify.mutants import recurrent_layers
from ncm_verify.reference.drafting import rollback
from ncm_verify.reference.drafting import speculative_step as exact_verifier

# Each bug is aimed at the properties that see it cheapest (the greedy and call-by-call properties catch the
# conv-state, off-by-one and offsets-only bugs too: docs/rollback.md, measured; rerunning them here costs ~10 s)
CACHES = "test_after_every_speculative_round_each_layer_as_attended_equals_the_cache_rebuilt_from_the_accepted_tokens"
GREEDY = "test_greedy_speculative_decoding_over_hybrid_models_emits_the_tokens_of_generate_step"
SAMPLER_CALLS = "test_every_target_sampler_call_over_hybrid_models_is_handed_the_target_conditional_of_what_was_emitted"
"""Not aimed at by default; `python selftests/rollback_planted.py` runs every bug against all four."""
BATCHED = "test_batched_caches_restored_and_replayed_equal_caches_rebuilt_from_each_row_s_accepted_tokens"


def roll_back_keeping_conv_state(model, caches, saved, kept, restore=None):
    """Restores the recurrent state but leaves each convolution state (slot 0) as the rejected drafts left it."""
    conv = [layer.cache[0] for layer in recurrent_layers(caches)]
    rollback.restore_caches(caches, saved)
    for layer, state in zip(recurrent_layers(caches), conv, strict=True):
        layer.cache[0] = state
    rollback.replay(model, caches, kept)


def draft_and_snapshot_after_the_first_draft(draft_model, cache, inputs, count, sampler, processors, history, by_trim):
    """Takes the draft's snapshot one step late: after it ran its inputs and drew the first draft."""
    first, first_q = exact_verifier.draft_tokens(draft_model, cache, inputs, 1, sampler, processors, history)
    saved = None if by_trim else rollback.snapshot_caches(cache)
    if count == 1:
        return first, first_q, saved
    rest, rest_q = exact_verifier.draft_tokens(
        draft_model, cache, first, count - 1, sampler, processors, mx.concatenate([history, first])
    )
    return mx.concatenate([first, rest]), mx.concatenate([first_q, rest_q]), saved


def replay_accepted_off_by(shift: int):
    """`replay_accepted` replaying `shift` more (or fewer) accepted tokens than stood."""

    def replay_accepted(model, draft_model, target, draft, y, draft_y, drafts, num_accepted, steps=None):
        (model_cache, saved), (draft_cache, saved_draft) = target, draft
        if num_accepted < drafts.size:
            kept = mx.concatenate([y, drafts])[: max(num_accepted + 1 + shift, 0)]
            rollback.roll_back(model, model_cache, saved, kept[None])
        if num_accepted < drafts.size - 1:
            kept = mx.concatenate([draft_y, drafts])[: max(draft_y.size + num_accepted + shift, 0)]
            rollback.roll_back(draft_model, draft_cache, saved_draft, kept[None])

    return replay_accepted


def rewind_each_layer_by_count(model_cache, draft_cache, num_draft, num_accepted):
    """mlx-lm's rewind without its refusal: every layer's own `trim(n)`, a wrapped ring's too (#1423, PR #1512)."""
    for cache, count in ((model_cache, num_draft - num_accepted), (draft_cache, max(num_draft - num_accepted - 1, 0))):
        for layer in cache:
            layer.trim(count)


def restore_dropping_the_keep_prefix(caches, saved):
    """Restores every cache, but a ring comes back without its keep prefix (keep 0, the prefix slots reusable)."""
    rollback.restore_caches(caches, saved)
    for cache in caches:
        if isinstance(cache, RotatingKVCache):
            cache.keep = 0


def roll_back_with(planted_restore):
    def roll_back(model, caches, saved, kept, restore=None):
        planted_restore(caches, saved)
        rollback.replay(model, caches, kept)

    return roll_back


def snapshot_of_the_first_row(caches):
    """One snapshot for the batch: row 0's state, handed back to every row."""

    def first_row(leaf):
        if isinstance(leaf, mx.array) and leaf.ndim > 0 and leaf.shape[0] > 1:
            return mx.broadcast_to(leaf[:1], leaf.shape)
        return leaf

    return [tree_map(first_row, state) for state in rollback.snapshot_caches(caches)]


def restore_offsets_only(caches, saved):
    """Moves each cache's offset (and a ring's write index) back; buffers and recurrent state stay as the drafts
    left them."""
    for cache, state in zip(caches, saved, strict=True):
        if isinstance(cache, RotatingKVCache):
            cache.offset, cache._idx = state[2], state[5]
        elif hasattr(cache, "offset"):
            cache.offset = state[2]


def snapshot_sharing_the_buffers(caches):
    """Keeps references to the live buffers: mlx-lm's in-place writes then change the snapshot too."""
    return [cache.state for cache in caches]


ROLLBACK_BUGS = {
    "rollback_conv_state_not_restored": (
        dict(roll_back=roll_back_keeping_conv_state),
        "recurrent",
        (CACHES, BATCHED),
    ),
    # the draft's state only shapes its proposals: the output stays exact, only its caches show the bug
    "rollback_draft_snapshot_after_the_first_draft": (
        dict(draft_and_snapshot=draft_and_snapshot_after_the_first_draft),
        "all",
        (CACHES,),
    ),
    "rollback_replays_one_accepted_token_too_many": (
        dict(replay_accepted=replay_accepted_off_by(1)),
        "all",
        (CACHES,),
    ),
    "rollback_replays_one_accepted_token_too_few": (
        dict(replay_accepted=replay_accepted_off_by(-1)),
        "all",
        (CACHES,),
    ),
    # the target's next multi-token pass mostly drops the stale entries (they read as the oldest): greedy
    # output rarely changes, the caches as attended do
    "rollback_trims_a_wrapped_ring_by_count": (
        dict(rewinds_by_trim=lambda caches: True, rewind=rewind_each_layer_by_count),
        "rings",
        (CACHES,),
    ),
    "rollback_rows_share_one_snapshot": (dict(snapshot_caches=snapshot_of_the_first_row), "all", (BATCHED,)),
    "rollback_restores_offsets_not_buffers": (
        dict(roll_back=roll_back_with(restore_offsets_only)),
        "all",
        (CACHES, BATCHED),
    ),
    # a ring written in place between snapshot and restore: the batched property feeds one token at a time
    "rollback_snapshot_shares_live_buffers": (dict(snapshot_caches=snapshot_sharing_the_buffers), "rings", (BATCHED,)),
    # last: the reference rerun of each property (test_mlx_lm_planted) takes the last family aimed at it, and
    # keep rings are the family the properties' own ci runs draw least
    "rollback_loses_the_keep_prefix": (
        dict(roll_back=roll_back_with(restore_dropping_the_keep_prefix)),
        "keep rings",
        (CACHES, BATCHED),
    ),
}
"""Planted rollback bug -> (exact verifier names replaced, model family drawn, properties that must fail)."""


def main() -> None:
    """Every planted rollback bug against all four loop properties (the matrix docs/rollback.md reports)."""
    import test_mlx_lm_planted as planted  # noqa: PLC0415  (a self-test module: importable from selftests/ only)

    for name in ROLLBACK_BUGS:
        filename, arguments, _ = planted.PLANTED[name]
        verdicts = []
        for prop in (CACHES, GREEDY, SAMPLER_CALLS, BATCHED):
            if arguments["family"] == "keep rings" and prop in (GREEDY, SAMPLER_CALLS):
                verdicts.append("n/a")  # a keep ring's logits depend on chunking in mlx-lm: not decoded here
                continue
            try:
                planted.run_property(filename, prop, **arguments)
                verdicts.append("passes")
            except AssertionError:
                verdicts.append("CAUGHT")
        print(f"{name:48} " + " ".join(f"{v:>7}" for v in verdicts), flush=True)


if __name__ == "__main__":
    main()
