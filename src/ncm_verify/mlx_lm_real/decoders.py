"""The decoders the mlx-lm properties judge (the known upstream bugs they find: `known_bugs`).

A decoder is a module with `DECODER_NAMES`: mlx-lm itself, or the exact
verifier with mlx-lm's call shape.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ncm_verify.mlx_lm_real.implementation import DECODER_NAMES

DECODERS = {
    "mlx-lm": "ncm_verify.mlx_lm_real.implementation",
    "exact verifier": "ncm_verify.mlx_lm_real.exact_verifier",
}
"""Decoder name -> module; the first is mlx-lm's real code."""


def load_decoder(name: str | ModuleType) -> ModuleType:
    """The decoder module `name` (a key of `DECODERS`, a module path or a module), checked for `DECODER_NAMES`."""
    module = name if isinstance(name, ModuleType) else importlib.import_module(DECODERS.get(name, name))
    missing = [attr for attr in DECODER_NAMES if not callable(getattr(module, attr, None))]
    if missing:
        raise ValueError(f"decoder: module {module.__name__!r} lacks {', '.join(missing)}")
    return module
