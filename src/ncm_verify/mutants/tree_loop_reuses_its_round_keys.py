"""Planted bug: the tree loop never advances its key, so every round's draft and verify_tree draw with the first
round's keys: each call is exact, the rounds' decisions are correlated."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_loop_step
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_loop_step(round_keys=lambda key: (key, *mx.random.split(key, 2))))
