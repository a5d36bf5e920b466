"""What the smaller MLX servers' prefix-cache tests share: the model folders (one per family, another model of the same
architecture, a draft), the examples option, and the damaged-file check (rule 5) for an engine that reads its own
files back while it runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from prefix_cache_machine import MAX_TOKENS, assert_served_equals_uncached

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
    """Serve `prompt` (stored), `harm` what the engine stored for it (returns what it did), serve `prompt` again: the
    engine must refuse (raise) or serve the uncached response; a hit on damaged bytes served silently fails."""
    first = engine.serve([prompt], MAX_TOKENS)[0]
    assert_served_equals_uncached(first, model, call=f"{call}: before the damage")
    what = harm(first.key)
    try:
        again = engine.serve([prompt], MAX_TOKENS)[0]
    except Exception:  # a refusal is what a damaged file must get  # noqa: BLE001
        return
    assert_served_equals_uncached(again, model, call=f"{call}: after the damage ({what}; reused {again.reused})")
