"""Planted bug: greedy verification breaks a tie between maxima toward the last index, not the first.

An argmax taken over the reversed row (or as the last index equal to the row's maximum) agrees
with the first-index argmax wherever a row's maximum is unique, so rows of distinct scores never
show it; tied scores (masked or quantised logits) do, and greedy decoding then drifts from the target's.
"""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.factory import Kernels


def last_argmax(scores: mx.array) -> mx.array:
    return scores.shape[-1] - 1 - mx.argmax(scores[..., ::-1], axis=-1)


verify_greedy = Kernels(argmax=last_argmax).verify_greedy
