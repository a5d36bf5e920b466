"""locals 0.2.1's prefix caches judged on their own code (`make verify-peers PEERS=locals`).

Its continuous-batching engine, chain prompt cache and disk tier of system prompts (`ncm_verify.peers.prefix_locals`)
under the prefix-cache machine: served == uncached on the three families with batches, every stored entry as
attended, eviction, the disk tier across restarts (intact, truncated, a flipped byte, another model's file), and a
planted chain cache storing entries one position short of their keys.
"""

from __future__ import annotations

import numpy as np
import pytest
from prefix_cache_machine import MAX_TOKENS, assert_served_equals_uncached, run_machine
from prefix_peer_checks import assert_served_after_damage, examples, judge_serving_after_a_failure, models  # noqa: F401

from ncm_verify.peers.prefix_locals import LocalsEngine
from ncm_verify.peers.prefix_peer_files import DAMAGES, damage


@pytest.mark.prefix_rule(1, 2, 3, 4)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_served_responses_and_every_stored_entry_equal_uncached_ones(family, models, examples):  # noqa: F811
    # 4 in checks runs the adapter's audit after every request: each entry read as attended (no log-probabilities
    # are reported, so the entries carry that check); batches of a held prompt beside new ones are drawn
    run_machine(LocalsEngine, models[family], (1, 2, 3, 4), examples=examples)


@pytest.mark.prefix_rule(5)
def test_the_disk_tier_restores_exactly_or_refuses_a_damaged_or_foreign_file(models, examples):  # noqa: F811
    run_machine(LocalsEngine, models["attention"], (1, 5), examples=examples, other_model=models["other"])


@pytest.mark.prefix_rule(5)
@pytest.mark.parametrize("kind", [*DAMAGES, "another model"])
def test_a_saved_system_prompt_damaged_on_disk_is_refused_or_served_exactly(kind, models):  # noqa: F811
    """A snapshot saved, the server restarted with the file damaged (or another model's snapshot of the same tokens
    in its place), then a request starting with that system prompt: refused, or served as uncached."""
    import mlx.core as mx

    model = models["attention"]
    engine = LocalsEngine()
    engine.start(model, 3)
    other = LocalsEngine()
    try:
        prompt = (3, 1, 4, 1, 5, 9, 2, 6)  # its system checkpoint: the first 4 tokens
        first = engine.serve([prompt], MAX_TOKENS)[0]
        assert_served_equals_uncached(first, model, call="LocalsEngine().serve([prompt], 3)")
        (snapshot,) = engine.disk_dir.glob("*.safetensors")
        if kind == "another model":
            other.start(models["other"], 3)
            other.serve([prompt], MAX_TOKENS)
            (foreign,) = other.disk_dir.glob("*.safetensors")
            snapshot.write_bytes(foreign.read_bytes())
            what = f"{snapshot.name} replaced by the other model's snapshot of the same tokens"
        else:
            stored = max(mx.load(str(snapshot)).values(), key=lambda array: array.size)  # a layer's keys or values
            what = damage(snapshot, kind, np.array(stored).reshape(-1))
        engine.restart()
        assert_served_after_damage(
            engine, model, prompt + (7,), call=f"restart with {what}, then serve([{list(prompt + (7,))}], 3)"
        )
    finally:
        engine.close()
        other.close()


@pytest.mark.prefix_rule(1)
def test_planted_a_chain_cache_storing_entries_one_position_short_is_caught(models, monkeypatch, examples):  # noqa: F811
    """locals' own chain cache with one wrong change: every entry trimmed by one position before it is stored, so a
    hit continues a cache one token short of its key."""
    import locals.hybrid_batch as hybrid_batch
    from mlx_lm.models.cache import trim_prompt_cache

    make = hybrid_batch.chain_cache

    def short_chain_cache(max_size, max_bytes):
        chain = make(max_size, max_bytes)
        insert = chain.insert_cache

        def insert_short(model, tokens, prompt_cache, **kw):
            trim_prompt_cache(prompt_cache, 1)
            return insert(model, tokens, prompt_cache, **kw)

        chain.insert_cache = insert_short
        return chain

    monkeypatch.setattr(hybrid_batch, "chain_cache", short_chain_cache)
    run_machine(LocalsEngine, models["attention"], (1,), examples=examples)


@pytest.mark.prefix_rule(6)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_after_a_request_it_refuses_the_engine_serves_every_later_one(family, models, examples):  # noqa: F811
    """Rule 6: an empty prompt fails in `HybridBatchEngine.serve`; the same engine then serves a held prompt and a
    new one as uncached."""
    judge_serving_after_a_failure(LocalsEngine, models[family], examples)
