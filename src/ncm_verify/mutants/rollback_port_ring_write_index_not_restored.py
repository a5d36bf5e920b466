"""Planted bug: the rollback restores each sliding-window ring's buffers and offset but leaves its write index
(`_idx`) where the rejected drafts moved it, so the replayed tokens land in the wrong slots."""

from mlx_lm.models import cache as mlx_lm_cache  # the reference's names include a RotatingKVCache of its own

from ncm_verify.mutants import with_rollback_step
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.drafting.rollback import restore_caches


def restore_but_the_write_index(caches, saved):
    rings = [cache for cache in caches if isinstance(cache, mlx_lm_cache.RotatingKVCache)]
    live = [ring._idx for ring in rings]
    restore_caches(caches, saved)
    for ring, index in zip(rings, live, strict=True):
        ring._idx = index


globals().update(with_rollback_step(restore=restore_but_the_write_index))
