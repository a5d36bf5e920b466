"""SpecInfer's MSS over a token *trie*: siblings that drew the same token are one node, verified once.

Followed: Miao et al., "SpecInfer" (arXiv:2305.09781): its token tree merges the SSMs' sequences
into one tree (a trie), verified by Algorithm 2's MSS; the rule is ``SpecInferRule(merge=True)`` in
:mod:`ncm_verify.peers.tree_rules`. Targets ``with_replacement`` children (a repeated token is
skipped: never accepted, no residual update). ``--impl ncm_verify.peers.specinfer_merged``.
"""

from ncm_verify.peers.tree_rules import CAPABILITIES, SpecInferRule, tree_kernels, written_from

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "versions", "verify_tree", "apply_tree", "draw_uniforms"]

ACCEPTANCE_RULE = "the rule ignores `mode`: it is the paper's, judged for children drawn i.i.d. from q"

verify_tree, apply_tree, draw_uniforms = tree_kernels(SpecInferRule(merge=True))
versions = written_from("SpecInfer's paper (Algorithm 2, MSS), over a trie")
