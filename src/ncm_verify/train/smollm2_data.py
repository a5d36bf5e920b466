"""SmolLM2-135M's side of `make train` (issue 42): its tokens, a sub-vocabulary, and its rows computed once.

The corpus is the repository's pydoc text (`reference.drafting.text`), split where the character models split it
(the first 90 % of characters to train on, the last 10 % held out) and each part encoded by SmolLM2's own tokenizer,
so training and held-out contexts are disjoint. The drafters predict over `SUBVOCAB` entries: the 4 095 tokens most
frequent in the training part (98.9 % of its tokens) and one entry for all others (`reference/drafting/subvocab.py`).

The target (the float32 form, OpenBLAS preloaded by the Makefile's `BLAS`) reads `TRAIN_WINDOWS` windows of the
training part once, in chunks (each cached in `.train-cache/smollm2_target/`, keyed by the GGUF's sha256 and the
plan's figures, so an interrupted run resumes); per position it keeps the top `TOP_K` probabilities of its row (a
stated approximation of the row for distillation: the rest's mass is dropped and the kept part renormalised over
the sub-vocabulary) and its final hidden state (float16, for the feature-conditioned drafter); after each window it
samples `SAMPLES` continuations of `BLOCK` tokens at temperature 1 (target-generated blocks, DistillSpec's data).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from ncm_verify.mlx_lm_real.smollm2 import SmolLM2, encode, load_smollm2
from ncm_verify.progress import time_left
from ncm_verify.reference.drafting.base import softmax_rows
from ncm_verify.reference.drafting.text import HELD_OUT_FRACTION, load_text

CACHE = Path(".train-cache") / "smollm2_target"
SUBVOCAB = 4096
VOCAB_SIZE = 49_152
"""SmolLM2's vocabulary (checked against the loaded model where the data is made)."""
WINDOW = 64
"""Positions a cached window holds rows for (the window reads WINDOW tokens and its label is the next)."""
TRAIN_WINDOWS = 448
CHUNK = 16
TOP_K = 32
BLOCK = 8
SAMPLES = 2
SEED = 42
FORM = "float32"


@dataclass(frozen=True)
class Tokens:
    train: np.ndarray
    held_out: np.ndarray


def split_tokens(smol: SmolLM2) -> Tokens:
    """The corpus's training and held-out characters, each encoded by SmolLM2's tokenizer."""
    text = load_text()
    cut = int(len(text) * (1 - HELD_OUT_FRACTION))
    return Tokens(np.array(encode(smol, text[:cut]), np.int32), np.array(encode(smol, text[cut:]), np.int32))


def make_subvocab(train: np.ndarray, size: int = SUBVOCAB) -> np.ndarray:
    """[-1, then the size - 1 ids most frequent in `train`], ties broken by the smaller id."""
    ids, counts = np.unique(train, return_counts=True)
    order = np.lexsort((ids, -counts))[: size - 1]
    return np.concatenate([[-1], ids[order]]).astype(np.int32)


def window_starts(train: np.ndarray, count: int = TRAIN_WINDOWS, seed: int = SEED) -> np.ndarray:
    """`count` non-overlapping windows of WINDOW + 1 tokens of `train`, chosen seeded, in order."""
    slots = (len(train) - 1) // (WINDOW + 1)
    return np.sort(np.random.default_rng(seed).choice(slots, size=count, replace=False)) * (WINDOW + 1)


def target_step(model, tokens: mx.array, cache=None) -> tuple[mx.array, mx.array]:
    """The target's final normed hidden states and float32 logits over `tokens`."""
    hidden = model.model(tokens, cache)
    head = model.model.embed_tokens.as_linear if model.args.tie_word_embeddings else model.lm_head
    return hidden, head(hidden).astype(mx.float32)


def top_rows(logits: mx.array, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of `logits` (..., V): its top-k ids (descending), their probabilities and the rest's mass
    (1 - their sum; the rows are normalised by blocked sums, within ~1e-7 of 1)."""
    rows = softmax_rows(logits)
    top = mx.argpartition(-rows, k - 1, axis=-1)[..., :k]
    probs = mx.take_along_axis(rows, top, axis=-1)
    order = mx.argsort(-probs, axis=-1)
    ids, probs = mx.take_along_axis(top, order, axis=-1), mx.take_along_axis(probs, order, axis=-1)
    kept = np.array(probs, dtype=np.float64)
    return np.array(ids, dtype=np.int32), kept, np.maximum(1.0 - kept.sum(axis=-1), 0.0)


def _chunk(model, windows: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    x = mx.array(windows[:, :WINDOW])
    cache = make_prompt_cache(model)
    hidden, logits = target_step(model, x, cache)
    ids, probs, _ = top_rows(logits, TOP_K)
    # SAMPLES continuations of BLOCK tokens after each window, at temperature 1, from the full rows
    key = mx.random.key(seed)
    last = mx.repeat(logits[:, -1:], SAMPLES, axis=0)
    for c in cache:
        c.keys, c.values = mx.repeat(c.keys, SAMPLES, axis=0), mx.repeat(c.values, SAMPLES, axis=0)
    drawn = []
    for step_key in mx.random.split(key, BLOCK):
        token = mx.random.categorical(last[:, -1], key=step_key)
        drawn.append(token)
        _, last = target_step(model, token[:, None], cache)
    return {
        "top_ids": ids,
        "top_probs": probs.astype(np.float32),
        "features": np.array(hidden.astype(mx.float16)),
        "generated": np.array(mx.stack(drawn, axis=1), dtype=np.int32).reshape(len(windows), SAMPLES, BLOCK),
    }


def cache_key(smol: SmolLM2, starts: np.ndarray) -> str:
    fields = [smol.sha256, FORM, WINDOW, TOP_K, BLOCK, SAMPLES, SEED, starts.tolist()]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:16]


def target_data(smol: SmolLM2 | None = None) -> dict[str, np.ndarray]:
    """The cached target data (computed where missing, chunk by chunk, progress printed); the windows included."""
    smol = smol or load_smollm2(form=FORM)
    tokens = split_tokens(smol)
    starts = window_starts(tokens.train)
    windows = np.stack([tokens.train[s : s + WINDOW + 1] for s in starts])
    directory = CACHE / cache_key(smol, starts)
    directory.mkdir(parents=True, exist_ok=True)
    parts = []
    began = time.perf_counter()
    for n, begin in enumerate(range(0, len(windows), CHUNK)):
        path = directory / f"chunk_{n:03d}.npz"
        if not path.exists():
            part = _chunk(smol.model, windows[begin : begin + CHUNK], SEED * 1000 + n)
            np.savez(path.with_suffix(".tmp.npz"), **part)  # type: ignore[arg-type]
            path.with_suffix(".tmp.npz").rename(path)
        with np.load(path) as stored:
            parts.append({k: stored[k] for k in stored.files})
        done = min(begin + CHUNK, len(windows))
        print(
            f"\rsmollm2 target rows  {done:>4}/{len(windows)} windows  "
            f"{time_left(done, len(windows), time.perf_counter() - began)}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)
    data = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    data["windows"] = windows
    data["subvocab"] = make_subvocab(tokens.train)
    return data


C10_CONTEXTS = 128
C10_CONTEXT_LENGTH = 32
C10_SEED = 2024
C10_TOP_FIRST = 1024
"""Entries C10 keeps of the target's row at a context's end: its largest within the sub-vocabulary (the drafters
propose nothing else)."""
C10_TOP = 48
"""Entries C10 keeps of each row after an expanded first token."""
C10_EXPAND = 64
"""First tokens (the target's likeliest in the sub-vocabulary) after which C10 keeps the target's next row."""


def held_out_contexts(held_out: np.ndarray, count: int = C10_CONTEXTS, length: int = C10_CONTEXT_LENGTH) -> np.ndarray:
    """`count` non-overlapping windows of `length` held-out tokens, chosen seeded, in order."""
    slots = len(held_out) // length
    starts = np.sort(np.random.default_rng(C10_SEED).choice(slots, size=count, replace=False)) * length
    return np.stack([held_out[s : s + length] for s in starts]).astype(np.int32)


def sparse_rows(rows: np.ndarray, members: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per dense float64 row: the k largest entries among `members` (ids, probabilities) and the mass of the
    members left out (>= 0)."""
    sub = rows[:, members]
    top = np.argsort(-sub, axis=1, kind="stable")[:, :k]
    probs = np.take_along_axis(sub, top, axis=1)
    return members[top].astype(np.int32), probs, np.maximum(sub.sum(axis=1) - probs.sum(axis=1), 0.0)


def c10_rows(smol: SmolLM2 | None = None) -> dict[str, np.ndarray]:
    """The target's rows C10 needs, kept sparse: at each held-out context's end, and after each of its
    `C10_EXPAND` likeliest sub-vocabulary tokens; the hidden state the loop hands a feature reader there."""
    from ncm_verify.harness.drafting_acceptance import prefix_rows

    smol = smol or load_smollm2(form=FORM)
    tokens = split_tokens(smol)
    members = make_subvocab(tokens.train)[1:].astype(np.int64)
    contexts = held_out_contexts(tokens.held_out)
    began = time.perf_counter()
    ctx = mx.array(contexts)
    hidden, _ = target_step(smol.model, ctx)
    rows = prefix_rows(smol.model, ctx)
    first = rows([(c, ()) for c in range(len(contexts))])
    ids, probs, rest = sparse_rows(first, members, C10_TOP_FIRST)
    expanded = ids[:, :C10_EXPAND]
    keys = [(c, (int(x),)) for c in range(len(contexts)) for x in expanded[c]]
    second = [sparse_rows(rows(keys[b : b + 256]), members, C10_TOP) for b in range(0, len(keys), 256)]
    shape = (len(contexts), C10_EXPAND)
    print(f"smollm2 C10 rows: {len(keys) + len(contexts)} rows in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return {
        "contexts": contexts,
        "first_ids": ids.astype(np.uint16),
        "first_probs": probs.astype(np.float32),
        "first_rest": rest,
        "expanded": expanded.astype(np.uint16),
        "second_ids": np.concatenate([s[0] for s in second]).reshape(*shape, -1).astype(np.uint16),
        "second_probs": np.concatenate([s[1] for s in second]).reshape(*shape, -1).astype(np.float32),
        "second_rest": np.concatenate([s[2] for s in second]).reshape(shape),
        # the state at the context's second-to-last position: what the drafting loop hands a feature reader
        "features": np.array(hidden[:, -2].astype(mx.float16)),
    }
