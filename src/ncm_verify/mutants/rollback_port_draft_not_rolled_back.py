"""Planted bug: only the target is rolled back; the draft model's caches keep every rejected draft it ran (the
output stays exact, the draft's later proposals are conditioned on tokens that were never emitted)."""

from ncm_verify.mutants import with_rollback_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_rollback_step(draft_kept=lambda draft_y, drafts, accepted: None))
