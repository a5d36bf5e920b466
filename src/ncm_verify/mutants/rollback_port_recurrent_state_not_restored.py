"""Planted bug: after a partial accept the rollback restores every cache but the recurrent state (slot 1 of each
`ArraysCache`), which keeps the rejected drafts folded in; the accepted tokens are replayed on top of it."""

from ncm_verify.mutants import recurrent_layers, with_rollback_step
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.drafting.rollback import restore_caches


def restore_but_the_recurrent_state(caches, saved):
    layers = [layer for layer in recurrent_layers(caches) if len(layer.cache) > 1]
    live = [layer.cache[1] for layer in layers]
    restore_caches(caches, saved)
    for layer, state in zip(layers, live, strict=True):
        layer.cache[1] = state


globals().update(with_rollback_step(restore=restore_but_the_recurrent_state))
