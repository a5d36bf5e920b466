"""Tiny hybrid mlx-lm models: attention mixed with recurrent and sliding-window layers, mlx-lm's own classes.

A `HybridSpec` names an mlx-lm architecture and a layer pattern, one letter a
layer: ``A`` full attention (`KVCache`), ``R`` recurrent (`ArraysCache`:
convolution state, and for qwen3_next and mamba2 a recurrent state too),
``S`` sliding-window attention (`RotatingKVCache` of `window` entries, which
wraps once more tokens than that have passed), ``H`` a falcon_h1 layer
(mamba and attention side by side: `CacheList(ArraysCache, KVCache)`). Weights come from the seed
alone, so a failing example reproduces from its printed spec. The caches are
the model's own (`mlx_lm.models.cache.make_prompt_cache`).
"""

from __future__ import annotations

import dataclasses

import mlx.nn as nn
from mlx_lm.models import falcon_h1, gemma4_text, lfm2, llama, mamba2, qwen3_next
from mlx_lm.models.cache import RotatingKVCache, make_prompt_cache

from ncm_verify.mlx_lm_real.models import apply_seeded_weights

PATTERNS = {
    "qwen3_next": ("RA", "RRA", "RARA"),
    "lfm2": None,
    "mamba2": None,
    "gemma4_text": None,
    "llama": None,
    "falcon_h1": None,
}
"""Architecture -> the layer patterns it can express (None: any string over its letters)."""
LETTERS = {"qwen3_next": "RA", "lfm2": "RA", "mamba2": "R", "gemma4_text": "AS", "llama": "AS", "falcon_h1": "H"}
"""Architecture -> the layer kinds it has: recurrent (R), full attention (A), sliding window (S), both (H)."""
HYBRID_KINDS = tuple(LETTERS)
NEEDS = {"qwen3_next": "A", "lfm2": "A", "mamba2": "", "gemma4_text": "", "llama": "A", "falcon_h1": ""}
"""Architecture -> the layers mlx-lm's model cannot do without (it takes its attention mask from the first A)."""
REQUIRED = {kind: "".join(sorted(set(NEEDS[kind]) | {LETTERS[kind].strip("A")[0]})) for kind in LETTERS}
"""Architecture -> the letters every drawn pattern holds: a recurrent or sliding layer, and what mlx-lm needs."""
DRAWN = {kind: (LETTERS[kind], REQUIRED[kind], PATTERNS[kind]) for kind in HYBRID_KINDS}
"""What `strategies.hybrid_specs` draws from: kind -> (letters, required letters, fixed patterns or None)."""


@dataclasses.dataclass(frozen=True)
class HybridSpec:
    """A tiny mlx-lm model: `kind` in `HYBRID_KINDS`, `layers` a pattern over its letters, vocabulary 8-32."""

    kind: str = "lfm2"
    layers: str = "RA"
    vocab_size: int = 16
    seed: int = 0
    window: int = 3
    keep: int = 0
    hidden_size: int = 16
    logit_scale: float = 3.0

    def __post_init__(self):
        if self.kind not in LETTERS:
            raise ValueError(f"kind: expected one of {HYBRID_KINDS}, got {self.kind!r}")
        if not self.layers or set(self.layers) - set(LETTERS[self.kind]):
            raise ValueError(f"layers: {self.kind} layers are letters of {LETTERS[self.kind]!r}, got {self.layers!r}")
        if PATTERNS[self.kind] is not None and self.layers not in PATTERNS[self.kind]:
            raise ValueError(f"layers: {self.kind} expresses {PATTERNS[self.kind]}, got {self.layers!r}")
        if not 8 <= self.vocab_size <= 32:
            raise ValueError(f"vocab_size: expected an integer in [8, 32], got {self.vocab_size!r}")
        if self.window < 1:
            raise ValueError(f"window: expected a positive integer, got {self.window!r}")
        if set(NEEDS[self.kind]) - set(self.layers):
            raise ValueError(f"layers: mlx-lm's {self.kind} needs layers {NEEDS[self.kind]!r}, got {self.layers!r}")
        if self.keep and not (self.kind == "llama" and self.layers.endswith("S") and 0 < self.keep < self.window):
            raise ValueError(
                f"keep: a keep prefix (0 < keep < window) is for a llama whose last layer is sliding, got {self!r}"
            )

    def with_seed(self, seed: int) -> HybridSpec:
        return dataclasses.replace(self, seed=seed)


def _qwen3_next(spec: HybridSpec) -> nn.Module:
    # is_linear = (i + 1) % interval != 0: "RA" and "RARA" are interval 2, "RRA" 3
    interval = {"RA": 2, "RARA": 2, "RRA": 3}[spec.layers]
    return qwen3_next.Model(
        qwen3_next.ModelArgs(
            model_type="qwen3_next",
            hidden_size=spec.hidden_size,
            num_hidden_layers=len(spec.layers),
            intermediate_size=2 * spec.hidden_size,
            num_attention_heads=2,
            linear_num_value_heads=2,
            linear_num_key_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=3,
            num_experts=0,
            num_experts_per_tok=1,
            decoder_sparse_step=1,
            shared_expert_intermediate_size=2 * spec.hidden_size,
            mlp_only_layers=list(range(len(spec.layers))),
            moe_intermediate_size=2 * spec.hidden_size,
            rms_norm_eps=1e-5,
            vocab_size=spec.vocab_size,
            num_key_value_heads=1,
            rope_theta=10000.0,
            partial_rotary_factor=0.5,
            max_position_embeddings=512,
            head_dim=8,
            full_attention_interval=interval,
        )
    )


def _lfm2(spec: HybridSpec) -> nn.Module:
    return lfm2.Model(
        lfm2.ModelArgs(
            model_type="lfm2",
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            num_hidden_layers=len(spec.layers),
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=512,
            norm_eps=1e-5,
            conv_bias=False,
            conv_L_cache=3,
            block_dim=spec.hidden_size,
            block_multiple_of=8,
            block_ffn_dim_multiplier=1.0,
            block_auto_adjust_ff_dim=False,
            block_ff_dim=2 * spec.hidden_size,
            layer_types=["conv" if c == "R" else "full_attention" for c in spec.layers],
        )
    )


def _mamba2(spec: HybridSpec) -> nn.Module:
    return mamba2.Model(
        mamba2.ModelArgs(
            model_type="mamba2",
            num_heads=2,
            head_dim=8,
            vocab_size=spec.vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.hidden_size,
            state_size=4,
            num_hidden_layers=len(spec.layers),
            layer_norm_epsilon=1e-5,
            conv_kernel=3,
            n_groups=1,
            use_bias=False,
            use_conv_bias=True,
            tie_word_embeddings=False,
            time_step_limit=(0.0, float("inf")),
            time_step_rank="auto",
        )
    )


def _gemma4_text(spec: HybridSpec) -> nn.Module:
    return gemma4_text.Model(
        gemma4_text.ModelArgs(
            hidden_size=spec.hidden_size,
            num_hidden_layers=len(spec.layers),
            intermediate_size=2 * spec.hidden_size,
            num_attention_heads=2,
            head_dim=8,
            global_head_dim=8,
            num_key_value_heads=1,
            num_kv_shared_layers=0,
            vocab_size=spec.vocab_size,
            vocab_size_per_layer_input=spec.vocab_size,
            hidden_size_per_layer_input=0,
            sliding_window=spec.window,
            layer_types=["sliding_attention" if c == "S" else "full_attention" for c in spec.layers],
            use_double_wide_mlp=False,
        )
    )


def _llama(spec: HybridSpec) -> nn.Module:
    return llama.Model(
        llama.ModelArgs(
            model_type="llama",
            hidden_size=spec.hidden_size,
            num_hidden_layers=len(spec.layers),
            intermediate_size=2 * spec.hidden_size,
            num_attention_heads=2,
            rms_norm_eps=1e-5,
            vocab_size=spec.vocab_size,
            tie_word_embeddings=False,
            layer_types=["sliding_attention" if c == "S" else "full_attention" for c in spec.layers],
            sliding_window=spec.window,
        )
    )


def _falcon_h1(spec: HybridSpec) -> nn.Module:
    return falcon_h1.Model(
        falcon_h1.ModelArgs(
            head_dim=8,
            hidden_size=spec.hidden_size,
            intermediate_size=2 * spec.hidden_size,
            mamba_d_conv=3,
            mamba_d_head=8,
            mamba_d_ssm=spec.hidden_size,
            mamba_d_state=4,
            mamba_n_heads=spec.hidden_size // 8,
            mamba_chunk_size=4,
            num_attention_heads=2,
            num_hidden_layers=len(spec.layers),
            num_key_value_heads=1,
            vocab_size=spec.vocab_size,
        )
    )


BUILDERS = {
    "qwen3_next": _qwen3_next,
    "lfm2": _lfm2,
    "mamba2": _mamba2,
    "gemma4_text": _gemma4_text,
    "llama": _llama,
    "falcon_h1": _falcon_h1,
}


def make_hybrid_cache(model: nn.Module, spec: HybridSpec) -> list:
    """mlx-lm's own caches for `model`; with `spec.keep`, the last layer's ring keeps that prefix.

    Only the last layer: mlx-lm's multi-token mask over a keep ring lets no query
    but the first see the keep prefix, so a keep ring's outputs depend on how
    the tokens were chunked, and a layer after it would too (docs/rollback.md).
    """
    caches = make_prompt_cache(model)
    if spec.keep:
        caches[-1] = RotatingKVCache(max_size=spec.window, keep=spec.keep)
    return caches


def make_hybrid_model(spec: HybridSpec) -> nn.Module:
    """mlx-lm's `spec.kind` model with `spec.layers`, float32 weights from `spec.seed` alone, evaluation mode."""
    return apply_seeded_weights(BUILDERS[spec.kind](spec), spec.seed, spec.logit_scale)
