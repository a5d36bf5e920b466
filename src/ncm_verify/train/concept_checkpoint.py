"""The trained fixed checkpoint of the source NCM's properties (issue 44): ``python -m
ncm_verify.train.concept_checkpoint [PATH]`` (default ``fixtures/ncm_concept_trained.safetensors``) saves the NCM of
the trained text drafter `TRAINED_SOURCE` (fixtures/drafting, loaded by `load_trained`, which checks its sha256 and
shapes against the record) in the concept checkpoint format. Rerunning it gives the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ncm_verify.reference.drafting.trained import load_trained
from ncm_verify.reference.ncm.concept_fixture import TRAINED_PATH
from ncm_verify.reference.ncm.concept_model import save_concept_model

__all__ = ["TRAINED_SOURCE", "write_trained_fixture"]

TRAINED_SOURCE = "ncm_data"
"""The record entry (fixtures/drafting/record.json) whose NCM the trained checkpoint holds."""


def write_trained_fixture(path: str | Path = TRAINED_PATH) -> Path:
    """The trained drafter `TRAINED_SOURCE`'s NCM (both stages) saved as a concept checkpoint at `path`."""
    save_concept_model(load_trained(TRAINED_SOURCE).ncm, path)
    return Path(path)


if __name__ == "__main__":
    print(write_trained_fixture(*sys.argv[1:2]))
