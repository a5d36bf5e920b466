"""mlx-vlm 0.7.10's automatic prefix caching judged cached == uncached through its server engine
(`peers.mlx_vlm_prefix`).

make install-peers PEER=mlx-vlm && make verify-peers PEERS=mlx-vlm

The one prefix-cache machine (`prefix_cache_machine.py`) over the three model families, float32 and bfloat16: APC
runs in block mode on the attention model and in exact (snapshot) mode on the sliding-window and hybrid models.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prefix_cache_machine import assert_served_equals_uncached, run_machine
from prefix_peer_checks import judge_serving_after_a_failure

from ncm_verify.peers import mlx_vlm_prefix as peer
from ncm_verify.peers import prefix_engines

pytestmark = pytest.mark.usefixtures("quiet")
EXAMPLES = 4
"""Machine runs per node (10 steps each): about 5-12 s a node on 2 shared cores."""
STEPS = 10
MODES = {"attention": "block", "sliding": "exact", "hybrid": "exact"}
"""The APC mode mlx-vlm picks for each family (`model_apc_mode`), checked by every node."""


def judge(model, checks, engine=peer.MlxVlmApc) -> list[int]:
    probe = engine()
    probe.start(model, 1)
    assert probe.mode == MODES[model.family], f"{model.family}: APC mode {probe.mode!r}, expected {MODES[model.family]}"
    probe.close()
    hits = run_machine(engine, model, checks, examples=EXAMPLES, steps=STEPS)
    assert any(hits), f"APC on {model.family}: no request reused a cached token: a cold-cache pass proves nothing"
    return hits


@pytest.mark.prefix_rule(1)
@pytest.mark.parametrize("dtype", prefix_engines.DTYPES)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
def test_served_tokens_and_logprobs_equal_an_uncached_forward(family, dtype, models):
    """Rule 1: every response (block hits, snapshot hits, batches beside uncached prompts, after restarts) equals
    greedy decoding by full forwards of a fresh model, and the run sees hits."""
    judge(models(family, dtype), (1,))


@pytest.mark.prefix_rule(3)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
def test_an_evicted_or_reused_entry_never_changes_what_a_prompt_gets(family, models):
    """Rule 3: a prompt served again (after fills that evict blocks and snapshots) gets what it got before."""
    judge(models(family, "float32"), (3,))


@pytest.mark.prefix_rule(2)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
def test_the_reported_cached_tokens_follow_the_documented_policy(family, models):
    """Rule 2: each prompt response's cached_tokens is what APC's documented policy gives (`MlxVlmApc.policy`):
    whole chained blocks (block mode, a pool too large to evict) or the longest snapshot the prompt extends (exact
    mode, `capacity` snapshots least recent first out); the run must see hits."""
    engine = (lambda: peer.MlxVlmApc(blocks_per_entry=100)) if family == "attention" else peer.MlxVlmApc
    judge(models(family, "float32"), (2,), engine)


@pytest.mark.prefix_rule(1)
def test_planted_a_snapshot_lookup_one_token_longer_is_caught(models):
    """APC's exact mode (the sliding model) with its snapshot lookup claiming one token more than the snapshot
    holds (`peer.planted`): the machine's rule 1 must fail."""
    with peer.planted():
        judge(models("sliding", "float32"), (1,))


def blocks_after_another_prefix(head, body, tail, models) -> None:
    model = models("attention", "float32")
    engine = peer.MlxVlmApc()
    engine.start(model, 3)
    engine.serve([head + body], 3)  # its blocks stored from position one block on
    served = engine.serve([body + tail], 3)[0]
    assert_served_equals_uncached(served, model, call=f"serve([{head + body}]); serve([{body + tail}])", engine=engine)


PLACED = given(
    head=st.lists(st.integers(0, 23), min_size=peer.BLOCK, max_size=peer.BLOCK),
    body=st.lists(st.integers(0, 23), min_size=2 * peer.BLOCK, max_size=3 * peer.BLOCK),
    tail=st.lists(st.integers(0, 23), min_size=1, max_size=3),
)


@pytest.mark.prefix_rule(1)
@PLACED
def test_blocks_stored_after_another_prefix_are_not_served_at_the_start(head, body, tail, models):
    """Rule 1 in block mode whatever the machine's stream: after `head + body`, the prompt `body + tail` (the same
    tokens at other positions) gets what full forwards give: the chained hash cannot match it."""
    blocks_after_another_prefix(head, body, tail, models)


@pytest.mark.prefix_rule(1)
@PLACED
def test_planted_a_block_hash_without_its_parent_is_caught(head, body, tail, models):
    """Block mode with its block hash dropping the parent (`peer.planted`): `body`'s blocks, stored after `head`,
    match at the start of `body + tail`; the property above must fail."""
    with peer.planted():
        blocks_after_another_prefix(head, body, tail, models)


@pytest.mark.prefix_rule(1)
@given(
    short=st.lists(st.integers(0, 23), min_size=2, max_size=5),
    extra=st.lists(st.integers(0, 23), min_size=1, max_size=6),
)
def test_a_hybrid_request_batched_beside_a_longer_one_gets_its_uncached_conditional(short, extra, models):
    """No cache involved (a fresh engine): two prompts of different lengths decoded together on the hybrid model
    each get what full forwards give."""
    model = models("hybrid", "float32")
    engine = peer.MlxVlmApc()
    engine.start(model, 3)
    longer = short + extra
    for served in engine.serve([short, longer], 3):
        assert served.reused == 0, f"a fresh engine reported {served.reused} reused tokens"
        assert_served_equals_uncached(served, model, call=f"MlxVlmApc().serve([{short}, {longer}], 3)", engine=engine)


@pytest.mark.prefix_rule(5)
def test_the_disk_tier_serves_its_blocks_as_before_and_a_foreign_one_changes_nothing(models):
    """Rule 5 on APC's disk tier (on by default once APC is: ``APC_DISK_ENABLED``), which outlives a restart: its
    own files serve as before; truncated or flipped files, or the files of another model of the same architecture
    served from the same model path (other weights: a model updated in place), are refused or change nothing."""
    other = prefix_engines.make_model_folder(
        models("attention", "float32").path.parent / "attention-float32-other", "attention", "float32", seed=1
    )
    hits = run_machine(
        lambda: peer.MlxVlmApc(disk=True), models("attention", "float32"), (1, 5), examples=6, steps=STEPS,
        other_model=other,
    )  # fmt: skip
    assert any(hits), "no request reused a cached token: a cold-cache pass proves nothing"


@pytest.mark.prefix_rule(6)
@pytest.mark.parametrize("family", prefix_engines.FAMILIES)
def test_after_a_request_that_fails_the_engine_serves_every_later_one(family, models):
    """Rule 6: an empty prompt fails the server engine's step; after the server's recovery (a new generator over the
    same APC manager) a held prompt and a new one are served as full forwards give: whatever the failed request left
    in the cache is never served."""
    judge_serving_after_a_failure(peer.MlxVlmApc, models(family, "float32"), 3)
