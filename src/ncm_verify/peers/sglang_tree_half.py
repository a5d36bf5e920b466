"""SGLang's ``tree_speculative_sampling_target_only`` with ``threshold_single = threshold_acc = 0.5``.

The same kernel as :mod:`ncm_verify.peers.sglang_tree` (which cites the source), with both
thresholds below their default of 1: a child is also accepted when ``p(x) >= 0.5`` or when the
coin is below twice the target mass tried. Targets the ``top_k`` mode.
``--impl ncm_verify.peers.sglang_tree_half``.
"""

from ncm_verify.peers.sglang_tree import ACCEPTANCE_RULE, CAPABILITIES, versions
from ncm_verify.peers.tree_rules import SGLangRule, tree_kernels

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "versions", "verify_tree", "apply_tree", "draw_uniforms"]

verify_tree, apply_tree, draw_uniforms = tree_kernels(SGLangRule(0.5, 0.5))
