"""Planted bug: position i's residual max(w p - q, 0) (its mass in the thresholds, and the correction) taken with
w_i, the weight after its own draft, instead of w_{i-1}."""

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_block_rule(residual_weights=lambda weights: weights[:, 1:]))
