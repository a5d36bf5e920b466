"""The reference NCM as one object: codec and generator, deterministic from their seeds, with
fingerprints (the generator's and the codec's), safetensors persistence and position counters.

Public API: `ConceptModel` (``.config``, ``.layout``, ``.codec``, ``.generator``,
``position_counts()``, ``reset_counts()``), `make_concept_model(config)`, `concept_fingerprint`
(generator and codec together), `generator_fingerprint`, `codec_fingerprint`, `save_concept_model`,
`load_concept_model`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import cast

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ncm_verify.reference.ncm.codec import Codec
from ncm_verify.reference.ncm.concept_config import ConceptConfig
from ncm_verify.reference.ncm.generator import Generator

__all__ = [
    "ConceptModel",
    "make_concept_model",
    "concept_fingerprint",
    "generator_fingerprint",
    "codec_fingerprint",
    "save_concept_model",
    "load_concept_model",
]

CONFIG_METADATA = "ncm_concept_config"


@dataclasses.dataclass(frozen=True)
class _Seams:
    """Private decisions a planted bug may change; the reference's are the defaults."""

    prefix_k_stage: str = "rotated"
    prefix_rope_from_zero: bool = False
    prefix_train_mode: bool = False
    prefix_kv_dtype: mx.Dtype | None = None
    mask_leaks_next: bool = False
    cached_top_k_after_temperature: bool = False
    codebook_shift: int = 0
    cache_key_with_codec: bool = True
    prefix_key_norm_gain: bool = True
    prefix_embed_bias: bool = True
    prefix_rope_table: int | None = None
    prefix_rope_in_model_dtype: bool = False
    prefix_chunk_rows: int | None = None
    cache_key_max_tokens: int | None = None


class ConceptModel(nn.Module):
    """The codec (stage 1) and the generator (stage 2) of one NCM."""

    def __init__(self, config: ConceptConfig, seams: _Seams = _Seams()):
        super().__init__()
        self.config = config
        self.codec = Codec(config)
        self.generator = Generator(config)
        self._seams = seams

    @property
    def layout(self):
        return self.config.layout

    def position_counts(self) -> list[int]:
        """Per generator layer, positions (batch x rows) processed since `reset_counts`."""
        return [layer.positions_processed for layer in self.generator.layers]

    def reset_counts(self) -> None:
        for layer in self.generator.layers:
            layer.positions_processed = 0


def _initial_value(name: str, shape: tuple[int, ...], key: mx.array) -> mx.array:
    if name.endswith("bias"):
        return mx.zeros(shape)
    if "norm" in name:
        return mx.ones(shape)
    # unit-variance tables, 1/sqrt(fan_in) projections: logits far from uniform
    table = len(shape) == 2 and any(part in name for part in ("embed", "positions", "codebooks"))
    return (1.0 if table else 1.0 / math.sqrt(shape[-1])) * mx.random.normal(shape, key=key)


def _parameters(module: nn.Module) -> list[tuple[str, mx.array]]:
    return cast(list[tuple[str, mx.array]], tree_flatten(module.parameters()))


def _seeded(module: nn.Module, seed: int) -> list[tuple[str, mx.array]]:
    shapes = dict((name, value.shape) for name, value in _parameters(module))
    names = sorted(shapes)
    keys = mx.random.split(mx.random.key(seed), len(names))
    return [(name, _initial_value(name, shapes[name], keys[i])) for i, name in enumerate(names)]


def _tie_codes(model: ConceptModel) -> None:
    """Give each level's last code the head row of its first (a dead code reseeded onto another)."""
    for head in model.generator.heads:
        head.weight = mx.concatenate([head.weight[:-1], head.weight[:1]])
        head.bias = mx.concatenate([head.bias[:-1], head.bias[:1]])


def make_concept_model(config: ConceptConfig, _seams: _Seams = _Seams()) -> ConceptModel:
    """A model in evaluation mode; the generator's weights depend on ``config.seed`` alone and
    the codec's on ``config.codec_seed`` alone."""
    model = ConceptModel(config, _seams)
    model.codec.update(tree_unflatten(_seeded(model.codec, config.codec_seed)))
    model.generator.update(tree_unflatten(_seeded(model.generator, config.seed)))
    if config.tied_codes:
        _tie_codes(model)
    model.set_dtype(config.mx_dtype)
    model.eval()
    mx.eval(model.parameters())
    return model


def _digest(module: nn.Module, header: str) -> str:
    digest = hashlib.sha256(header.encode())
    for name, value in sorted(_parameters(module), key=lambda item: item[0]):
        raw = value.view(mx.uint16) if value.dtype == mx.bfloat16 else value
        digest.update(f"{name}|{value.dtype}|{value.shape}|".encode())
        digest.update(np.asarray(raw).tobytes())
    return digest.hexdigest()


def _shape_json(config: ConceptConfig) -> str:
    # the seeds only make weights, which are hashed themselves: one stage's seed must not move the other's hash
    return json.dumps({k: v for k, v in json.loads(config.to_json()).items() if k not in ("seed", "codec_seed")})


def generator_fingerprint(model: ConceptModel) -> str:
    """sha256 of the config (seeds aside) and the generator's weights."""
    return _digest(model.generator, "generator|" + _shape_json(model.config))


def codec_fingerprint(model: ConceptModel) -> str:
    """sha256 of the config (seeds aside) and the codec's weights."""
    return _digest(model.codec, "codec|" + _shape_json(model.config))


def concept_fingerprint(model: ConceptModel) -> str:
    """The generator's and the codec's fingerprints together: what a cache key must hold."""
    return hashlib.sha256(f"{generator_fingerprint(model)}|{codec_fingerprint(model)}".encode()).hexdigest()


def save_concept_model(model: ConceptModel, path: str | Path) -> None:
    """Both stages' weights as safetensors, the config in the metadata."""
    mx.save_safetensors(str(path), dict(_parameters(model)), metadata={CONFIG_METADATA: model.config.to_json()})


def load_concept_model(path: str | Path, _seams: _Seams = _Seams()) -> ConceptModel:
    """The model saved at `path`, in evaluation mode; a ValueError naming `path` otherwise."""
    try:
        weights, metadata = cast(tuple[dict[str, mx.array], dict[str, str]], mx.load(str(path), return_metadata=True))
    except Exception as error:  # MLX raises RuntimeError or ValueError for unreadable files
        raise ValueError(f"path: {path} is not a readable safetensors checkpoint ({error})") from None
    if CONFIG_METADATA not in metadata:
        raise ValueError(f"path: {path} holds no {CONFIG_METADATA} metadata")
    model = ConceptModel(ConceptConfig.from_json(metadata[CONFIG_METADATA]), _seams)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as error:
        raise ValueError(f"path: {path} does not match its config ({error})") from None
    model.eval()
    mx.eval(model.parameters())
    return model
