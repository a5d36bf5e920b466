"""The sampling side of the judgement: each published rule's implementation module, sampled, against the target.

For a rule, a mode, a tree shape and a fixture, :func:`sampled_verdict` plans a goodness-of-fit test on
the target's joint law with the suite's policy (:mod:`ncm_verify.harness.stats`: alpha from the run's
budget, n powered for TV ``TARGET_TV``), draws that many rounds through the module's ``verify_tree``
(trees drawn from the draft as the mode draws them, each round's tokens continued by target samples) and
tests them. The exact judgement (:mod:`ncm_verify.peers.tree_judgement`) says what to expect: a rule
exact on the fixture passes but for the test's size alpha; one at TV above the plan's detectable TV fails.

``python -m ncm_verify.peers.tree_sampling`` samples each module on its rule's counterexample (or, for
an exact rule, a seeded fixture of the 2-1 tree) and prints the results.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import numpy as np

from ncm_verify.harness import stats
from ncm_verify.harness.tree_driver import run_tree
from ncm_verify.oracles.exact import AutoregressiveFixture, as_vector
from ncm_verify.oracles.exact_tree import target_joint
from ncm_verify.peers.tree_judgement import Finding, judge, random_fixture
from ncm_verify.peers.tree_rules import published_rules

__all__ = ["MODULES", "sampled_verdict", "judged_fixture", "main"]

MODULES = {
    "specinfer": "ncm_verify.peers.specinfer",
    "specinfer_merged": "ncm_verify.peers.specinfer_merged",
    "eagle": "ncm_verify.peers.eagle",
    "sglang": "ncm_verify.peers.sglang_tree",
    "sglang_single_0.5_acc_0.5": "ncm_verify.peers.sglang_tree_half",
}
"""Rules of `published_rules` that have an implementation module, and the module."""
EXACT_SHAPE = (2, 1)
"""Where an exact rule is sampled: two branches of two nodes."""


def sampled_verdict(module: str, fixture: AutoregressiveFixture, shape, mode: str, seed: int) -> stats.ChiSquareResult:
    """The chi-square test of `module`'s emitted law against the target's, planned before any sample."""
    law = as_vector(target_joint(fixture), (fixture.vocab,) * fixture.length)
    plan = stats.make_plan(law)
    impl = importlib.import_module(module)
    run = run_tree(impl, fixture, shape=tuple(shape), mode=mode, batch=plan.n, mixed=False, seed=seed)
    outcomes = np.ravel_multi_index(run.sequences.T, (fixture.vocab,) * fixture.length)
    return stats.chi_square_test(f"{module} {mode} {list(shape)}", outcomes, plan, seed=seed)


def judged_fixture(name: str, mode: str, seed: int = 0) -> tuple[Finding, AutoregressiveFixture, tuple[int, ...]]:
    """The rule's exact finding, and where to sample it: its counterexample, or a seeded `EXACT_SHAPE` fixture."""
    rule, _ = published_rules()[name]
    finding = judge(name, rule, mode)
    if finding.exact or finding.shape is None:
        rng = np.random.default_rng(seed)
        return finding, random_fixture(rng, 3, len(EXACT_SHAPE) + 1, 1.0), EXACT_SHAPE
    length = len(finding.shape) + 1
    fixture = AutoregressiveFixture(
        np.asarray(finding.target), np.asarray(finding.draft), int(finding.vocab or 0), length
    )
    return finding, fixture, finding.shape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ncm_verify.peers.tree_sampling", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)
    print(f"policy alpha {stats.current_policy().alpha:.3g}, power {stats.POWER} at TV {stats.TARGET_TV}")
    for name, module in MODULES.items():
        _, targets = published_rules()[name]
        for mode in targets:
            finding, fixture, shape = judged_fixture(name, mode, arguments.seed)
            result = sampled_verdict(module, fixture, shape, mode, arguments.seed)
            exact = "exact" if finding.exact else f"not exact (TV {finding.largest_tv:.3g})"
            print(
                f"{name:28} {mode:18} tree {list(shape)!s:14} V={fixture.vocab} {exact:26} n={result.n} "
                f"df={result.df} stat={result.statistic:.4g} p={result.p_value:.3g} "
                f"{'passes' if result.passed else 'FAILS'} (detects TV {result.min_detectable_tv:.3g})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
