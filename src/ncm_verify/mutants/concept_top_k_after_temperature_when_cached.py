"""Planted bug (cached generation applies the temperature, then a top-k that keeps ties; uncached top-k first)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(cached_top_k_after_temperature=True))
