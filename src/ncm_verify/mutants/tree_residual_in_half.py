"""Planted bug: for half-precision inputs the tree walk keeps its residual in that precision between siblings.

Each rejection rounds max(r - q_i, 0) and its mass to the inputs' dtype (float16 or bfloat16), as a port that
computes in the inputs' dtype would; float32 inputs are walked exactly as the reference walks them.
"""

import mlx.core as mx

from ncm_verify.mutants import names_of
from ncm_verify.reference import *  # noqa: F401,F403
from ncm_verify.reference._kernels.factory import Kernels
from ncm_verify.reference._kernels.tree import renormalised_residual, walk

HALF = (mx.float16, mx.bfloat16)


def rounded_update(dtype):
    def update(weights, mass, q_i):
        rest, left = renormalised_residual(weights, mass, q_i)
        return rest.astype(dtype).astype(mx.float32), left.astype(dtype).astype(mx.float32)

    return update


def walk_rounded(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, *, mode, rules):
    if target_probs.dtype in HALF:
        rules = rules._replace(update=rounded_update(target_probs.dtype))
    return walk(target_probs, draft_probs, tree_tokens, parents, num_nodes, uniforms, mode=mode, rules=rules)


globals().update(names_of(Kernels(tree_step=walk_rounded), ("apply_tree", "verify_tree")))
