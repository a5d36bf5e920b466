"""Planted bug (PC-1's cross-request key holds only the prefix's first 16 tokens: longer prefixes alias)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(cache_key_max_tokens=16))
