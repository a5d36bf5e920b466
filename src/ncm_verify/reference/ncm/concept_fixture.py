"""The fixed checkpoints default `make verify` judges on path (b): the seeded one,
``python -m ncm_verify.reference.ncm.concept_fixture [PATH]`` (default
``fixtures/ncm_concept_tiny.safetensors``), whose weights follow from `FIXTURE_CONFIG`'s seeds alone, and the
trained one, `TRAINED_PATH`, written by ``python -m ncm_verify.train.concept_checkpoint``: the
source NCM that `make train` trained as the text drafter ``ncm_data`` (fixtures/drafting), in this format.
Its norm gains and biases sit far from initialisation, so a port that drops or misplaces one on a single
path changes its outputs.

The seeded config is chosen to expose every planted bug of the source's NCM: ``block_diagonal_upto`` (earlier
levels' K/V exist, so the extension differs from PC-1), dropout 0.1 (active only in training
mode), tied codes (exactly equal logits, as a dead code reseeded onto another gives: top-k's
tie rule matters), two layers (a bidirectional prefix's head depends on its tail), and codebooks
of different sizes per level.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.reference.ncm.concept_model import make_concept_model, save_concept_model
from ncm_verify.reference.ncm.config import FIXTURES

__all__ = ["FIXTURE_CONFIG", "FIXTURE_PATH", "TRAINED_PATH", "write_fixture"]

FIXTURE_CONFIG = ConceptConfig(
    vocab_size=12,
    sequence_length=8,
    level_lengths=(1, 2, 4, 8),
    codebook_sizes=(6, 8, 8, 10),
    prefix_length=6,
    codec_dim=16,
    d_model=32,
    num_heads=2,
    num_layers=2,
    mask="block_diagonal_upto",
    level_input="reconstruction",
    dropout=0.1,
    tied_codes=True,
    seed=2610,
    codec_seed=14162,
)
FIXTURE_PATH = FIXTURES / "ncm_concept_tiny.safetensors"
TRAINED_PATH = FIXTURES / "ncm_concept_trained.safetensors"


def write_fixture(path: str | Path = FIXTURE_PATH) -> Path:
    save_concept_model(make_concept_model(FIXTURE_CONFIG), path)
    return Path(path)


if __name__ == "__main__":
    print(write_fixture(*sys.argv[1:2]))
