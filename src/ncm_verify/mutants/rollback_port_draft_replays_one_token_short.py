"""Planted bug: the draft model's rollback replays one accepted token too few, so its caches' offset ends one
position short of the target's after every rejection."""

from ncm_verify.mutants import with_rollback_step
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference.drafting.speculative_step import draft_kept


def draft_kept_one_short(draft_y, drafts, accepted):
    kept = draft_kept(draft_y, drafts, accepted)
    return None if kept is None else kept[:-1]


globals().update(with_rollback_step(draft_kept=draft_kept_one_short))
