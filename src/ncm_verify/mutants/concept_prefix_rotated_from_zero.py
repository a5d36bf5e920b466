"""Planted bug (PC-1 rotates the cached prefix keys from position 0 whatever the request's start)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_rope_from_zero=True))
