"""EAGLE / EAGLE-2's tree acceptance (``evaluate_posterior``, sampling branch), in NumPy, on the tree protocol.

Followed: github.com/SafeAILab/EAGLE at cb7e0841 (2026-02-19), eagle/model/utils.py,
``evaluate_posterior``: child x accepted iff ``random() <= gtp[x]`` (``qx = 1.0``), on rejection
``gtp[x] = 0`` renormalised, repeated tokens skipped, then a draw from gtp or from the accepted
leaf's target row. The rule is :class:`ncm_verify.peers.tree_rules.EagleRule`. Targets the
``top_k`` mode: EAGLE-2's dynamic tree (eagle/model/cnets.py, ``topK_genrate``) expands with
``torch.topk`` of the draft's log-probabilities, sampling or not, and its reranking by path score keeps
a most likely prefix of each node's children: deterministic children, a top k of q.
``--impl ncm_verify.peers.eagle``.
"""

from ncm_verify.peers.tree_rules import CAPABILITIES, EagleRule, tree_kernels, written_from

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "versions", "verify_tree", "apply_tree", "draw_uniforms"]

ACCEPTANCE_RULE = "the rule ignores `mode` and q: it verifies any children as if they were fixed"

verify_tree, apply_tree, draw_uniforms = tree_kernels(EagleRule())
versions = written_from("SafeAILab/EAGLE cb7e0841 (evaluate_posterior)")
