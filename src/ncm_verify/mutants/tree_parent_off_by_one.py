"""Planted bug: the kernel reads each node's parent index one too low (a child of node k hangs under k - 1)."""

import mlx.core as mx

from ncm_verify.mutants import with_tree_rule
from ncm_verify.reference import *  # noqa: F401,F403

globals().update(with_tree_rule(parents=lambda parents: mx.where(parents >= 0, parents - 1, parents)))
