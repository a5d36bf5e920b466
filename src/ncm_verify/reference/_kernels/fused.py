"""Input validation in one fused pass and one host sync; input it doubts goes to the stepwise `checks`."""

from __future__ import annotations

import functools
from collections.abc import Callable

import mlx.core as mx

from ncm_verify.reference._kernels.arrays import (
    PAD_TOKEN,
    drafted_columns,
    gather_drafted,
    size_operand,
)
from ncm_verify.reference._kernels.checks import (
    check_chain_inputs_stepwise,
    check_factorized_inputs_stepwise,
    check_floating,
    check_greedy_inputs_stepwise,
    check_ids_type,
    check_shape,
    draft_lengths_of,
    lengths_valid,
    valid_rows,
)
from ncm_verify.tolerances import normalisation_for


def ids_valid(draft_tokens, is_draft, vocab: int) -> mx.array:
    """Every id in [0, V), or -1 where not `is_draft`: one lazy boolean."""
    ids = draft_tokens.astype(mx.int64)
    return mx.all(mx.where(is_draft, ids >= 0, ids >= PAD_TOKEN) & (ids < size_operand(vocab)))


def drafted_values_valid(target_probs, draft_probs, draft_tokens, is_draft) -> mx.array:
    """Rows valid, ids in [0, V) (or -1 where not `is_draft`), each drafted one with q > 0: one lazy boolean."""
    vocab = target_probs.shape[-1]
    ok = valid_rows("target_probs", target_probs) & valid_rows("draft_probs", draft_probs)
    ok = ok & ids_valid(draft_tokens, is_draft, vocab)
    # Ids are clamped so that a flag over bad ids stays a flag, never an out-of-range read.
    clipped = mx.clip(draft_tokens.astype(mx.int64), 0, size_operand(vocab - 1))
    q_x = gather_drafted(draft_probs, clipped.astype(mx.int32))
    return ok & mx.all(mx.where(is_draft, q_x > 0, True))


def chain_values_valid(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Every value check of chain input as one lazy boolean (types and shapes already checked)."""
    max_draft = target_probs.shape[1] - 1
    is_draft = drafted_columns(num_draft, max_draft)
    return lengths_valid(num_draft, max_draft) & drafted_values_valid(target_probs, draft_probs, draft_tokens, is_draft)


def greedy_values_valid(target, draft_tokens, num_draft) -> mx.array:
    """Every value check of greedy input as one lazy boolean: no NaN score, lengths and ids in range."""
    max_draft = target.shape[1] - 1
    is_draft = drafted_columns(num_draft, max_draft)
    ok = mx.all(~mx.isnan(target)) & lengths_valid(num_draft, max_draft)
    return ok & ids_valid(draft_tokens, is_draft, target.shape[-1])


CHAIN_VALUES_VALID = mx.compile(chain_values_valid)
"""Compiled once: one fused pass whose one host sync answers every value check."""


FACTORIZED_VALUES_VALID = mx.compile(functools.partial(drafted_values_valid, is_draft=True))
"""Factorised input has no padding: every position is drafted."""


GREEDY_VALUES_VALID = mx.compile(greedy_values_valid)


def check_row_types(target_probs, draft_probs, draft_tokens, drafts_fewer: int) -> None:
    """Types and shapes of target and draft rows ``[B, R, V]`` / ``[B, R - drafts_fewer, V]`` and their ids.

    A dtype without a tolerance raises here, not inside a compiled trace.
    """
    check_floating("target_probs", target_probs, 3, "probabilities")
    batch, rows, vocab = target_probs.shape
    check_floating("draft_probs", draft_probs, 3, "probabilities")
    check_shape("draft_probs", draft_probs, (batch, rows - drafts_fewer, vocab))
    for name, probs in (("target_probs", target_probs), ("draft_probs", draft_probs)):
        normalisation_for(name, probs.dtype)
    check_ids_type("draft_tokens", draft_tokens, (batch, rows - drafts_fewer))


def checked_in_one_pass(fused: Callable[[], tuple], stepwise: Callable[[], object]):
    """`fused()`'s result when its lazy flag says every value is valid (one host sync), else `stepwise()`'s.

    The stepwise checks name the first problem in argument order; input the fused pass doubts goes there.
    """
    try:
        result, ok = fused()
        if ok.item():
            return result
    except ValueError:
        pass
    return stepwise()


def chain_input_flags(target_probs, draft_probs, draft_tokens, num_draft) -> tuple[mx.array, mx.array]:
    """Check chain input's types and shapes; returns the draft lengths and a lazy "all values valid".

    Raises the stepwise checks' ValueError on a type or shape problem.
    """
    check_row_types(target_probs, draft_probs, draft_tokens, 1)
    batch, rows = target_probs.shape[:2]
    lengths = draft_lengths_of(num_draft, batch, rows - 1)
    return lengths.astype(mx.int32), CHAIN_VALUES_VALID(target_probs, draft_probs, draft_tokens, lengths)


def check_chain_inputs(target_probs, draft_probs, draft_tokens, num_draft) -> mx.array:
    """Validate chain input in one fused pass and one host sync; returns the draft lengths."""
    arguments = (target_probs, draft_probs, draft_tokens, num_draft)
    return checked_in_one_pass(
        functools.partial(chain_input_flags, *arguments), functools.partial(check_chain_inputs_stepwise, *arguments)
    )


def check_greedy_inputs(target, draft_tokens, num_draft) -> mx.array:
    """Validate greedy input in one fused pass and one host sync; returns the draft lengths."""

    def fused() -> tuple[mx.array, mx.array]:
        check_floating("target", target, 3, "scores")
        batch, rows = target.shape[:2]
        check_ids_type("draft_tokens", draft_tokens, (batch, rows - 1))
        lengths = draft_lengths_of(num_draft, batch, rows - 1)
        return lengths.astype(mx.int32), GREEDY_VALUES_VALID(target, draft_tokens, lengths)

    return checked_in_one_pass(fused, functools.partial(check_greedy_inputs_stepwise, target, draft_tokens, num_draft))


def check_factorized_inputs(target_probs, draft_probs, draft_tokens) -> None:
    """Validate factorised input in one fused pass and one host sync."""

    def fused() -> tuple[None, mx.array]:
        check_row_types(target_probs, draft_probs, draft_tokens, 0)
        return None, FACTORIZED_VALUES_VALID(target_probs, draft_probs, draft_tokens)

    checked_in_one_pass(
        fused, functools.partial(check_factorized_inputs_stepwise, target_probs, draft_probs, draft_tokens)
    )
