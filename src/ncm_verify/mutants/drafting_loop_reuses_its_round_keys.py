"""Planted bug: the drafting loop never advances its key, so every round's drafter and verify_chain draw with the
first round's keys: each call is exact, the rounds' acceptances are correlated."""

import mlx.core as mx

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_drafting_step(round_keys=lambda key: (key, *mx.random.split(key, 2))))
