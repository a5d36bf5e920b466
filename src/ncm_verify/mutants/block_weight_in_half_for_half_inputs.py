"""Planted bug: for float16 or bfloat16 rows block verification keeps its prefix weight w = min(w p / q, 1) in
that half precision between drafts (float32 rows are verified right)."""

import mlx.core as mx

from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.block import BLOCK_RULES, prefix_weight
from ncm_verify.reference._kernels.factory import Kernels

HALF = (mx.float16, mx.bfloat16)


def _rounded_weight(dtype):
    def weight(previous, p_x, q_x):
        return prefix_weight(previous, p_x, q_x).astype(dtype).astype(mx.float32)

    return weight


_RIGHT = Kernels()
_ROUNDED = {dtype: Kernels(block_rules=BLOCK_RULES._replace(weight=_rounded_weight(dtype))) for dtype in HALF}


def _kernels(target_probs) -> Kernels:
    return _ROUNDED.get(target_probs.dtype, _RIGHT)


def apply_block(target_probs, *args, **kwargs):
    return _kernels(target_probs).apply_block(target_probs, *args, **kwargs)


def verify_block(target_probs, *args, **kwargs):
    return _kernels(target_probs).verify_block(target_probs, *args, **kwargs)
