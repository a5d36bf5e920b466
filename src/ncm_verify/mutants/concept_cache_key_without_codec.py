"""Planted bug (PC-1's cross-request key holds the generator's fingerprint, not the codec's)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(cache_key_with_codec=False))
