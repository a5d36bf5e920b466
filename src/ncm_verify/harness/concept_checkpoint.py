"""The fixed checkpoints of the model-level properties' path (b): which files, named by path and sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = [
    "DEFAULT_CHECKPOINT",
    "TRAINED_CHECKPOINT",
    "checkpoint_path",
    "checkpoint_paths",
    "describe_checkpoint",
    "judged_line",
]

DEFAULT_CHECKPOINT = Path(__file__).parents[1] / "data" / "fixtures" / "ncm_concept_tiny.safetensors"
"""The seeded checkpoint `make verify` judges by default (`reference.ncm.concept_fixture` writes it)."""
TRAINED_CHECKPOINT = DEFAULT_CHECKPOINT.with_name("ncm_concept_trained.safetensors")
"""The trained one judged beside it (gains and biases away from initialisation; fixtures/README.md)."""


def checkpoint_path(option: str | None) -> Path:
    """The checkpoint `--ncm-model` (or ``MODEL=``) names, else the default; a ValueError if absent."""
    path = Path(option).expanduser().resolve() if option else DEFAULT_CHECKPOINT.resolve()
    if not path.is_file():
        raise ValueError(f"--ncm-model: no checkpoint file at {path}")
    return path


def checkpoint_paths(option: str | None) -> tuple[Path, ...]:
    """The checkpoints path (b) draws from: the one `--ncm-model` names, else the seeded and the trained ones."""
    if option:
        return (checkpoint_path(option),)
    return tuple(checkpoint_path(str(path)) for path in (DEFAULT_CHECKPOINT, TRAINED_CHECKPOINT))


def describe_checkpoint(option: str | None) -> dict:
    """``{"path", "sha256", "judged"}``: the checkpoint `option` names (else the seeded one) and every checkpoint
    path (b) judges, each ``{"path", "sha256"}`` (sha256 "missing" when a file is absent)."""
    try:
        paths = checkpoint_paths(option)
    except ValueError:
        missing = {"path": str(option), "sha256": "missing"}
        return {**missing, "judged": [missing]}
    judged = [{"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()} for path in paths]
    return {**judged[0], "judged": judged}


def judged_line(description: dict) -> str:
    """The checkpoints of `describe_checkpoint`'s `description`, each with its sha256, on one line."""
    judged = description.get("judged") or [description]
    return "; ".join(f"{entry['path']} (sha256 {entry['sha256']})" for entry in judged)
