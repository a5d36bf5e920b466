"""Planted bug (PC-1 normalises the cached prefix keys with QK-norm's RMS but not its gain; uncached keeps it)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_key_norm_gain=False))
