"""Planted bug: the drafts are drawn at temperature T, but verify_chain is handed their rows at temperature 1."""

import mlx.core as mx

from ncm_verify.mutants import with_drafting_step
from ncm_verify.reference import *  # noqa: F401,F403


def _rows_at_temperature_one(drafter, block, context, temperature, features):
    rows = block.probs**temperature  # softmax(l / T) ** T is proportional to softmax(l)
    return rows / mx.sum(rows, axis=-1, keepdims=True)


globals().update(with_drafting_step(draft_rows=_rows_at_temperature_one))
