"""The models `make train` makes, in order, and the record it writes beside their weights.

Steps and sizes are chosen so the whole plan takes minutes on 2 idle cores. The NCM drafters (a) data alone
and (b) distilled continue one shared pretrained checkpoint for the same number of steps with the same
schedule, so (b)'s only difference is its objective; (c) reads the target's features and trains on the data
for as many steps as (a) in all; (d), the AR draft, likewise. The NCM drafters are the source's NCM
(`reference/ncm`: codec and block-diagonal generator, `ConceptBlockDrafter`); all four drafters hold the same
number of parameters within `PARAMETER_SLACK` ((c)'s codec is narrower by what its feature projection holds).

The toy level NCM (`reference/ncm/model.py`, level drafting's model) is trained on the same characters laid
out [prefix | levels]: a target, and two drafts of one smaller size from one seed, one on the data alone and
one distilled on the target's exact level law (its codes then mean what the target's do).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ncm_verify.reference.drafting import text as corpus
from ncm_verify.reference.drafting.concept_drafter import ConceptBlockDrafter, ConceptDrafterConfig
from ncm_verify.reference.drafting.models import llama_args, make_llama, parameter_count
from ncm_verify.reference.drafting.trained import DRAFTING_FIXTURES, file_sha256, load_record
from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.reference.ncm.config import NCMConfig
from ncm_verify.reference.ncm.model import make_model
from ncm_verify.tolerances import TRAIN_REPRODUCTION_NATS
from ncm_verify.train import data, evaluate, smollm2_plan
from ncm_verify.train.loop import RunSpec, Task, train
from ncm_verify.train.tasks import DistillTask, NCMBlockTask, NCMLevelTask, NextTokenTask

CHECKPOINTS = Path(".train-cache")
SEED = 0
CONTEXT = 32
BLOCK = 8
BATCH = 16
NCM_BATCH = 32
"""Windows an NCM drafter's step reads (each STARTS blocks): a step costs 0.3-0.5 s here, so the three runs take
minutes."""
STARTS = 4
"""Blocks an NCM step scores per window, each after its own `CONTEXT` tokens (the generator's prefix)."""
LENGTH = 64
TARGET_STEPS = 600
PRETRAIN_STEPS = 300
CONTINUE_STEPS = 150
GRAMMAR_STEPS = 200

# MLX's CPU backend runs these shapes at ~2 GFLOP/s on 2 shared cores, hence models of 20-90k parameters.
TARGET_ARGS = llama_args(len(data.VOCAB), hidden=64, layers=2, intermediate=128)
# The NCM drafters are the source's NCM (`reference/ncm`): a block of 8 as two levels (1 and 2 positions) of
# 8 and 4 codes, so z takes 8 x 4^2 = 128 values, enumerated exactly by training, held-out loss and C10.
NCM_BASE = ConceptDrafterConfig(
    ConceptConfig(
        vocab_size=len(data.VOCAB),
        sequence_length=BLOCK,
        level_lengths=(1, 2),
        codebook_sizes=(8, 4),
        prefix_length=CONTEXT,
        codec_dim=38,
        d_model=24,
        num_heads=2,
        num_layers=2,
        seed=SEED + 2,
        codec_seed=SEED + 2,
    ),
    context=CONTEXT,
)
# (c) gives most of its feature projection's 64 x 24 parameters back from the codec's width (38 -> 36).
NCM_FEATURES = ConceptDrafterConfig(
    dataclasses.replace(NCM_BASE.concept, codec_dim=36, seed=SEED + 4, codec_seed=SEED + 4),
    context=CONTEXT,
    feature_dim=TARGET_ARGS.hidden_size,
)
PARAMETER_SLACK = 0.005
"""How far an NCM drafter's parameter count may stray from the AR draft's (relative): a ConceptModel's count is
7 c^2 + (2V + 16 + K) c + 2cd + (5 + 2K) d + L (8 d^2 + 5d + 2 d / heads) + V + K (codec width c, model width d,
K codes in all), which no widths with heads of even width make 30,656 here; each is within 0.1 %."""
# (d): a llama of 32 wide, its MLP 100 wide: 30,656 parameters (the NCM drafters hold within PARAMETER_SLACK).
AR_DRAFT_ARGS = llama_args(len(data.VOCAB), hidden=32, layers=2, intermediate=100)
GRAMMAR_ARGS = llama_args(16, hidden=32, layers=1, intermediate=64)
# Level drafting's toy NCM on text: 16 characters of prefix, six levels of two characters, four codes a level.
# A target step (one pass per level) costs ~0.4 s of CPU at this size, a draft's ~0.07 s.
LEVEL_TARGET = NCMConfig(
    vocab_size=len(data.VOCAB),
    prefix_length=16,
    level_sizes=(2,) * 6,
    codebook_size=4,
    d_model=64,
    num_heads=4,
    num_layers=2,
    seed=SEED + 5,
)
LEVEL_DRAFT = NCMConfig(**{**LEVEL_TARGET.to_dict(), "d_model": 32, "num_heads": 2, "num_layers": 1, "seed": SEED + 6})
LEVEL_STEPS = 500
LEVEL_NAMES = ("level_target", "level_draft_data", "level_draft_distilled")


OBJECTIVES = {
    "data": "data: exact -log q(block) / k, q(block) = sum_z q(z | context) prod_i q(x_i | z), z enumerated",
    "distill": "DistillSpec on the target: forward KL on target-generated blocks (exact -log q(block) / k) plus the"
    " total variation between the target's rows and q(x_i | z) on the drafter's own on-policy blocks",
    "features": "data (exact -log q(block) / k, z enumerated), reading the target's final hidden state at the"
    " block's start (at s - 1, as the loop hands it) as one extra prefix column of the generator",
}


@dataclass
class Made:
    model: nn.Module
    kind: str
    config: dict[str, Any]
    data: str
    spec: RunSpec
    wall_seconds: float
    held_out_loss: float
    extra: dict[str, Any]


def _run(model: nn.Module, task: Task, spec: RunSpec, init: Path | None = None) -> float:
    directory = CHECKPOINTS / spec.name
    if init is not None and not (directory / "progress.json").exists():
        model.load_weights(str(init))
    wall = train(model, task, spec, directory)
    mx.eval(model.parameters())
    return wall


def make_all(only: set[str] | None) -> list[Made]:
    text = data.text_split()
    made: list[Made] = []
    want: Callable[[str], bool] = lambda name: only is None or name in only  # noqa: E731

    mx.random.seed(SEED)
    target = make_llama(TARGET_ARGS)
    # The distilled and feature-conditioned drafters learn from the target: it is trained first when they are.
    if any(want(name) for name in ("target", "ncm_distilled", "ncm_features")):
        spec = RunSpec("target", TARGET_STEPS, 3e-3, SEED)
        wall = _run(target, NextTokenTask(text.train, BATCH, LENGTH, SEED), spec)
        target.eval()
        loss = evaluate.next_token_loss(target, text.held_out)
        made.append(Made(target, "llama", vars(TARGET_ARGS), "text", spec, wall, loss, {}))
    target.freeze()

    if want("grammar"):
        grammar = data.make_grammar()
        gsplit = data.grammar_split(grammar)
        mx.random.seed(SEED)
        model = make_llama(GRAMMAR_ARGS)
        spec = RunSpec("grammar", GRAMMAR_STEPS, 3e-3, SEED)
        wall = _run(model, NextTokenTask(gsplit.train, BATCH, LENGTH, SEED), spec)
        model.eval()
        extra = {
            "kl_from_law": evaluate.grammar_kl(model, grammar, gsplit.held_out),
            "law_entropy_rate": grammar.entropy_rate(gsplit.held_out),
            "grammar_seed": grammar.seed,
        }
        made.append(
            Made(
                model,
                "llama",
                vars(GRAMMAR_ARGS),
                "grammar",
                spec,
                wall,
                evaluate.next_token_loss(model, gsplit.held_out),
                extra,
            )
        )

    total = PRETRAIN_STEPS + CONTINUE_STEPS
    if want("ar_draft"):
        mx.random.seed(SEED + 1)
        model = make_llama(AR_DRAFT_ARGS)
        spec = RunSpec("ar_draft", total, 3e-3, SEED + 1)
        wall = _run(model, NextTokenTask(text.train, BATCH, LENGTH, SEED + 1), spec)
        model.eval()
        made.append(
            Made(
                model,
                "llama",
                vars(AR_DRAFT_ARGS),
                "text",
                spec,
                wall,
                evaluate.next_token_loss(model, text.held_out),
                {},
            )
        )

    if want("ncm_data") or want("ncm_distilled"):
        mx.random.seed(SEED + 2)
        pre = ConceptBlockDrafter(NCM_BASE)
        pre_spec = RunSpec("ncm_pretrain", PRETRAIN_STEPS, 3e-3, SEED + 2)
        pre_wall = _run(pre, NCMBlockTask(text.train, NCM_BATCH, CONTEXT, BLOCK, STARTS, SEED + 2), pre_spec)
        init = CHECKPOINTS / "ncm_pretrain" / "model.safetensors"
        for name, objective in (("ncm_data", "data"), ("ncm_distilled", "distill")):
            if not want(name):
                continue
            drafter = ConceptBlockDrafter(NCM_BASE)
            spec = RunSpec(name, CONTINUE_STEPS, 1e-3, SEED + 3, warmup=20)
            task: Task
            if objective == "data":
                task = NCMBlockTask(text.train, NCM_BATCH, CONTEXT, BLOCK, STARTS, SEED + 3)
            else:
                task = DistillTask(text.train, target, NCM_BATCH, CONTEXT, BLOCK, SEED + 3)
            wall = pre_wall + _run(drafter, task, spec, init=init)
            drafter.eval()
            made.append(
                Made(
                    drafter,
                    "concept_ncm",
                    NCM_BASE.to_dict(),
                    "text" if objective == "data" else "text+target",
                    RunSpec(name, total, spec.learning_rate, spec.seed),
                    wall,
                    evaluate.block_loss(drafter, text.held_out, CONTEXT, BLOCK),
                    {
                        "objective": OBJECTIVES[objective],
                        "pretrain_steps": PRETRAIN_STEPS,
                        "continue_steps": CONTINUE_STEPS,
                    },
                )
            )

    if want("ncm_features"):
        mx.random.seed(SEED + 4)
        drafter = ConceptBlockDrafter(NCM_FEATURES)
        spec = RunSpec("ncm_features", total, 3e-3, SEED + 4)
        wall = _run(drafter, NCMBlockTask(text.train, NCM_BATCH, CONTEXT, BLOCK, STARTS, SEED + 4, target=target), spec)
        drafter.eval()
        made.append(
            Made(
                drafter,
                "concept_ncm",
                NCM_FEATURES.to_dict(),
                "text+target features",
                spec,
                wall,
                evaluate.block_loss(drafter, text.held_out, CONTEXT, BLOCK, target=target),
                {"objective": OBJECTIVES["features"]},
            )
        )
    if any(want(name) for name in LEVEL_NAMES):
        made += make_level_models(text, want)
    return made


def make_level_models(text: data.Split, want: Callable[[str], bool]) -> list[Made]:
    """The level target (trained first when a draft learns from it) and the two level drafts."""
    made: list[Made] = []
    target = make_model(LEVEL_TARGET)
    if want("level_target") or want("level_draft_distilled"):
        spec = RunSpec("level_target", LEVEL_STEPS, 3e-3, LEVEL_TARGET.seed)
        wall = _run(target, NCMLevelTask(text.train, BATCH, LEVEL_TARGET.total_length, LEVEL_TARGET.seed), spec)
        target.eval()
        loss = evaluate.level_loss(target, text.held_out)
        extra = {"objective": "data: -log p(levels | prefix), each level's latent marginalised exactly"}
        made.append(Made(target, "level_ncm", LEVEL_TARGET.to_dict(), "text", spec, wall, loss, extra))
    target.freeze()
    for name, teacher in (("level_draft_data", None), ("level_draft_distilled", target)):
        if not want(name):
            continue
        draft = make_model(LEVEL_DRAFT)
        spec = RunSpec(name, LEVEL_STEPS, 3e-3, LEVEL_DRAFT.seed)
        task = NCMLevelTask(text.train, BATCH, LEVEL_DRAFT.total_length, LEVEL_DRAFT.seed, target=teacher)
        wall = _run(draft, task, spec)
        draft.eval()
        objective = (
            "data: -log p(levels | prefix), each level's latent marginalised exactly"
            if teacher is None
            else "distilled: exact KL(p_target(z, x_l) || q(z, x_l)) per level at the data's contexts"
        )
        made.append(
            Made(
                draft,
                "level_ncm",
                LEVEL_DRAFT.to_dict(),
                "text" if teacher is None else "text+level_target",
                spec,
                wall,
                evaluate.level_loss(draft, text.held_out),
                {"objective": objective},
            )
        )
    return made


def write(made: list[Made], corpus: dict[str, Any], directory: Path = DRAFTING_FIXTURES) -> dict[str, Any]:
    record_path = directory / "record.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"models": {}}
    record["corpus"] = corpus
    record["command"] = "make train"
    for m in made:
        path = directory / f"{m.spec.name}.safetensors"
        weights = dict(tree_flatten(m.model.parameters()))
        mx.save_safetensors(str(path), weights, metadata={"name": m.spec.name})
        record["models"][m.spec.name] = {
            "kind": m.kind,
            "config": m.config,
            "file": path.name,
            "sha256": file_sha256(path),
            "shapes": {k: list(v.shape) for k, v in weights.items()},
            "parameters": parameter_count(m.model),
            "data": m.data,
            "seed": m.spec.seed,
            "steps": m.spec.steps,
            "learning_rate": m.spec.learning_rate,
            "wall_seconds": round(m.wall_seconds, 1),
            "held_out_loss": m.held_out_loss,
            "device": str(mx.default_device()),
            **m.extra,
        }
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.train", description=__doc__)
    parser.add_argument("--fresh", action="store_true", help="drop the checkpoints in .train-cache/ first")
    parser.add_argument(
        "--only",
        nargs="*",
        help="train only these models (and the target when they learn from it); smollm2: every SmolLM2 step",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="retrain from scratch (the checkpoints of what it trains dropped), compare each model with its shipped"
        " record, exit 1 if any"
        f" held-out loss differs by more than {TRAIN_REPRODUCTION_NATS} nats/token",
    )
    args = parser.parse_args(argv)
    shipped = load_record() if args.check else {}
    if args.fresh and CHECKPOINTS.exists():
        shutil.rmtree(CHECKPOINTS)
    if args.check:
        drop_checkpoints(set(args.only) if args.only else None, set(shipped["models"]))
    corpus_info = {
        "file": corpus.CORPUS.name,
        "sha256": data.sha256_text(corpus.load_text()),
        "source": "pydoc_data.topics (values joined in key order)",
        "held_out_fraction": corpus.HELD_OUT_FRACTION,
        "vocab_size": len(corpus.VOCAB),
    }
    began = time.perf_counter()
    only = set(args.only) if args.only else None
    made = make_all(only)
    record = write(made, corpus_info) if made else {"models": {}}
    smol_began = time.perf_counter()
    smol = smollm2_plan.make_all(lambda name: only is None or name in only or "smollm2" in only)
    if smol:
        record["models"].update(smollm2_plan.write(smol)["models"])
        print(f"SmolLM2 steps: {time.perf_counter() - smol_began:.0f} s (target rows included)")
    print(
        f"trained {len(made) + len(smol)} models in {time.perf_counter() - began:.0f} s (resumed work included in each)"
    )
    for name in sorted([m.spec.name for m in made] + [m.name for m in smol]):
        entry = record["models"][name]
        print(
            f"  {name:<22} {entry['parameters']:>8} params  held-out {entry['held_out_loss']:.4f}  "
            f"{entry['wall_seconds']:>7.1f} s  {entry['steps']} steps"
        )
    if args.check:
        return report_reproduction(shipped["models"], record["models"], [m.spec.name for m in made])
    return 0


def drop_checkpoints(only: set[str] | None, shipped: set[str]) -> None:
    """Before a reproduction: every checkpoint of the models it retrains and of auxiliary runs (a shared pretrain);
    a shipped model outside `only` keeps its checkpoint (a teacher reproduced by an earlier check)."""
    if not CHECKPOINTS.exists():
        return
    for directory in CHECKPOINTS.iterdir():
        if directory.name.startswith("smollm2"):
            continue  # SmolLM2's target data and drafters: their own record, not reproduced by --check
        if only is None or directory.name in only or directory.name not in shipped:
            shutil.rmtree(directory)


@dataclass(frozen=True)
class Reproduction:
    """One model's retrain set beside its shipped record."""

    name: str
    shipped_loss: float
    loss: float
    identical: bool
    """The retrained weights' sha256 equals the shipped file's: bit-identical."""
    shipped_seconds: float
    seconds: float

    @property
    def within(self) -> bool:
        return abs(self.loss - self.shipped_loss) <= TRAIN_REPRODUCTION_NATS


def report_reproduction(shipped: dict[str, Any], retrained: dict[str, Any], names: list[str]) -> int:
    """Print each retrained model beside its shipped record; 1 if any held-out loss strays beyond the tolerance."""
    rows = []
    for name in names:
        if name not in shipped:
            print(f"  {name}: no shipped record to compare with")
            return 1
        old, new = shipped[name], retrained[name]
        rows.append(
            Reproduction(
                name,
                old["held_out_loss"],
                new["held_out_loss"],
                old["sha256"] == new["sha256"],
                old["wall_seconds"],
                new["wall_seconds"],
            )
        )
    print(f"reproduction from scratch (tolerance {TRAIN_REPRODUCTION_NATS} nats/token on the held-out loss):")
    print(f"  {'model':<22} {'shipped':>8} {'retrain':>8} {'diff':>9}  weights        shipped s  retrain s")
    for r in rows:
        weights = "bit-identical" if r.identical else "differ"
        verdict = "" if r.within else "  OUTSIDE TOLERANCE"
        print(
            f"  {r.name:<22} {r.shipped_loss:8.4f} {r.loss:8.4f} {r.loss - r.shipped_loss:+9.5f}  {weights:<13}"
            f"  {r.shipped_seconds:9.1f}  {r.seconds:9.1f}{verdict}"
        )
    return 0 if all(r.within for r in rows) else 1
