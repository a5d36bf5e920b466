"""The models `make train` ships in `fixtures/drafting/`, loaded and checked against their record.

`record.json` names each model's kind, config, file, sha256 and tensor shapes (and how it was made); a file
whose sha256 or shapes differ from the record is refused with a `ValueError`, never loaded.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ncm_verify.reference.drafting.base import TextDrafter
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter, ConceptDrafterConfig
from ncm_verify.reference.drafting.models import ARDrafter, make_llama

__all__ = [
    "DRAFTING_FIXTURES",
    "RECORD",
    "file_sha256",
    "load_drafter",
    "load_record",
    "load_trained",
    "model_from_entry",
]

DRAFTING_FIXTURES = Path(__file__).parents[2] / "data" / "fixtures" / "drafting"
RECORD = DRAFTING_FIXTURES / "record.json"
SMOLLM2_DRAFTING = DRAFTING_FIXTURES.parent / "smollm2_drafters"
"""Issue 42's drafters of SmolLM2-135M and C10's sparse target rows, with their own record.json."""


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_record(path: Path = RECORD) -> dict[str, Any]:
    if not path.exists():
        raise ValueError(f"record: {path} is missing; `make train` writes it")
    return json.loads(path.read_text())


def model_from_entry(entry: dict[str, Any]) -> nn.Module:
    """A freshly initialised model of the record entry's kind and config (weights not loaded)."""
    if entry["kind"] == "llama":
        return make_llama(entry["config"])
    if entry["kind"] == "concept_ncm":
        # the NCM block drafter: the source's NCM (`reference/ncm`) drafting a block
        return ConceptBlockDrafter(ConceptDrafterConfig.from_dict(entry["config"]))
    if entry["kind"] == "level_ncm":
        # level drafting's toy NCM (`reference/ncm/model.py`), trained on the same text
        from ncm_verify.reference.ncm.config import NCMConfig
        from ncm_verify.reference.ncm.model import NCM

        return NCM(NCMConfig.from_dict(entry["config"]))
    if entry["kind"] in ("subvocab_llama", "subvocab_concept_ncm"):
        # issue 42's drafters of SmolLM2: over a sub-vocabulary, their token ids loaded with the weights
        from ncm_verify.reference.drafting.subvocab import SubVocabConceptDrafter, SubVocabLlama

        placeholder = mx.concatenate([mx.array([-1]), mx.arange(entry["subvocab"] - 1)]).astype(mx.int32)
        if entry["kind"] == "subvocab_llama":
            return SubVocabLlama(entry["config"], placeholder, entry["vocab_size"])
        config = ConceptDrafterConfig.from_dict(entry["config"])
        return SubVocabConceptDrafter(config, placeholder, entry["vocab_size"])
    raise ValueError(f"kind: {entry['kind']!r} is not 'llama', 'concept_ncm', 'level_ncm' or 'subvocab_*'")


def load_trained(name: str, directory: Path = DRAFTING_FIXTURES) -> nn.Module:
    """The shipped model `name`, its file checked against the record (sha256 and every tensor's shape)."""
    record = load_record(directory / "record.json")
    if name not in record["models"]:
        raise ValueError(f"name: {name!r} is not in the record ({', '.join(sorted(record['models']))})")
    entry = record["models"][name]
    path = directory / entry["file"]
    if not path.exists():
        raise ValueError(f"name: {name!r}'s file {path} is missing")
    digest = file_sha256(path)
    if digest != entry["sha256"]:
        raise ValueError(f"name: {name!r}'s file {path} has sha256 {digest}, the record says {entry['sha256']}")
    weights = mx.load(str(path))
    assert isinstance(weights, dict)
    shapes = {k: list(v.shape) for k, v in weights.items()}
    if shapes != entry["shapes"]:
        raise ValueError(f"name: {name!r}'s tensors {shapes} differ from the record's {entry['shapes']}")
    model = model_from_entry(entry)
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    return model


def load_drafter(name: str, directory: Path = DRAFTING_FIXTURES) -> TextDrafter:
    """The shipped model `name` as the drafting loop runs it: an NCM drafter (one that proposes) as it is, a llama
    (mlx-lm's, or over a sub-vocabulary) as an `ARDrafter`."""
    model = load_trained(name, directory)
    drafter: Any = model if hasattr(model, "propose") else ARDrafter(model)  # type: ignore[arg-type]
    return drafter
