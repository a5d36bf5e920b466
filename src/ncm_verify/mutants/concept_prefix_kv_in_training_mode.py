"""Planted bug (PC-1 computes the prefix K/V in training mode (dropout active))."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_train_mode=True))
