"""Real next-token logits of SmolLM2-135M at real prompts, both forms, shipped as a small fixture.

`python -m ncm_verify.mlx_lm_real.smollm2_rows` builds `fixtures/smollm2_rows.npz`: for each prompt, the model's
greedy continuation is appended and the logits at the last `POSITIONS` positions kept, from the float32 form and the
quantised form (float16 activations), stored in float16 with a JSON record (the GGUF's sha256, prompts, tokens, MLX
version, command). The strategies draw target and draft rows from it (harness/strategies.py), so the properties
need no model; tests/test_smollm2.py rebuilds the rows from the installed model and compares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from ncm_verify.environment import package_version
from ncm_verify.mlx_lm_real import smollm2

PROMPTS = (
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "def is_prime(n):\n    if n < 2:\n        return False\n",
    "Once upon a time, in a small village by the sea, there lived",
    "The mitochondria is the powerhouse of the cell. It produces",
)
POSITIONS = 4
"""Rows kept per prompt: the last positions of prompt + continuation (16 rows a form, 1.5 MB in float16)."""
CONTINUATION = 4
FIXTURE = "smollm2_rows.npz"


def fixture_path() -> Path:
    """Where the strategies read it (harness.strategies.SMOLLM2_ROWS): the package's data/fixtures link."""
    return Path(__file__).parents[1] / "data" / "fixtures" / FIXTURE


def sequence(model: smollm2.SmolLM2, prompt: str) -> list[int]:
    """The prompt's tokens and the model's greedy continuation of CONTINUATION tokens (mlx-lm's generate_step)."""
    from mlx_lm.generate import generate_step

    tokens = smollm2.encode(model, prompt)
    continuation = [int(t) for t, _ in generate_step(mx.array(tokens), model.model, max_tokens=CONTINUATION)]
    return tokens + continuation


def form_logits(model: smollm2.SmolLM2, tokens: list[int]) -> np.ndarray:
    """Float32 logits [POSITIONS, V] at the sequence's last positions (each predicting the next token)."""
    logits = model.model(mx.array([tokens]))[0, -POSITIONS:].astype(mx.float32)
    return np.array(logits)


def build_rows(path: Path | str | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """Each form's logits at every prompt's last positions (sequences from the float32 form) and their record."""
    models = {form: smollm2.load_smollm2(path, form=form) for form in smollm2.FORMS}
    sequences = [sequence(models["float32"], prompt) for prompt in PROMPTS]
    arrays = {form: np.concatenate([form_logits(m, s) for s in sequences]) for form, m in models.items()}
    record = {
        "source": f"{smollm2.WHEEL} ({smollm2.GGUF_NAME}, sha256 {smollm2.GGUF_SHA256})",
        "command": "python -m ncm_verify.mlx_lm_real.smollm2_rows",
        "mlx": package_version("mlx"),
        "prompts": list(PROMPTS),
        "sequences": sequences,
        "positions_per_prompt": POSITIONS,
        "rows": "logits_<form>[i]: next-token logits after sequences[i // P][: len - P + i % P + 1], P positions",
        "storage": "float16 logits; rows are softmax(logits / T) at draw time (harness/strategies.py)",
    }
    return arrays, record


def write_rows(out: Path) -> None:
    logits, record = build_rows()
    arrays: dict[str, Any] = {f"logits_{form}": rows.astype(np.float16) for form, rows in logits.items()}
    np.savez_compressed(out, record=np.array(json.dumps(record)), **arrays)


def load_rows(path: Path | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """The shipped logits (float32 [N, V] per form) and their record."""
    with np.load(path or fixture_path()) as data:
        arrays = {form: data[f"logits_{form}"].astype(np.float32) for form in smollm2.FORMS}
        return arrays, json.loads(str(data["record"]))


if __name__ == "__main__":
    write_rows(fixture_path())
    print(f"wrote {fixture_path()}")
