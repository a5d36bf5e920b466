"""Each `make bench` step's quick grid (the default: the whole bench within 10 minutes on 2 cores) and full one
(`make bench GRID=full`): a step keeps its defaults per grid in a dict, and an option given on the command line
wins over its grid's. No MLX here: `bench.blas` parses its options before it chooses which BLAS to load."""

from __future__ import annotations

import argparse
from typing import Any

GRID_NAMES = ("quick", "full")


def add_grid_argument(parser: argparse.ArgumentParser, default: str | None = "quick") -> None:
    parser.add_argument(
        "--grid", choices=GRID_NAMES, default=default, help="quick (make bench, the default) or full (GRID=full)"
    )


def apply_grid(arguments: argparse.Namespace, defaults: dict[str, Any]) -> argparse.Namespace:
    """Fill each option left unset (None) with its grid's default; the namespace, changed in place."""
    for name, value in defaults.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, value)
    return arguments
