"""Planted bug: after a changed level, the K/V its rejected draft left behind stay in both caches."""

from ncm_verify.mutants import with_level_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_level_step(surviving_levels=lambda accepted, emitted: emitted))
