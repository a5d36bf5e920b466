"""Planted bug: each tree row is roped at the context length plus its row index, not plus its depth."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(
    with_tree_loop_step(positions=lambda depths, offset: mx.arange(offset, offset + len(depths) + 1, dtype=mx.int32))
)
