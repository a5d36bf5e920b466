"""yunshu 0.1.5's prefix caches judged on their own code (`make verify-peers PEERS=yunshu`; Python >= 3.13).

Its engine with its memory tier, exact-match tier and SSD tier (`ncm_verify.peers.prefix_yunshu`) under the
prefix-cache machine: served == uncached with hits seen on the three families, eviction, the SSD tier across restarts
(intact, truncated, a flipped byte, another model's files), and a planted memory tier whose snapshots keep one
stale position.
"""

from __future__ import annotations

import numpy as np
import pytest
from prefix_cache_machine import MAX_TOKENS, assert_served_equals_uncached, run_machine
from prefix_peer_checks import assert_served_after_damage, examples, judge_serving_after_a_failure, models  # noqa: F401

from ncm_verify.peers.prefix_peer_files import DAMAGES, damage
from ncm_verify.peers.prefix_yunshu import YunshuEngine


@pytest.mark.prefix_rule(1, 2, 3)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_served_responses_equal_uncached_ones_and_the_cache_is_hit(family, models, examples):  # noqa: F811
    # rule 2 here: hits are seen on the attention family (its policy, hash chains and scans over blocks, is not
    # modelled); on the sliding and hybrid tiny models yunshu serves no cached token at all (measured: the hits
    # list stays 0), so only what it serves and evicts is judged there
    # the attention family in bfloat16: after a drawn restart its prompts come back from the SSD tier, whose restore
    # casts to bfloat16 (exact there; the float32 case is the finding tested below on its own)
    checks = (1, 2, 3) if family == "attention" else (1, 3)
    hits = run_machine(YunshuEngine, models["bfloat16" if family == "attention" else family], checks, examples=examples)
    assert family == "attention" or not any(hits), f"{family}: hits seen ({hits}): judge rule 2 here too"


@pytest.mark.prefix_rule(5)
def test_the_ssd_tier_restores_exactly_or_refuses_a_damaged_or_foreign_file(models, examples):  # noqa: F811
    # bfloat16: the restore's cast to bfloat16 (the float32 finding below) is exact there, so damage is what is seen
    run_machine(YunshuEngine, models["bfloat16"], (1, 5), examples=examples, other_model=models["other-bfloat16"])


@pytest.mark.prefix_rule(5)
def test_a_float32_prompt_served_from_the_ssd_tier_after_a_restart_equals_uncached(models):  # noqa: F811
    """A prompt served twice (the second a memory hit, written to the SSD tier), a restart, the prompt again: served
    from the SSD tier, in the 'native' precision its setting documents as bit-exact."""
    model = models["attention"]
    engine = YunshuEngine()
    engine.start(model, 3)
    try:
        prompt = (13, 21, 22, 15, 7, 11, 5, 5, 16, 15, 4)
        engine.serve([prompt], MAX_TOKENS)
        engine.serve([prompt], MAX_TOKENS)
        engine.restart()
        again = engine.serve([prompt], MAX_TOKENS)[0]
        assert again.reused, f"after the restart nothing was served from the SSD tier (reused {again.reused})"
        assert_served_equals_uncached(
            again, model, call=f"YunshuEngine().serve([{list(prompt)}], 3) twice, restart(), then again"
        )
    finally:
        engine.close()


@pytest.mark.prefix_rule(1)
def test_planted_a_memory_tier_snapshot_one_position_short_is_caught(models, monkeypatch, examples):  # noqa: F811
    """yunshu's own memory tier with one wrong change: every snapshot it hands out trimmed by one more position than
    the match it reports."""
    from yunshu_engine.kv_prefix_cache import KVPrefixCache

    snapshot = KVPrefixCache._snapshot_cache
    monkeypatch.setattr(KVPrefixCache, "_snapshot_cache", lambda self, cache, trim=0: snapshot(self, cache, trim + 1))
    run_machine(YunshuEngine, models["attention"], (1,), examples=examples)


@pytest.mark.prefix_rule(5)
@pytest.mark.parametrize("kind", [*DAMAGES, "another model"])
def test_a_block_damaged_on_the_ssd_tier_is_refused_or_served_exactly(kind, models):  # noqa: F811
    """A prompt's block written to the SSD tier, the file damaged (or another model's block of the same tokens in its
    place), a restart, the prompt again: refused, or served as uncached (bfloat16: the restore's cast is exact)."""
    import mlx.core as mx

    model = models["bfloat16"]
    engine, other = YunshuEngine(), YunshuEngine()
    engine.start(model, 3)
    try:
        prompt = (13, 21, 22, 15, 7, 11, 5, 5, 16, 15, 4)
        engine.serve([prompt], MAX_TOKENS)
        engine.serve([prompt], MAX_TOKENS)
        engine.persist(engine.root / "copy")  # flushes the tier's writer: the block is on disk
        (block,) = [f for f in engine.ssd.rglob("*.safetensors")]
        if kind == "another model":
            other.start(models["other-bfloat16"], 3)
            other.serve([prompt], MAX_TOKENS)
            other.serve([prompt], MAX_TOKENS)
            other.persist(other.root / "copy")
            (theirs,) = [f for f in other.ssd.rglob("*.safetensors")]
            block.write_bytes(theirs.read_bytes())
            what = f"{block.name} replaced by the other model's block of the same tokens"
        else:
            stored = max(mx.load(str(block)).values(), key=lambda array: array.size)
            as_stored = stored.view({2: mx.uint16, 4: mx.uint32}[stored.itemsize])  # its bytes as in the file
            what = damage(block, kind, np.array(as_stored).reshape(-1))
        engine.restart()
        assert_served_after_damage(engine, model, prompt, call=f"restart with {what}, then serve([{list(prompt)}], 3)")
    finally:
        engine.close()
        other.close()


@pytest.mark.prefix_rule(6)
def test_after_a_request_it_refuses_the_engine_serves_every_later_one(models, examples):  # noqa: F811
    """Rule 6: a request `generate` must refuse (an empty prompt), then a held prompt and a new one served as
    uncached; not applicable while yunshu answers every request the adapter can send (`YunshuEngine.fail`)."""
    judge_serving_after_a_failure(YunshuEngine, models["attention"], examples)
