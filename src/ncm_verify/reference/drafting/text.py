"""The character vocabulary of the shipped text models and their corpus, split into train and held out.

The corpus is CPython's pydoc topics (the values of `pydoc_data.topics.topics` joined in key order), shipped
gzipped in `fixtures/drafting/` so that every clone trains and tests on the same characters.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ncm_verify.reference.drafting.trained import DRAFTING_FIXTURES

__all__ = ["CORPUS", "HELD_OUT_FRACTION", "VOCAB", "decode", "encode", "load_text", "text_ids"]

CORPUS = DRAFTING_FIXTURES / "pydoc_topics.txt.gz"
HELD_OUT_FRACTION = 0.1
VOCAB = "\x00\n" + "".join(chr(c) for c in range(32, 127))
"""Id 0 is every character outside printable ASCII and newline."""


def load_text(path: Path = CORPUS) -> str:
    return gzip.decompress(path.read_bytes()).decode("utf-8")


def encode(text: str) -> np.ndarray:
    index = {c: i for i, c in enumerate(VOCAB)}
    return np.array([index.get(c, 0) for c in text], dtype=np.int32)


def decode(ids: np.ndarray) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def text_ids(path: Path = CORPUS) -> tuple[np.ndarray, np.ndarray]:
    """The corpus as ids: the first 90 % to train on, the last 10 % held out."""
    ids = encode(load_text(path))
    cut = int(len(ids) * (1 - HELD_OUT_FRACTION))
    return ids[:cut], ids[cut:]
