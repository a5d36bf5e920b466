"""Planted bug (PC-1 computes the prefix K/V in chunks of 3 rows and joins the chunks last first: rows mix past 3)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_chunk_rows=3))
