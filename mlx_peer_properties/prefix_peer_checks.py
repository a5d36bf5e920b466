"""What the smaller MLX servers' prefix-cache tests share: the model folders (one per family, another model of the same
architecture, a draft), the examples option, and the damaged-file check (rule 5) for an engine that reads its own
files back while it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prefix_cache_machine import MAX_TOKENS, assert_served_equals_uncached, assert_serves_after_a_failed_request

from ncm_verify.peers.prefix_engines import EngineModel, make_model_folder


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, EngineModel]:
    """attention, sliding and hybrid folders (seed 0); "other": attention weights of seed 1 in a folder of the same
    name under another parent (what two fine-tunes of one base look like); "draft": a second attention model;
    "bfloat16" and "other-bfloat16": the attention pair in bfloat16."""
    root = tmp_path_factory.mktemp("prefix-models")
    found = {family: make_model_folder(root / family, family) for family in ("attention", "sliding", "hybrid")}
    found["other"] = make_model_folder(root / "other" / "attention", "attention", seed=1)
    found["draft"] = make_model_folder(root / "draft", "attention", seed=2)
    found["bfloat16"] = make_model_folder(root / "attention-bfloat16", "attention", dtype="bfloat16")
    found["other-bfloat16"] = make_model_folder(root / "other" / "attention-bfloat16", "attention", "bfloat16", seed=1)
    return found


@pytest.fixture
def examples(request) -> int:
    return request.config.getoption("--mlx-peers-examples")


def assert_a_damaged_entry_is_refused_or_served_exactly(
    engine, model: EngineModel, prompt: Sequence[int], harm: Callable[[tuple[int, ...]], str], *, call: str
) -> None:
    """Serve `prompt` (stored), `harm` what the engine stored for it (returns what it did), serve `prompt` again: as
    `assert_served_after_damage`; a hit on damaged bytes served silently fails."""
    first = engine.serve([prompt], MAX_TOKENS)[0]
    assert_served_equals_uncached(first, model, call=f"{call}: before the damage")
    what = harm(first.key)
    assert_served_after_damage(engine, model, prompt, call=f"{call}: after the damage ({what})")


def assert_served_after_damage(engine, model: EngineModel, prompt: Sequence[int], *, call: str) -> None:
    """After a file was damaged: the request for `prompt` is served as uncached, or refused once (an exception) and
    then served as uncached: a damaged file may cost a request, never the prompt for good."""
    try:
        served = engine.serve([prompt], MAX_TOKENS)[0]
    except Exception as first:  # noqa: BLE001
        try:
            served = engine.serve([prompt], MAX_TOKENS)[0]
        except Exception as second:  # noqa: BLE001
            raise AssertionError(
                f"rule 5: the damaged file fails every request for {list(prompt)}: {first!r}, then again {second!r}"
                f"\n  call: {call}"
            ) from second
    assert_served_equals_uncached(served, model, call=f"{call} (reused {served.reused})")


def judge_serving_after_a_failure(factory: Callable[[], object], model: EngineModel, examples: int) -> None:
    """Rule 6 on one engine of `factory`'s over `model`, `examples` drawn pairs one after another: a prompt served, a
    request it must refuse (its adapter's ``fail()``), then that prompt again and a new one, each served as uncached
    (one engine for every pair: starting some is most of their cost, and the failures pile up as a server's do)."""
    from hypothesis import settings

    engine = factory()
    engine.start(model, 3)

    @settings(max_examples=examples)
    @given(
        first=st.lists(st.integers(0, model.vocab - 1), min_size=2, max_size=9).map(tuple),
        later=st.lists(st.integers(0, model.vocab - 1), min_size=1, max_size=8).map(tuple),
    )
    def check(first, later):
        call = f"{engine.name} on {model.family}: serve([{list(first)}]); fail(); serve([{list(first)}]); " + (
            f"serve([{list(later)}])"
        )
        assert_serves_after_a_failed_request(engine, model, first, later, call=call)

    try:
        check()
    finally:
        engine.close()
