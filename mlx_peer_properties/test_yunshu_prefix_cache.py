"""yunshu 0.1.5's prefix caches judged on their own code (`make verify-peers PEERS=yunshu`; Python >= 3.13).

Its engine with its memory tier, exact-match tier and SSD tier (`ncm_verify.peers.prefix_yunshu`) under the
prefix-cache machine: served == uncached with hits seen on the three families, eviction, the SSD tier across restarts
(intact, truncated, a flipped byte, another model's files), and a planted memory tier whose snapshots keep one
stale position.
"""

from __future__ import annotations

import pytest
from prefix_cache_machine import run_machine
from prefix_peer_checks import examples, models  # noqa: F401

from ncm_verify.peers.prefix_yunshu import YunshuEngine


@pytest.mark.peer_property(1, 2, 3)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_served_responses_equal_uncached_ones_and_the_cache_is_hit(family, models, examples):  # noqa: F811
    # rule 2 here: hits are seen (its policy, hash chains and scans over blocks, is not modelled)
    run_machine(YunshuEngine, models[family], (1, 2, 3), examples=examples)


@pytest.mark.peer_property(5)
def test_the_ssd_tier_restores_exactly_or_refuses_a_damaged_or_foreign_file(models, examples):  # noqa: F811
    run_machine(YunshuEngine, models["attention"], (1, 5), examples=examples, other_model=models["other"])


@pytest.mark.peer_property(1)
def test_planted_a_memory_tier_snapshot_one_position_short_is_caught(models, monkeypatch, examples):  # noqa: F811
    """yunshu's own memory tier with one wrong change: every snapshot it hands out trimmed by one more position than
    the match it reports."""
    from yunshu_engine.kv_prefix_cache import KVPrefixCache

    snapshot = KVPrefixCache._snapshot_cache
    monkeypatch.setattr(KVPrefixCache, "_snapshot_cache", lambda self, cache, trim=0: snapshot(self, cache, trim + 1))
    run_machine(YunshuEngine, models["attention"], (1,), examples=examples)
