"""Planted bug: after verification the drafter's cache keeps the entries its drafting left past the context."""

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_drafting_step(drafter_kept=lambda read, offset: offset))
