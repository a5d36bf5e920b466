"""Planted bug (PC-1 caches each layer's prefix K after QK-norm but before the rotation)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_k_stage="normed"))
