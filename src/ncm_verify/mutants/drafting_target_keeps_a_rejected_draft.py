"""Planted bug: after a rejection the target's cache keeps one position too many, the rejected draft's K/V, so
every later round's conditionals read it before the correction."""

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(
    with_drafting_step(target_kept=lambda context_length, accepted, drafted: context_length - 1 + (accepted < drafted))
)
