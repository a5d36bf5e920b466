"""mlx-openai-server 1.8.1's prefix cache judged on its own code (`make verify-peers PEERS=mlx-openai-server`).

Its handler, pickled LRU prompt cache and model class (`ncm_verify.peers.prefix_mlx_openai_server`) under the
prefix-cache machine: served == uncached and reuse as documented on the three families, eviction, a draft model
beside the cache, a damaged pickle read back on a hit, and a planted cache one token short of what it reports.
"""

from __future__ import annotations

import pytest
from prefix_cache_machine import run_machine
from prefix_peer_checks import (  # noqa: F401
    assert_a_damaged_entry_is_refused_or_served_exactly,
    examples,
    judge_serving_after_a_failure,
    models,
)

from ncm_verify.peers.prefix_mlx_openai_server import BatchedOpenAIServerEngine, OpenAIServerEngine
from ncm_verify.peers.prefix_peer_files import DAMAGES


@pytest.mark.prefix_rule(1, 2, 3)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_served_responses_equal_uncached_ones_and_reuse_is_as_documented(family, models, examples):  # noqa: F811
    # rule 2's policy model covers the trimmable family; the others' checkpoints and refusals are rule 1's and 3's
    checks = (1, 2, 3) if family == "attention" else (1, 3)
    run_machine(OpenAIServerEngine, models[family], checks, examples=examples)


@pytest.mark.prefix_rule(4)
def test_with_a_draft_model_every_response_and_stored_entry_equals_uncached(models, examples):  # noqa: F811
    run_machine(lambda: OpenAIServerEngine(draft=models["draft"]), models["attention"], (4,), examples=examples)


@pytest.mark.prefix_rule(5)
@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_pickle_is_refused_or_served_exactly_on_its_next_hit(kind, models):  # noqa: F811
    engine = OpenAIServerEngine()
    engine.start(models["attention"], 3)
    try:
        prompt = (3, 1, 4, 1, 5, 9, 2, 6)
        assert_a_damaged_entry_is_refused_or_served_exactly(
            engine, models["attention"], prompt, lambda key: engine.damage_entry(key, kind),
            call=f"OpenAIServerEngine().serve([{list(prompt)}], 3) twice, the stored pickle {kind} in between",
        )  # fmt: skip
    finally:
        engine.close()


@pytest.mark.prefix_rule(1)
def test_planted_a_longer_hit_trimmed_one_token_too_far_is_caught(models, monkeypatch, examples):  # noqa: F811
    """The package's own cache with one wrong change: a longer entry trimmed one token more than the request's
    remaining tokens assume (the cache one position short of what it reports)."""
    import app.utils.prompt_cache as prompt_cache

    trim = prompt_cache.trim_prompt_cache
    monkeypatch.setattr(prompt_cache, "trim_prompt_cache", lambda cache, n: trim(cache, n + 1))
    run_machine(OpenAIServerEngine, models["attention"], (1,), examples=examples)


@pytest.mark.prefix_rule(1, 2, 3, 4)
@pytest.mark.parametrize("family", ["attention", "sliding", "hybrid"])
def test_batched_requests_beside_cached_rows_and_every_stored_entry_equal_uncached(family, models, examples):  # noqa: F811
    # the batch scheduler's path; 4 in checks runs the audit: every pickle it stored read as attended. Rule 2's
    # policy model covers the trimmable family (the others store the handler's single-turn checkpoints)
    checks = (1, 2, 3, 4) if family == "attention" else (1, 3, 4)
    run_machine(BatchedOpenAIServerEngine, models[family], checks, examples=examples)


@pytest.mark.prefix_rule(6)
@pytest.mark.parametrize("path", ["single", "batched"])
@pytest.mark.parametrize("family", ["attention", "hybrid"])
def test_after_a_request_it_refuses_the_handler_serves_every_later_one(family, path, models, examples):  # noqa: F811
    """Rule 6: an empty prompt fails in the handler's single-request path and in its batch scheduler; the handler
    then serves a held prompt and a new one as uncached."""
    engine = OpenAIServerEngine if path == "single" else BatchedOpenAIServerEngine
    judge_serving_after_a_failure(engine, models[family], examples)
