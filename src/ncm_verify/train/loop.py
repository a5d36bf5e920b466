"""One seeded, resumable training run with a progress bar: the loop every model of `make train` uses."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.progress import time_left


class Task(Protocol):
    """What a run trains on: a differentiable loss per step, and how many tokens one step reads."""

    @property
    def tokens_per_step(self) -> int: ...

    def loss(self, model: nn.Module, step: int) -> mx.array: ...


@dataclass(frozen=True)
class RunSpec:
    name: str
    steps: int
    learning_rate: float
    seed: int
    warmup: int = 50
    checkpoint_every: int = 100


def _optimizer(spec: RunSpec) -> optim.Optimizer:
    warm = optim.linear_schedule(1e-7, spec.learning_rate, spec.warmup)
    decay = optim.cosine_decay(spec.learning_rate, max(spec.steps - spec.warmup, 1), spec.learning_rate * 0.1)
    return optim.AdamW(learning_rate=optim.join_schedules([warm, decay], [spec.warmup]), weight_decay=0.01)


def _save_checkpoint(directory: Path, model: nn.Module, opt: optim.Optimizer, step: int, wall: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(directory / "model.safetensors"), dict(tree_flatten(model.parameters())))
    flat: list[tuple[str, Any]] = tree_flatten(opt.state)  # type: ignore[assignment]
    state = {k: v for k, v in flat if isinstance(v, mx.array)}
    mx.save_safetensors(str(directory / "optimizer.safetensors"), state)
    (directory / "progress.json").write_text(json.dumps({"step": step, "wall_seconds": wall}))


def _load_checkpoint(directory: Path, model: nn.Module, opt: optim.Optimizer) -> tuple[int, float]:
    progress = directory / "progress.json"
    if not progress.exists():
        return 0, 0.0
    done = json.loads(progress.read_text())
    model.load_weights(str(directory / "model.safetensors"))
    state = mx.load(str(directory / "optimizer.safetensors"))
    assert isinstance(state, dict)
    opt.state = tree_unflatten(list(state.items()))
    return int(done["step"]), float(done["wall_seconds"])


def _bar(name: str, step: int, total: int, loss: float, tokens_per_s: float, timing: str = "") -> str:
    width = 24
    filled = int(width * step / max(total, 1))
    return (
        f"\r{name:<16} [{'#' * filled}{'.' * (width - filled)}] {step:>5}/{total} "
        f"loss {loss:6.3f}  {tokens_per_s:8.0f} tok/s  {timing}"
    )


def train(model: nn.Module, task: Task, spec: RunSpec, checkpoint_dir: Path) -> float:
    """Train `model` for `spec.steps` steps, resuming from `checkpoint_dir`; the wall seconds spent in all."""
    mx.random.seed(spec.seed)
    opt = _optimizer(spec)
    opt.init(model.trainable_parameters())
    start, wall = _load_checkpoint(checkpoint_dir, model, opt)
    if start >= spec.steps:
        return wall
    if start:
        print(f"{spec.name}: resuming at step {start}", file=sys.stderr)
    value_and_grad = nn.value_and_grad(model, task.loss)
    began = time.perf_counter() - wall
    tokens = 0
    window_began = time.perf_counter()
    loss_value = float("nan")
    for step in range(start, spec.steps):
        mx.random.seed(spec.seed * 1_000_003 + step)
        loss, grads = value_and_grad(model, step)
        opt.update(model, grads)
        mx.eval(loss, model.parameters(), opt.state)
        tokens += task.tokens_per_step
        loss_value = 0.9 * loss_value + 0.1 * loss.item() if loss_value == loss_value else loss.item()
        if (step + 1) % 10 == 0 or step + 1 == spec.steps:
            spent = time.perf_counter() - window_began
            # the time left from this session's steps (a resumed run's earlier steps ran at another time)
            timing = time_left(step + 1 - start, spec.steps - start, spent)
            bar = _bar(spec.name, step + 1, spec.steps, loss_value, tokens / max(spent, 1e-9), timing)
            print(bar, end="", file=sys.stderr, flush=True)
        if (step + 1) % spec.checkpoint_every == 0 or step + 1 == spec.steps:
            _save_checkpoint(checkpoint_dir, model, opt, step + 1, time.perf_counter() - began)
    print(file=sys.stderr)
    return time.perf_counter() - began
