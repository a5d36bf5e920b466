"""Planted bug: after a rejection the target's cache is trimmed one position too far, so its next
conditionals lack the last accepted token (one token stale)."""

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(
    with_drafting_step(target_kept=lambda context_length, accepted, drafted: context_length - 1 - (accepted < drafted))
)
