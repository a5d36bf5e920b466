"""Planted bug (the codec's decode reads level l's codes with level l-1's codebook)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(codebook_shift=1))
