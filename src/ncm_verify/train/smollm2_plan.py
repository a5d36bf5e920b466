"""The drafters `make train` trains against SmolLM2-135M (issue 42), and C10's sparse target rows.

Data: `smollm2_data` (the target's rows, features and sampled blocks, computed once and cached). Drafters, each over
the sub-vocabulary (`reference/drafting/subvocab.py`), written as float16 to `SMOLLM2_FIXTURES` with a record
(sha256, config, seeds, steps, held-out loss, wall seconds):

- `smollm2_ar_data`: a tiny mlx-lm llama, cross-entropy on the corpus's next tokens;
- `smollm2_ar_distilled`: the same llama, same init, steps and windows, DistillSpec's forward KL to the target's
  rows (token level, on the corpus: each position's top-`TOP_K` target probabilities, mapped to the sub-vocabulary
  with the left-out tokens' kept mass on entry 0, renormalised: a stated approximation of the full row);
- `smollm2_ncm_data` / `smollm2_ncm_distilled`: the reference NCM block drafter (`ConceptBlockDrafter`: codec and
  generator), one shared pretrain on the corpus's blocks, then continued for the same steps on the corpus's blocks,
  or on target-generated blocks (DistillSpec's sequence-level forward KL: exact -log q(block) / k, z enumerated);
- `smollm2_ncm_features`: the NCM drafter reading the target's hidden state at the block's start (as the loop hands
  it), trained on the corpus's blocks as long as the other two in all.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ncm_verify.reference.drafting.concept_drafter import ConceptDrafterConfig
from ncm_verify.reference.drafting.models import llama_args, parameter_count
from ncm_verify.reference.drafting.subvocab import SubVocabConceptDrafter, SubVocabLlama
from ncm_verify.reference.drafting.trained import SMOLLM2_DRAFTING, file_sha256
from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.train import smollm2_data
from ncm_verify.train.loop import RunSpec, train

SMOLLM2_FIXTURES = SMOLLM2_DRAFTING
CHECKPOINTS = Path(".train-cache")
NAMES = ("smollm2_ar_data", "smollm2_ar_distilled", "smollm2_ncm_data", "smollm2_ncm_distilled", "smollm2_ncm_features")
C10_ROWS = "c10_target_rows.npz"
SEED = 7
BATCH = 16
AR_STEPS = 250
CONTEXT = 32
BLOCK = 8
NCM_BATCH = 32
NCM_PRETRAIN = 300
NCM_CONTINUE = 150
AR_ARGS = vars(llama_args(smollm2_data.SUBVOCAB, hidden=64, layers=2, intermediate=192))
NCM_BASE = ConceptDrafterConfig(
    ConceptConfig(
        vocab_size=smollm2_data.SUBVOCAB,
        sequence_length=BLOCK,
        level_lengths=(1, 2),
        codebook_sizes=(8, 4),
        prefix_length=CONTEXT,
        codec_dim=40,
        d_model=32,
        num_heads=2,
        num_layers=2,
        seed=SEED + 2,
        codec_seed=SEED + 2,
    ),
    context=CONTEXT,
)
NCM_FEATURES = ConceptDrafterConfig(
    dataclasses.replace(NCM_BASE.concept, seed=SEED + 4, codec_seed=SEED + 4), context=CONTEXT, feature_dim=576
)
OBJECTIVES = {
    "ar_data": "data: cross-entropy of the corpus's next token (entry 0 for tokens outside the sub-vocabulary)",
    "ar_distilled": f"DistillSpec forward KL to the target's rows at the corpus's positions (top {smollm2_data.TOP_K}"
    " probabilities, left-out tokens' kept mass on entry 0, renormalised)",
    "ncm_data": "data: exact -log q(block) / k of the corpus's blocks, z enumerated",
    "ncm_distilled": "DistillSpec sequence-level forward KL: exact -log q(block) / k of target-generated blocks"
    " (temperature 1, after the training windows)",
    "ncm_features": "data, reading the target's final hidden state at the block's start (at s - 1) as one extra"
    " prefix column",
}


@dataclass
class SubTokens:
    """The cached target data with ids mapped to sub-vocabulary entries."""

    windows: np.ndarray
    soft_ids: np.ndarray
    soft_probs: np.ndarray
    features: np.ndarray
    generated_context: np.ndarray
    generated: np.ndarray
    token_ids: np.ndarray


def sub_tokens(data: dict[str, np.ndarray]) -> SubTokens:
    token_ids = data["subvocab"]
    to_sub = np.zeros(smollm2_data.VOCAB_SIZE, dtype=np.int32)
    to_sub[token_ids[1:]] = np.arange(1, len(token_ids))
    windows = to_sub[data["windows"]]
    samples = data["generated"].shape[1]
    context = np.repeat(windows[:, smollm2_data.WINDOW - CONTEXT : smollm2_data.WINDOW], samples, axis=0)
    return SubTokens(
        windows=windows,
        soft_ids=to_sub[data["top_ids"]],
        soft_probs=data["top_probs"],
        features=data["features"],
        generated_context=context,
        generated=to_sub[data["generated"].reshape(-1, data["generated"].shape[-1])],
        token_ids=token_ids,
    )


def _rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, step])


@dataclass
class ARTask:
    """Next-token loss of a `SubVocabLlama` on cached windows: hard labels, or the target's soft rows."""

    data: SubTokens
    seed: int
    distilled: bool
    batch: int = BATCH

    @property
    def tokens_per_step(self) -> int:
        return self.batch * smollm2_data.WINDOW

    def loss(self, model: nn.Module, step: int) -> mx.array:
        assert isinstance(model, SubVocabLlama)
        pick = _rng(self.seed, step).integers(0, len(self.data.windows), size=self.batch)
        w = mx.array(self.data.windows[pick])
        log_q = nn.log_softmax(model.sub_logits(w[:, :-1]).astype(mx.float32), axis=-1)
        if not self.distilled:
            return -mx.take_along_axis(log_q, w[:, 1:, None], axis=-1).mean()
        probs = mx.array(self.data.soft_probs[pick])
        probs = probs / probs.sum(axis=-1, keepdims=True)
        picked = mx.take_along_axis(log_q, mx.array(self.data.soft_ids[pick]), axis=-1)
        return -(probs * picked).sum(axis=-1).mean()


def ncm_log_likelihood(model: SubVocabConceptDrafter, context: mx.array, blocks: mx.array, features=None) -> mx.array:
    """Exact log q(block | context) (B,) over sub-vocabulary entries, z enumerated (rows as trained: entry 0 kept)."""
    log_prior, log_rows = model.inner.block_law(context, blocks.shape[1], features=features)
    rows = log_rows[0]  # (Z, k, M): the rows do not depend on the context
    per_z = rows[:, 0, blocks[:, 0]]  # (Z, B)
    for i in range(1, blocks.shape[1]):
        per_z = per_z + rows[:, i, blocks[:, i]]
    return mx.logsumexp(log_prior + per_z.T, axis=-1)


@dataclass
class NCMTask:
    """The NCM drafter on blocks: the corpus's (after `CONTEXT` tokens of a cached window) or target-generated."""

    data: SubTokens
    seed: int
    generated: bool = False
    features: bool = False
    batch: int = NCM_BATCH

    @property
    def tokens_per_step(self) -> int:
        return self.batch * (CONTEXT + BLOCK)

    def loss(self, model: nn.Module, step: int) -> mx.array:
        assert isinstance(model, SubVocabConceptDrafter)
        rng = _rng(self.seed, step)
        if self.generated:
            pick = rng.integers(0, len(self.data.generated), size=self.batch)
            context, blocks = self.data.generated_context[pick], self.data.generated[pick]
            feats = None
        else:
            pick = rng.integers(0, len(self.data.windows), size=self.batch)
            # s: the last context token's position; the block is s + 1 .. s + BLOCK
            s = rng.integers(CONTEXT - 1, smollm2_data.WINDOW - BLOCK + 1, size=self.batch)
            index = s[:, None] + np.arange(1 - CONTEXT, BLOCK + 1)[None]
            tokens = self.data.windows[pick[:, None], index]
            context, blocks = tokens[:, :CONTEXT], tokens[:, CONTEXT:]
            feats = mx.array(self.data.features[pick, s - 1].astype(np.float32)) if self.features else None
        ll = ncm_log_likelihood(model, mx.array(context), mx.array(blocks), feats)
        return -ll.mean() / BLOCK


@dataclass
class Trained:
    name: str
    model: nn.Module
    kind: str
    config: dict[str, Any]
    spec: RunSpec
    wall_seconds: float
    held_out_loss: float
    objective: str


def _run(model: nn.Module, task: Any, spec: RunSpec, init: Path | None = None) -> float:
    directory = CHECKPOINTS / spec.name
    if init is not None and not (directory / "progress.json").exists():
        model.load_weights(str(init))
    wall = train(model, task, spec, directory)
    mx.eval(model.parameters())
    model.eval()
    return wall


def held_out_loss(model: nn.Module, held: SubTokens) -> float:
    """Mean held-out loss: next-token cross-entropy (a llama) or block -log q / k (an NCM), sub-vocabulary entries."""
    if isinstance(model, SubVocabLlama):
        return float(np.array(ARTask(held, 0, False, batch=len(held.windows)).loss(model, 0)))
    task = NCMTask(held, 0, features=bool(model.reads_features), batch=4 * len(held.windows))
    return float(np.array(task.loss(model, 0)))


def held_out_tokens(smol, token_ids: np.ndarray, count: int = 64) -> SubTokens:
    """Held-out windows (features from the target) to report each drafter's held-out loss on."""
    tokens = smollm2_data.split_tokens(smol)
    length = smollm2_data.WINDOW + 1
    starts = np.arange(count) * length
    windows = np.stack([tokens.held_out[s : s + length] for s in starts])
    hidden, _ = smollm2_data.target_step(smol.model, mx.array(windows[:, :-1]))
    data = {
        "windows": windows,
        "top_ids": np.zeros((count, length - 1, 1), np.int32),
        "top_probs": np.ones((count, length - 1, 1), np.float32),
        "features": np.array(hidden.astype(mx.float16)),
        "generated": np.zeros((count, 1, BLOCK), np.int32),
        "subvocab": token_ids,
    }
    return sub_tokens(data)


def make_all(want: Callable[[str], bool]) -> list[Trained]:
    from ncm_verify.mlx_lm_real.smollm2 import load_smollm2

    if not any(want(n) for n in (*NAMES, "smollm2_c10_rows")):
        return []
    smol = load_smollm2(form=smollm2_data.FORM)
    made: list[Trained] = []
    if any(want(n) for n in NAMES):
        made = make_drafters(smol, want)
    if want("smollm2_c10_rows"):
        began = time.perf_counter()
        rows = smollm2_data.c10_rows(smol)
        SMOLLM2_FIXTURES.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(SMOLLM2_FIXTURES / C10_ROWS, **rows)  # type: ignore[arg-type]
        write_rows_record(time.perf_counter() - began)
    return made


def make_drafters(smol, want: Callable[[str], bool]) -> list[Trained]:
    """The drafters `want` names, from the target's cached data (computed first where missing)."""
    data = sub_tokens(smollm2_data.target_data(smol))
    held = held_out_tokens(smol, data.token_ids)
    token_ids = mx.array(data.token_ids)
    made = []
    for name, distilled in (("smollm2_ar_data", False), ("smollm2_ar_distilled", True)):
        if not want(name):
            continue
        mx.random.seed(SEED + 1)  # one init for both
        model = SubVocabLlama(AR_ARGS, token_ids, smol.vocab_size)
        spec = RunSpec(name, AR_STEPS, 3e-3, SEED + 1)
        wall = _run(model, ARTask(data, SEED + 1, distilled), spec)
        objective = OBJECTIVES["ar_distilled" if distilled else "ar_data"]
        made.append(Trained(name, model, "subvocab_llama", AR_ARGS, spec, wall, held_out_loss(model, held), objective))
    if want("smollm2_ncm_data") or want("smollm2_ncm_distilled"):
        mx.random.seed(SEED + 2)
        pre = SubVocabConceptDrafter(NCM_BASE, token_ids, smol.vocab_size)
        pre_spec = RunSpec("smollm2_ncm_pretrain", NCM_PRETRAIN, 3e-3, SEED + 2)
        pre_wall = _run(pre, NCMTask(data, SEED + 2), pre_spec)
        init = CHECKPOINTS / pre_spec.name / "model.safetensors"
        for name, generated in (("smollm2_ncm_data", False), ("smollm2_ncm_distilled", True)):
            if not want(name):
                continue
            drafter = SubVocabConceptDrafter(NCM_BASE, token_ids, smol.vocab_size)
            spec = RunSpec(name, NCM_CONTINUE, 1e-3, SEED + 3, warmup=20)
            wall = pre_wall + _run(drafter, NCMTask(data, SEED + 3, generated=generated), spec, init=init)
            made.append(
                Trained(
                    name,
                    drafter,
                    "subvocab_concept_ncm",
                    NCM_BASE.to_dict(),
                    RunSpec(name, NCM_PRETRAIN + NCM_CONTINUE, spec.learning_rate, spec.seed),
                    wall,
                    held_out_loss(drafter, held),
                    OBJECTIVES["ncm_distilled" if generated else "ncm_data"],
                )
            )
    if want("smollm2_ncm_features"):
        mx.random.seed(SEED + 4)
        drafter = SubVocabConceptDrafter(NCM_FEATURES, token_ids, smol.vocab_size)
        spec = RunSpec("smollm2_ncm_features", NCM_PRETRAIN + NCM_CONTINUE, 3e-3, SEED + 4)
        wall = _run(drafter, NCMTask(data, SEED + 4, features=True), spec)
        made.append(
            Trained(
                spec.name,
                drafter,
                "subvocab_concept_ncm",
                NCM_FEATURES.to_dict(),
                spec,
                wall,
                held_out_loss(drafter, held),
                OBJECTIVES["ncm_features"],
            )
        )
    return made


def _record_path(directory: Path) -> Path:
    return directory / "record.json"


def _read_record(directory: Path) -> dict[str, Any]:
    path = _record_path(directory)
    return json.loads(path.read_text()) if path.exists() else {"models": {}}


def _target_entry() -> dict[str, Any]:
    from ncm_verify.mlx_lm_real.smollm2 import GGUF_NAME, GGUF_SHA256, WHEEL

    return {"wheel": WHEEL, "gguf": GGUF_NAME, "gguf_sha256": GGUF_SHA256, "form": smollm2_data.FORM}


def write_rows_record(seconds: float, directory: Path = SMOLLM2_FIXTURES) -> None:
    record = _read_record(directory)
    path = directory / C10_ROWS
    record["c10_rows"] = {
        "file": C10_ROWS,
        "sha256": file_sha256(path),
        "contexts": smollm2_data.C10_CONTEXTS,
        "context_length": smollm2_data.C10_CONTEXT_LENGTH,
        "seed": smollm2_data.C10_SEED,
        "kept_first_row": smollm2_data.C10_TOP_FIRST,
        "kept_per_row": smollm2_data.C10_TOP,
        "expanded_first_tokens": smollm2_data.C10_EXPAND,
        "wall_seconds": round(seconds, 1),
        "target": _target_entry(),
    }
    _record_path(directory).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def write(made: list[Trained], directory: Path = SMOLLM2_FIXTURES) -> dict[str, Any]:
    """Each drafter's weights (float16; `token_ids` int32) and its record entry beside them."""
    directory.mkdir(parents=True, exist_ok=True)
    record = _read_record(directory)
    record["command"] = "make train ONLY='...'"
    record["target"] = _target_entry()
    record["corpus"] = "reference/drafting/text.py's pydoc text: first 90 % of characters to train, last 10 % held out"
    for m in made:
        path = directory / f"{m.name}.safetensors"
        flat: list[tuple[str, mx.array]] = tree_flatten(m.model.parameters())  # type: ignore[assignment]
        weights = {k: v if v.dtype == mx.int32 else v.astype(mx.float16) for k, v in flat}
        mx.save_safetensors(str(path), weights, metadata={"name": m.name})
        record["models"][m.name] = {
            "kind": m.kind,
            "config": m.config,
            "file": path.name,
            "sha256": file_sha256(path),
            "shapes": {k: list(v.shape) for k, v in weights.items()},
            "parameters": parameter_count(m.model) - smollm2_data.SUBVOCAB,
            "subvocab": smollm2_data.SUBVOCAB,
            "vocab_size": smollm2_data.VOCAB_SIZE,
            "seed": m.spec.seed,
            "steps": m.spec.steps,
            "learning_rate": m.spec.learning_rate,
            "wall_seconds": round(m.wall_seconds, 1),
            "held_out_loss": m.held_out_loss,
            "objective": m.objective,
            "device": str(mx.default_device()),
        }
    _record_path(directory).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record
