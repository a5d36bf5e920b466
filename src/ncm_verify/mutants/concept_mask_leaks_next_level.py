"""Planted bug (the block-diagonal mask lets each level's rows see the next level)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(mask_leaks_next=True))
