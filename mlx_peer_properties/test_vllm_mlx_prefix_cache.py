"""vllm-mlx 0.6.0's prefix caches judged cached == uncached through its own scheduler (`peers.vllm_mlx_prefix`).

make install-peers PEER=vllm-mlx && make verify-peers PEERS=vllm-mlx

Each of the three cache modes (memory-aware, the default; ``--no-memory-aware-cache``; ``--use-paged-cache``) is put
under the one prefix-cache machine (`prefix_cache_machine.py`) on the three model families, float32 and bfloat16.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prefix_cache_machine import assert_served_equals_uncached, assert_serves_after_a_failed_request, run_machine

from ncm_verify.peers import prefix_engines
from ncm_verify.peers import vllm_mlx_prefix as peer

pytestmark = pytest.mark.usefixtures("quiet")
EXAMPLES = 4
"""Machine runs per node (10 steps each, ~8-30 requests a run): about 2-6 s a node on 2 shared cores."""
STEPS = 10
UNTRIMMABLE = ("sliding", "hybrid")
NO_REUSE = (
    "not applicable: this mode stores no entry for caches it cannot trim (a wrapped sliding-window ring, recurrent "
    "state): scheduler.py:2547 _prompt_output_entry_is_useless drops them, and only the memory-aware mode keeps a "
    "post-prefill snapshot instead (:2714); every request of this run was served uncached (reused 0)"
)


def judge(mode: str, model, checks, context=contextlib.nullcontext) -> list[int]:
    """The machine over `mode`; a hybrid model's requests one at a time (batching it is a finding of its own,
    `test_a_hybrid_request_batched_beside_a_longer_one_gets_its_uncached_conditional`)."""
    batch = model.family != "hybrid"
    with context():
        hits = run_machine(lambda: peer.VllmMlxPrefix(mode, batch), model, checks, examples=EXAMPLES, steps=STEPS)
    if not any(hits):
        if mode != "memory" and model.family in UNTRIMMABLE:
            pytest.skip(NO_REUSE)
        pytest.fail(
            f"{mode} cache on {model.family}: no request reused a cached token: a cold-cache pass proves nothing"
        )
    return hits


@pytest.mark.prefix_rule(1)
@pytest.mark.parametrize("dtype", prefix_engines.DTYPES)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
@pytest.mark.parametrize("mode", peer.MODES)
def test_served_tokens_and_logprobs_equal_an_uncached_forward(mode, family, dtype, models):
    """Rule 1: every response (exact, prefix, supersequence, common-prefix and block hits, batches beside uncached
    prompts, after restarts) equals greedy decoding by full forwards of a fresh model, and the run sees hits."""
    judge(mode, models(family, dtype), (1,))


@pytest.mark.prefix_rule(3)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
@pytest.mark.parametrize("mode", peer.MODES)
def test_an_evicted_or_reused_entry_never_changes_what_a_prompt_gets(mode, family, models):
    """Rule 3: a prompt served again (after fills that evict, after its entry served others) gets what it got."""
    if mode != "memory" and family in UNTRIMMABLE:
        pytest.skip(NO_REUSE)
    judge(mode, models(family, "float32"), (3,))


@pytest.mark.prefix_rule(2)
def test_the_memory_aware_cache_reports_the_reuse_its_lookup_documents(models):
    """Rule 2: the default mode's cached_tokens is, request by request, what `MemoryAwarePolicy` states (exact and
    supersequence hits prefilled and reported 0; the longest stored prefix; else the sorted neighbours' common
    prefix), with entries saved and loaded across restarts as its server does; the run must see hits. On the
    attention model: for caches it cannot trim the mode stores prompt snapshots, not modelled."""
    judge("memory", models("attention", "float32"), (2,))


@pytest.mark.prefix_rule(2)
def test_the_legacy_cache_reports_the_reuse_its_trie_walk_documents(models):
    """Rule 2: the legacy mode's cached_tokens is, request by request, what `TriePolicy` states (the key where the
    walk stops, or the prompt whole for an exact or longer key); the run must see hits. On the attention model (the
    only one this mode stores entries for)."""
    judge("legacy", models("attention", "float32"), (2,))


@pytest.mark.prefix_rule(2)
def test_the_paged_cache_reports_the_reuse_its_chained_block_hash_documents(models):
    """Rule 2: the paged mode's cached_tokens is, request by request, the whole blocks of the prompt found along a
    chain of stored prompt + completion blocks (`VllmMlxPrefix.policy`); the run must see hits."""
    judge("paged", models("attention", "float32"), (2,))


@pytest.mark.prefix_rule(1)
def test_with_the_full_hit_fixed_the_legacy_mode_serves_uncached_tokens(models):
    """The full-hit finding's one-line fix applied (`peer.full_hit_fixed`): the legacy mode then passes rules 1 and
    3 (it is its only fault there)."""
    judge("legacy", models("attention", "float32"), (1, 3), peer.full_hit_fixed)


@pytest.mark.prefix_rule(1)
@given(
    head=st.lists(st.integers(0, 23), min_size=peer.BLOCK, max_size=peer.BLOCK),
    body=st.lists(st.integers(0, 23), min_size=2 * peer.BLOCK, max_size=3 * peer.BLOCK),
    tail=st.lists(st.integers(0, 23), min_size=1, max_size=3),
)
def test_paged_blocks_stored_after_another_prefix_are_not_served_at_the_start(head, body, tail, models):
    """Rule 1, the paged mode with the full-hit fix applied: after a prompt `head + body` (its blocks stored at
    positions from one block on), the prompt `body + tail` (the same tokens at the start) gets what full forwards
    give: a chained block hash cannot match it, nothing of it having been computed at those positions."""
    model = models("attention", "float32")
    with peer.full_hit_fixed():
        engine = peer.VllmMlxPrefix("paged")
        engine.start(model, 3)
        engine.serve([head + body], 3)
        served = engine.serve([body + tail], 3)[0]
    assert_served_equals_uncached(served, model, call=f"paged: serve([{head + body}]); serve([{body + tail}])")


@pytest.mark.prefix_rule(1)
@pytest.mark.parametrize("mode", ["memory", "legacy"])
def test_planted_a_lookup_claiming_one_token_more_is_caught(mode, models):
    """The mode's own lookup with one prompt token fewer left to compute than it matched (`peer.planted`), on a
    sound engine (legacy with the full-hit fix): rule 1 must fail. The paged mode's control is planted below, on
    prompts its two findings cannot reach."""

    @contextlib.contextmanager
    def both():
        with peer.full_hit_fixed(), peer.planted(mode):
            yield

    judge(mode, models("attention", "float32"), (1,), both)


STORED = [3, 1, 2, 5, 7, 9, 4, 8, 6]
"""Two whole blocks and one token: the paged mode stores the blocks where they were computed."""
EXTENSIONS = ([11, 13], [0, 22, 17])
"""Prompts that only extend STORED: every reused block sits where it was computed (so the paged mode's block finding
cannot fire) and each leaves prompt tokens to compute (so its full-hit finding cannot)."""


def serve_extensions_of_a_stored_prompt(model) -> list[int]:
    """The paged mode, full-hit fix applied: STORED, then each extension, each response held to rule 1; the reuse."""
    with peer.full_hit_fixed():
        engine = peer.VllmMlxPrefix("paged")
        engine.start(model, 3)
        try:
            engine.serve([STORED], 3)
            reused = []
            for extension in EXTENSIONS:
                served = engine.serve([STORED + extension], 3)[0]
                call = f"paged: serve([{STORED}]); serve([{STORED + extension}])"
                assert_served_equals_uncached(served, model, call=call)
                reused.append(served.reused or 0)
        finally:
            engine.close()
    return reused


@pytest.mark.prefix_rule(1, 2)
def test_the_paged_mode_serves_extensions_of_a_stored_prompt_from_its_blocks_as_uncached(models):
    """The paged control's sound half: whole blocks reused (a hit, or the control would prove nothing), served exact."""
    reused = serve_extensions_of_a_stored_prompt(models("attention", "float32"))
    assert all(count >= 2 * peer.BLOCK for count in reused), f"paged: extensions of a stored prompt reused {reused}"


@pytest.mark.prefix_rule(1)
def test_planted_a_paged_lookup_claiming_one_token_more_is_caught(models):
    """The paged mode's own lookup with one prompt token fewer left to compute than it matched (`peer.planted`), on
    the scenario the test above shows sound: rule 1 must fail."""
    with peer.planted("paged"):
        serve_extensions_of_a_stored_prompt(models("attention", "float32"))


@pytest.mark.prefix_rule(1)
@given(
    short=st.lists(st.integers(0, 23), min_size=2, max_size=5),
    extra=st.lists(st.integers(0, 23), min_size=1, max_size=6),
)
def test_a_hybrid_request_batched_beside_a_longer_one_gets_its_uncached_conditional(short, extra, models):
    """No cache involved (the first requests of a fresh scheduler): two prompts of different lengths decoded
    together on the hybrid model each get what full forwards give (the scheduler's mlx-lm BatchGenerator pads
    the shorter one on the left)."""
    model = models("hybrid", "float32")
    engine = peer.VllmMlxPrefix("memory")
    engine.start(model, 3)
    longer = short + extra
    for served in engine.serve([short, longer], 3):
        assert served.reused == 0, f"a fresh scheduler reported {served.reused} reused tokens"
        assert_served_equals_uncached(served, model, call=f"VllmMlxPrefix('memory').serve([{short}, {longer}], 3)")


@pytest.mark.prefix_rule(5)
def test_a_persisted_cache_serves_its_keys_as_before_and_a_foreign_one_changes_nothing(models):
    """Rule 5 on the memory-aware mode's save_to_disk / load_from_disk (the server's cache persistence): after a
    restart, its own files serve as before; a truncated or flipped file, or one written by another model of the
    same architecture (other weights: a model updated in place under the same name), is refused or changes
    nothing that is served."""
    other = prefix_engines.make_model_folder(
        models("attention", "float32").path.parent / "attention-float32-other", "attention", "float32", seed=1
    )

    def persisting():
        return peer.VllmMlxPrefix("memory")

    hits = run_machine(persisting, models("attention", "float32"), (1, 5), examples=8, steps=STEPS, other_model=other)
    assert any(hits), "no request reused a cached token: a cold-cache pass proves nothing"


@pytest.mark.prefix_rule(1)
@pytest.mark.parametrize("mode", peer.MODES)
@given(blocks=st.lists(st.integers(0, 23), min_size=peer.BLOCK, max_size=peer.BLOCK * 3), data=st.data())
def test_a_prompt_held_whole_gets_what_full_forwards_give(mode, blocks, data, models):
    """Rule 1 on the one case every mode must get right, whatever the machine's stream: a prompt whose tokens are all
    held (served before: an exact entry, whole stored blocks), served again."""
    prompt = blocks[: len(blocks) // peer.BLOCK * peer.BLOCK]  # whole blocks, for the paged mode
    model = models("attention", "float32")
    engine = peer.VllmMlxPrefix(mode)
    engine.start(model, 3)
    engine.serve([prompt], 3)
    served = engine.serve([prompt], 3)[0]
    note = f"VllmMlxPrefix({mode!r}): serve([{prompt}]) twice"
    assert_served_equals_uncached(served, model, call=note)


@pytest.mark.prefix_rule(6)
@pytest.mark.parametrize("mode", peer.MODES)
@given(
    first=st.lists(st.integers(0, 23), min_size=2, max_size=2 * peer.BLOCK + 1).map(tuple),
    later=st.lists(st.integers(0, 23), min_size=1, max_size=2 * peer.BLOCK).map(tuple),
)
def test_after_a_request_it_refuses_the_scheduler_serves_every_later_one(mode, first, later, models):
    """Rule 6: an empty prompt (its server's engine core passes it on) is answered with an error, and the scheduler
    then serves a held prompt and a new one as full forwards give (with the full-hit fix, whose finding
    has its own node)."""
    model = models("attention", "float32")
    with peer.full_hit_fixed():
        engine = peer.VllmMlxPrefix(mode)
        engine.start(model, 3)
        try:
            call = f"VllmMlxPrefix({mode!r}): serve([{list(first)}]); fail(); serve([{list(first)}]); "
            f"serve([{list(later)}])"
            assert_serves_after_a_failed_request(engine, model, first, later, call=call)
        finally:
            engine.close()
