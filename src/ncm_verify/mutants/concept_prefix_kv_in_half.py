"""Planted bug (PC-1 stores the prefix K/V in float16 while the uncached path runs in float32)."""

import mlx.core as mx

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_kv_dtype=mx.float16))
