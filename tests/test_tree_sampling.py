"""Sampling agrees with the exact judgement: SGLang below its default thresholds fails its chi-square test."""

from ncm_verify.peers.tree_sampling import judged_fixture, sampled_verdict


def test_sglang_at_half_thresholds_fails_and_at_its_defaults_passes_on_the_one_node_counterexample():
    finding, fixture, shape = judged_fixture("sglang_single_0.5_acc_0.5", "top_k")
    assert not finding.exact and shape == (1,)
    half = sampled_verdict("ncm_verify.peers.sglang_tree_half", fixture, shape, "top_k", seed=0)
    assert not half.passed, f"TV {finding.largest_tv:.3g} went unseen: {half}"
    assert half.min_detectable_tv < finding.largest_tv
    # Same fixture, same seed, default thresholds: exact by the enumerator, so the test stands
    # (a fixed seed: it fails with probability alpha over seeds, never intermittently).
    default = sampled_verdict("ncm_verify.peers.sglang_tree", fixture, shape, "top_k", seed=0)
    assert default.passed, f"the exact rule failed its test: {default}"
