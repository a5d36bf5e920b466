"""mlx-textgen 0.2.1's prompt cache judged on its own code (`make verify-peers PEERS=mlx-textgen`).

Its model class and cache manager (`ncm_verify.peers.prefix_mlx_textgen`) under the prefix-cache machine: served ==
uncached on the three families with batches, every saved file as attended, the saved files across restarts (intact,
truncated, a flipped byte, another model's files), two models whose folders share a name, and a planted save that
shifts the stored positions by one.
"""

from __future__ import annotations

import numpy as np
import pytest
from prefix_cache_machine import MAX_TOKENS, assert_served_equals_uncached, run_machine
from prefix_peer_checks import assert_served_after_damage, examples, judge_serving_after_a_failure, models  # noqa: F401

from ncm_verify.peers.prefix_mlx_textgen import TextgenEngine
from ncm_verify.peers.prefix_peer_files import DAMAGES, damage


@pytest.mark.prefix_rule(1, 3, 4)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_served_responses_and_every_saved_file_equal_uncached_ones(family, models, examples):  # noqa: F811
    # a family the engine cannot serve even uncached (its first request, on an empty cache) is not applicable
    engine = TextgenEngine()
    try:
        engine.start(models[family], 3)
        engine.serve([tuple(range(9))], MAX_TOKENS)
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"not applicable: {family}: its first, uncached request raises {type(error).__name__}: {error}")
    finally:
        engine.close()
    # 4 in checks runs the adapter's audit (each saved file read as attended) after every request; batches are drawn
    run_machine(TextgenEngine, models[family], (1, 3, 4), examples=examples)


SAVED, SHARING = (3, 1, 2, 4, 5), (3, 1, 7)
"""A saved prompt, and a new one sharing its first two tokens (the cache manager's `min_tokens`) but shorter: in a
batch beside it the new one is left-padded, so its reused K/V must land where it now sits."""


@pytest.mark.prefix_rule(1)
def test_a_new_prompt_batched_beside_a_saved_one_it_shares_its_first_tokens_with_is_served_as_uncached(models):  # noqa: F811
    engine = TextgenEngine()
    try:
        engine.start(models["attention"], 3)
        engine.serve([SAVED], MAX_TOKENS)
        served = engine.serve([SAVED, SHARING], MAX_TOKENS)[1]
    finally:
        engine.close()
    call = f"TextgenEngine().serve([{list(SAVED)}], 3); serve([{list(SAVED)}, {list(SHARING)}], 3), row 1"
    assert_served_equals_uncached(served, models["attention"], call=call)


@pytest.mark.prefix_rule(5)
def test_saved_files_restore_exactly_or_a_damaged_or_foreign_file_is_refused(models, examples):  # noqa: F811
    run_machine(TextgenEngine, models["attention"], (1, 5), examples=examples, other_model=models["other"])


@pytest.mark.prefix_rule(5)
def test_a_model_never_continues_another_models_saved_prompt(models):  # noqa: F811
    """Two model folders named alike (``.../attention`` and ``.../other/attention``: two fine-tunes of one base, or
    one name under two hub organisations), served one after the other by one user: the second must not be served
    the first one's saved cache."""
    first, second = TextgenEngine(), None
    try:
        first.start(models["attention"], 3)
        prompt = (3, 1, 4, 1, 5, 9, 2, 6)
        first.serve([prompt], MAX_TOKENS)
        second = TextgenEngine(home=first.home)  # the same user: the same ~/.cache
        second.start(models["other"], 3)
        served = second.serve([prompt + (7,)], MAX_TOKENS)[0]
        assert_served_equals_uncached(
            served, models["other"],
            call=f"TextgenEngine().serve([{list(prompt)}], 3) on {models['attention'].path}, then on "
            f"{models['other'].path}: serve([{list(prompt + (7,))}], 3); cache folders {first.cache_dir} and "
            f"{second.cache_dir}",
        )  # fmt: skip
    finally:
        first.close()


@pytest.mark.prefix_rule(1)
def test_planted_a_save_shifting_stored_positions_by_one_is_caught(models, monkeypatch, examples):  # noqa: F811
    """mlx-textgen's own save with one wrong change: the stored keys and values rolled by one position."""
    import mlx.core as mx
    import mlx_textgen.cache_utils as cache_utils
    from mlx.utils import tree_flatten

    def rolled(cache):
        if cache[0].offset == 0:
            return None
        pairs = [(mx.roll(c.keys[..., : c.offset, :], 1, axis=2), mx.roll(c.values[..., : c.offset, :], 1, axis=2))
                 for c in cache]  # fmt: skip
        return dict(tree_flatten(pairs))

    monkeypatch.setattr(cache_utils, "create_cache_dict", rolled)
    run_machine(TextgenEngine, models["attention"], (1,), examples=examples)


@pytest.mark.prefix_rule(5)
@pytest.mark.parametrize("kind", DAMAGES)
def test_a_saved_file_damaged_on_disk_is_refused_or_served_exactly(kind, models):  # noqa: F811
    """A prompt's cache saved, the file damaged, a restart (the manager reads its folder again), the prompt extended:
    refused, or served as uncached."""
    import mlx.core as mx

    model = models["attention"]
    engine = TextgenEngine()
    engine.start(model, 3)
    try:
        prompt = (3, 1, 4, 1, 5, 9, 2, 6)
        engine.serve([prompt], MAX_TOKENS)
        (saved,) = engine.cache_dir.glob("*.safetensors")
        stored = max(mx.load(str(saved)).values(), key=lambda array: array.size)
        what = damage(saved, kind, np.array(stored).reshape(-1))
        engine.restart()
        assert_served_after_damage(
            engine, model, prompt + (7,), call=f"restart with {what}, then serve([{list(prompt + (7,))}], 3)"
        )
    finally:
        engine.close()


@pytest.mark.prefix_rule(6)
def test_after_a_request_it_refuses_the_model_serves_every_later_one(models, examples):  # noqa: F811
    """Rule 6: an empty prompt fails in `LLMModel.generate`; it then serves a held prompt and a new one as uncached
    (the attention model: its sliding-window and hybrid models cannot be served at all here)."""
    judge_serving_after_a_failure(TextgenEngine, models["attention"], examples)
