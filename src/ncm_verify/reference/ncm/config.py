"""The NCM configuration: layout, sizes, mask, dtype and seed, loadable from JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import mlx.core as mx

__all__ = [
    "FIXTURES",
    "NOTE_FIELDS",
    "DTYPES",
    "MASK_NAMES",
    "NCMConfig",
    "load_config",
    "fixture_fields",
]

# Package data: a link to the checkout's fixtures/ in the source tree, the files themselves in a wheel.
FIXTURES = Path(__file__).parents[2] / "data" / "fixtures"
NOTE_FIELDS = ("comment", "hierarchy")
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
MASK_NAMES = ("ncm", "prefix_lm", "causal", "full")


@dataclasses.dataclass(frozen=True)
class NCMConfig:
    """Sequence layout ``[prefix | level 1 | ... | level L]`` and network sizes.

    Token ids are ``0..vocab_size-1``; id ``vocab_size`` is the placeholder a
    level's slots hold before they are filled.
    """

    vocab_size: int
    prefix_length: int
    level_sizes: tuple[int, ...]
    codebook_size: int
    d_model: int
    num_heads: int
    num_layers: int
    mask: str = "ncm"
    dropout: float = 0.0
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "level_sizes", tuple(self.level_sizes))
        _validate_config(self)

    @property
    def placeholder(self) -> int:
        return self.vocab_size

    @property
    def total_length(self) -> int:
        return self.prefix_length + sum(self.level_sizes)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def mx_dtype(self) -> mx.Dtype:
        return DTYPES[self.dtype]

    def level_start(self, level: int) -> int:
        """Sequence index of the first slot of `level` (0-based)."""
        return self.prefix_length + sum(self.level_sizes[:level])

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "level_sizes": list(self.level_sizes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, fields: dict) -> NCMConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known - set(NOTE_FIELDS))
        if unknown:
            raise ValueError(f"config: unknown field(s) {', '.join(unknown)}")
        missing = sorted(
            f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in fields
        )
        if missing:
            raise ValueError(f"config: missing field(s) {', '.join(missing)}")
        return cls(**{name: value for name, value in fields.items() if name in known})

    @classmethod
    def from_json(cls, text: str) -> NCMConfig:
        return cls.from_dict(json.loads(text))


def load_config(path: str | Path) -> NCMConfig:
    """The config stored as JSON at `path` (fixtures may add "comment"/"hierarchy" notes)."""
    return NCMConfig.from_json(Path(path).read_text())


def _require_int(config: NCMConfig, name: str, minimum: int) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")


def _validate_config(config: NCMConfig) -> None:
    """Raise a ValueError naming the first invalid field of `config`."""
    for name, minimum in (
        ("vocab_size", 2),
        ("prefix_length", 1),
        ("codebook_size", 1),
        ("d_model", 1),
        ("num_heads", 1),
        ("num_layers", 1),
        ("seed", 0),
    ):
        _require_int(config, name, minimum)
    if not config.level_sizes or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in config.level_sizes
    ):
        raise ValueError(f"level_sizes: expected a non-empty list of integers >= 1, got {config.level_sizes!r}")
    if config.d_model % config.num_heads:
        raise ValueError(f"num_heads: {config.num_heads} does not divide d_model={config.d_model}")
    if config.mask not in MASK_NAMES:
        raise ValueError(f"mask: expected one of {', '.join(MASK_NAMES)}, got {config.mask!r}")
    if not isinstance(config.dropout, (int, float)) or not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {config.dropout!r}")
    if config.dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {config.dtype!r}")


def fixture_fields(name: str) -> dict:
    """The config fields of ``fixtures/<name>.json`` without its notes, for any config type."""
    path = FIXTURES / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"name: no fixture config {path}")
    return {key: value for key, value in json.loads(path.read_text()).items() if key not in NOTE_FIELDS}
