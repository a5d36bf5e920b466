"""Planted bug (PC-1 computes the prefix's rotary angles in the model's dtype, uncached in float32: half only)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_rope_in_model_dtype=True))
