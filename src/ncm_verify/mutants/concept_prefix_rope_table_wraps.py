"""Planted bug (PC-1 rotates the cached prefix from a 4096-entry rotary table, positions wrapped modulo 4096)."""

from ncm_verify.mutants import with_concept_seams
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_concept_seams(prefix_rope_table=4096))
