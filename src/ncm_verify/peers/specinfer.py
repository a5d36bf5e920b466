"""SpecInfer's tree verification (multi-step speculative sampling, MSS), in NumPy, on the tree protocol.

Followed: Miao et al., "SpecInfer", ASPLOS'24 (arXiv:2305.09781), Algorithm 2 (VerifyStochastic)
and Theorem 4.2; the rule itself is :class:`ncm_verify.peers.tree_rules.SpecInferRule`.
Targets the ``with_replacement`` mode: each child drawn from the SSM's q, accepted with
min(1, r(x)/q(x)), r <- norm(max(r - q, 0)) on rejection. The paper visits children in a
random order; for i.i.d. children any fixed order has the same law, so this visits them by index.
``--impl ncm_verify.peers.specinfer``.
"""

from ncm_verify.peers.tree_rules import CAPABILITIES, SpecInferRule, tree_kernels, written_from

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "versions", "verify_tree", "apply_tree", "draw_uniforms"]

ACCEPTANCE_RULE = "the rule ignores `mode`: it is the paper's, exact only for children drawn i.i.d. from q"

verify_tree, apply_tree, draw_uniforms = tree_kernels(SpecInferRule())
versions = written_from("SpecInfer's paper (Algorithm 2, MSS)")
