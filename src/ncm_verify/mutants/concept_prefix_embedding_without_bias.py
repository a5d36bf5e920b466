"""Planted bug (PC-1 projects the prefix embeddings without the projection's bias; uncached adds it)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_embed_bias=False))
