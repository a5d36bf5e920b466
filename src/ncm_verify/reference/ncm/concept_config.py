"""The source's NCM (arXiv 2610.14162 as ported by janmus1c/ncm-mlx): its configuration, layout,
the generator's mask as data, and the cache schedule it declares.

The model is two stages. A codec (VQ-VAE) maps ``sequence_length`` tokens to L levels of codes,
level l holding ``level_lengths[l]`` positions, each a code of that level's own codebook
(``codebook_sizes[l]`` entries); its decoder turns the codes back into per-position token logits.
A generator predicts every position of level l in parallel, one forward per level, from a prefix of
token ids (any length) and the coarser levels' codes.

Where the public text is ambiguous, each reading is a named variant (a config field):

- ``mask`` -- what level l's block sees under ``block_diagonal``:
  ``"block_diagonal_own"``: the prefix and its own level; coarser levels enter only through
  the level's inputs (one forward runs the prefix and level l's rows).
  ``"block_diagonal_upto"``: the prefix and every level up to its own (one forward runs the
  prefix and levels 0..l; the earlier levels' rows are what the named extension caches).
- ``level_input`` -- how the coarser levels enter level l's input rows:
  ``"reconstruction"``: the codec's cumulative reconstruction of levels < l, pooled to level l's
  length and projected (VAR-style); ``"previous_codes"``: the generator's own embedding of level
  l-1's codes, upsampled to level l's length. Level 0's rows hold the level embedding alone.

Positions are rotary: the prefix occupies positions ``start .. start+P-1`` and level l's position
i sits at ``start + P + offset_l + i`` (its place in the full layout), under either reading.

Public API: `ConceptConfig`, `ConceptLayout`, `MASK_READINGS`, `INPUT_READINGS`, `CACHE_MODES`,
`concept_mask` (the full layout's boolean mask, rows attend to columns), `level_offsets`,
`forward_levels` (the levels one forward of level l runs), `cache_schedule` (positions per layer
each forward processes, per batch row, under a cache mode), `kv_bytes_per_position`.
"""

from __future__ import annotations

import dataclasses
import json

import mlx.core as mx
import numpy as np

__all__ = [
    "MASK_READINGS",
    "INPUT_READINGS",
    "CACHE_MODES",
    "CONCEPT_DTYPES",
    "ConceptLayout",
    "ConceptConfig",
    "level_offsets",
    "forward_levels",
    "concept_mask",
    "cache_schedule",
    "kv_bytes_per_position",
]

MASK_READINGS = ("block_diagonal_own", "block_diagonal_upto")
INPUT_READINGS = ("reconstruction", "previous_codes")
CACHE_MODES = ("uncached", "pc1", "pc1_levels")
"""``uncached``: every level's forward recomputes the prefix; ``pc1``: the source's PC-1, prefix
K/V once per generation, served to every level; ``pc1_levels``: the named extension, the earlier
levels' K/V kept too (differs from ``pc1`` only under ``block_diagonal_upto``)."""
CONCEPT_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


@dataclasses.dataclass(frozen=True)
class ConceptLayout:
    """What a checkpoint's properties need to know of its shape, and nothing of its network."""

    prefix_length: int
    level_lengths: tuple[int, ...]
    codebook_sizes: tuple[int, ...]
    vocab_size: int
    sequence_length: int

    @property
    def num_levels(self) -> int:
        return len(self.level_lengths)


@dataclasses.dataclass(frozen=True)
class ConceptConfig:
    """Sizes, readings, dropout and seeds of the reference NCM; ``prefix_length`` is the layout's
    default (a fixed checkpoint's), the functions take a prefix of any length."""

    vocab_size: int = 16
    sequence_length: int = 8
    level_lengths: tuple[int, ...] = (1, 2, 4, 8)
    codebook_sizes: tuple[int, ...] = (8, 8, 8, 8)
    prefix_length: int = 4
    codec_dim: int = 16
    d_model: int = 32
    num_heads: int = 2
    num_layers: int = 2
    mask: str = "block_diagonal_own"
    level_input: str = "reconstruction"
    dropout: float = 0.0
    rope_base: float = 10000.0
    tied_codes: bool = False
    seed: int = 0
    codec_seed: int = 0
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "level_lengths", tuple(int(n) for n in self.level_lengths))
        object.__setattr__(self, "codebook_sizes", tuple(int(k) for k in self.codebook_sizes))
        _validate(self)

    @property
    def layout(self) -> ConceptLayout:
        return ConceptLayout(
            self.prefix_length, self.level_lengths, self.codebook_sizes, self.vocab_size, self.sequence_length
        )

    @property
    def mx_dtype(self) -> mx.Dtype:
        return CONCEPT_DTYPES[self.dtype]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ConceptConfig:
        fields = json.loads(text)
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(f"config: unknown fields {unknown}")
        return cls(**fields)


def _validate(config: ConceptConfig) -> None:
    for name in ("vocab_size", "sequence_length", "prefix_length", "codec_dim", "d_model", "num_heads", "num_layers"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    if not config.level_lengths:
        raise ValueError("level_lengths: expected at least one level")
    if len(config.codebook_sizes) != len(config.level_lengths):
        raise ValueError(
            f"codebook_sizes: expected one size per level ({len(config.level_lengths)}), got {config.codebook_sizes}"
        )
    for n in config.level_lengths:
        if n < 1 or config.sequence_length % n:
            raise ValueError(f"level_lengths: each must divide sequence_length {config.sequence_length}, got {n}")
    if any(k < 2 for k in config.codebook_sizes):
        raise ValueError(f"codebook_sizes: expected sizes >= 2, got {config.codebook_sizes}")
    if config.d_model % config.num_heads or (config.d_model // config.num_heads) % 2:
        raise ValueError(f"num_heads: d_model {config.d_model} must split into heads of even width")
    if config.mask not in MASK_READINGS:
        raise ValueError(f"mask: expected one of {MASK_READINGS}, got {config.mask!r}")
    if config.level_input not in INPUT_READINGS:
        raise ValueError(f"level_input: expected one of {INPUT_READINGS}, got {config.level_input!r}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {config.dropout!r}")
    if config.dtype not in CONCEPT_DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(CONCEPT_DTYPES)}, got {config.dtype!r}")


def level_offsets(level_lengths) -> tuple[int, ...]:
    """Where each level starts among the level rows (after the prefix)."""
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(level_lengths)[:-1]]))


def forward_levels(mask: str, level: int) -> tuple[int, ...]:
    """The levels whose rows one forward of `level` runs (after the prefix's)."""
    return (level,) if mask == "block_diagonal_own" else tuple(range(level + 1))


def _blocks(prefix_length: int, level_lengths) -> np.ndarray:
    return np.concatenate([np.full(prefix_length, -1)] + [np.full(n, i) for i, n in enumerate(level_lengths)])


def concept_mask(mask: str, prefix_length: int, level_lengths, *, leak_next: bool = False) -> np.ndarray:
    """``[R, R]`` booleans over ``prefix + levels`` rows, True where a row attends to a column.

    Prefix rows see the prefix (bidirectional); level l's rows see the prefix and level l
    (``block_diagonal_own``) or the prefix and levels <= l (``block_diagonal_upto``).
    """
    if mask not in MASK_READINGS:
        raise ValueError(f"mask: expected one of {MASK_READINGS}, got {mask!r}")
    blocks = _blocks(prefix_length, level_lengths)
    row, col = blocks[:, None], blocks[None, :]
    if mask == "block_diagonal_own":
        allowed = (col == -1) | (col == row)
    else:
        allowed = col <= row
    if leak_next:
        allowed = allowed | ((row >= 0) & (col == row + 1))
    return allowed & ((row >= 0) | (col == -1))


def cache_schedule(config: ConceptConfig, prefix_length: int, mode: str) -> tuple[int, ...]:
    """Positions each layer processes per batch row, forward by forward, in a generation under
    `mode` (a cached mode's first entry is its prefix pass; a prefix served from a cross-request
    cache skips it)."""
    if mode not in CACHE_MODES:
        raise ValueError(f"mode: expected one of {CACHE_MODES}, got {mode!r}")
    lengths = config.level_lengths
    rows = [sum(lengths[j] for j in forward_levels(config.mask, level)) for level in range(len(lengths))]
    if mode == "uncached":
        return tuple(prefix_length + r for r in rows)
    if mode == "pc1":
        return (prefix_length, *rows)
    return (prefix_length, *lengths)


def kv_bytes_per_position(config: ConceptConfig) -> int:
    """Bytes of K and V, over all layers, that one cached position holds."""
    return config.num_layers * 2 * config.d_model * config.mx_dtype.size
