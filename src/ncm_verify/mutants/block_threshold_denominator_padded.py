"""Planted bug: block verification adds 1e-6 to each threshold's denominator, h = rho / (rho + 1 - w + 1e-6), an
epsilon against division by zero that moves h by about 1e-6 of itself."""

import mlx.core as mx

from ncm_verify.mutants import with_block_rule
from ncm_verify.reference import *  # noqa: F401,F403


def padded_threshold(mass, weight):
    denominator = mass + (1.0 - weight)
    return mx.where(denominator > 0, mass / (denominator + 1e-6), 1.0)


globals().update(with_block_rule(threshold=padded_threshold))
