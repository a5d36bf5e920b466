"""SGLang's ``tree_speculative_sampling_target_only`` at its default thresholds (1, 1), in NumPy.

Followed: github.com/sgl-project/sglang at 120affb9, sgl-kernel/csrc/speculative/speculative_sampling.cuh
(``TreeSpeculativeSamplingTargetOnly``) and the server defaults ``speculative_accept_threshold_single
= 1.0``, ``speculative_accept_threshold_acc = 1.0`` (python/sglang/srt/server_args.py); the caller
hands it zero draft_probs. One coin per visited node (here the uniform of the first child tried there),
accept iff ``coin <= prob_acc / threshold_acc`` or ``p(x) >= threshold_single``. The rule is
:class:`ncm_verify.peers.tree_rules.SGLangRule`. Targets the ``top_k`` mode (EAGLE-2 trees).
``--impl ncm_verify.peers.sglang_tree``.
"""

from ncm_verify.peers.tree_rules import CAPABILITIES, SGLangRule, tree_kernels, written_from

__all__ = ["ACCEPTANCE_RULE", "CAPABILITIES", "versions", "verify_tree", "apply_tree", "draw_uniforms"]

ACCEPTANCE_RULE = (
    "the rule ignores `mode` and q (target only): it verifies any children as if fixed; "
    "one coin per visited node: the first child's u[b, 0, n] decides its siblings too"
)

verify_tree, apply_tree, draw_uniforms = tree_kernels(SGLangRule(1.0, 1.0))
versions = written_from("sgl-project/sglang 120affb9 (tree_speculative_sampling_target_only)")
