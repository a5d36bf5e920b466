"""The data `make train` uses, made here: CPython's pydoc topics as characters, and a grammar of known law.

The text and its vocabulary are `reference.drafting.text`'s (the models' tokenizer); `extract_corpus`
remakes the shipped corpus from this Python's pydoc topics. The grammar is a seeded order-2 Markov chain:
its exact conditional p(x_t | x_{t-2}, x_{t-1}) is a table, so a model's KL from it is computed exactly.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ncm_verify.reference.drafting.text import CORPUS, VOCAB, text_ids


def extract_corpus(path: Path = CORPUS) -> dict[str, str]:
    """Write this Python's pydoc topics text to `path` (gzip, deterministic); its provenance."""
    import pydoc_data.topics

    text = "".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    return {"source": "pydoc_data.topics", "python": sys.version.split()[0], "sha256": sha256_text(text)}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Split:
    train: np.ndarray
    held_out: np.ndarray
    vocab_size: int


def text_split(path: Path = CORPUS) -> Split:
    """The corpus as ids: the first 90 % to train on, the last 10 % held out."""
    return Split(*text_ids(path), len(VOCAB))


@dataclass(frozen=True)
class Grammar:
    """An order-2 Markov chain over `vocab_size` symbols; `table[a, b]` is p(. | x_{t-2}=a, x_{t-1}=b)."""

    table: np.ndarray
    seed: int

    @property
    def vocab_size(self) -> int:
        return int(self.table.shape[0])

    def sample(self, length: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = np.empty(length, dtype=np.int32)
        out[:2] = rng.integers(0, self.vocab_size, size=2)
        cdf = np.cumsum(self.table, axis=-1)
        u = rng.random(length)
        for t in range(2, length):
            out[t] = min(int(np.searchsorted(cdf[out[t - 2], out[t - 1]], u[t], side="right")), self.vocab_size - 1)
        return out

    def conditionals(self, ids: np.ndarray) -> np.ndarray:
        """p(. | the two symbols before t) for t = 2..len(ids)-1, (len-2, V) float64."""
        return self.table[ids[:-2], ids[1:-1]]

    def entropy_rate(self, ids: np.ndarray) -> float:
        """Mean -log p(x_t | x_{t-2}, x_{t-1}) along `ids` (nats): the floor of any model's held-out loss."""
        p = self.conditionals(ids)[np.arange(len(ids) - 2), ids[2:]]
        return float(-np.log(p).mean())


def make_grammar(vocab_size: int = 16, concentration: float = 0.3, seed: int = 0) -> Grammar:
    """A seeded order-2 chain whose rows are Dirichlet(concentration): peaked, like trained models' rows."""
    rng = np.random.default_rng(seed)
    table = rng.dirichlet(np.full(vocab_size, concentration), size=(vocab_size, vocab_size))
    table = np.maximum(table, 1e-6)
    return Grammar(table / table.sum(axis=-1, keepdims=True), seed)


def grammar_split(grammar: Grammar, train_tokens: int = 200_000, held_out_tokens: int = 20_000) -> Split:
    return Split(grammar.sample(train_tokens, seed=1), grammar.sample(held_out_tokens, seed=2), grammar.vocab_size)


def windows(ids: np.ndarray, batch: int, length: int, seed: int, step: int) -> np.ndarray:
    """`batch` windows of `length` ids from `ids`, drawn by a generator seeded with (seed, step): resumable."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(ids) - length, size=batch)
    return np.stack([ids[s : s + length] for s in starts])
