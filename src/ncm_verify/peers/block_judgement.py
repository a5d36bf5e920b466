"""The published block-verification rules judged by the exact enumerator: exact or not, and the smallest block.

For each rule of :func:`ncm_verify.peers.block_rules.published_rules`, :func:`judge` enumerates its law of
the first g + 1 tokens of repeated rounds (:func:`ncm_verify.oracles.exact_block.output_distribution`, the
first round drafting g) on seeded random fixtures, blocks of g = 1, 2, 3 drafts and vocabularies 2-4 in that
order, drafts sampled from q (or, as a second drafter, deterministic: one-hot q rows). The first (g, V) where
some fixture's law is more than ``EXACT_IDENTITY`` from the target's in total variation is the smallest
counterexample; the fixture with the largest distance there is reported. Beside it, the rule's mean E[tau] of
the first round against the paper's on the same fixtures: an exact rule can still accept fewer drafts.

``python -m ncm_verify.peers.block_judgement`` prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Sequence

import numpy as np

from ncm_verify.oracles import exact_block
from ncm_verify.oracles.exact import AutoregressiveFixture, target_joint, total_variation
from ncm_verify.peers.block_rules import published_rules
from ncm_verify.peers.tree_judgement import CONCENTRATIONS, random_fixture
from ncm_verify.tolerances import EXACT_IDENTITY

__all__ = ["DRAFTERS", "BlockFinding", "block_fixtures", "judge", "judgement_table", "format_table", "main"]

DRAFTERS = ("sampled", "deterministic")
"""Drafts sampled from Dirichlet q rows, or from one-hot q rows (an n-gram or greedy drafter)."""


@dataclasses.dataclass(frozen=True)
class BlockFinding:
    """One rule judged with one drafter: exact on all `tried` fixtures, or the smallest counterexample."""

    algorithm: str
    follows: str
    drafter: str
    exact: bool
    tried: int
    largest_tv: float
    accepted_gap: float
    """Mean over the fixtures tried of E[tau] (first round) of the rule minus the paper's."""
    drafts: int | None = None
    vocab: int | None = None
    target: np.ndarray | None = None
    draft: np.ndarray | None = None


def block_fixtures(drafts: int, vocab: int, count: int, seed: int, drafter: str):
    """`count` seeded fixtures of length g + 1: one round of g drafts, then its last token."""
    rng = np.random.default_rng([seed, vocab, drafts, DRAFTERS.index(drafter)])
    for index in range(count):
        fixture = random_fixture(rng, vocab, drafts + 1, CONCENTRATIONS[index % len(CONCENTRATIONS)])
        if drafter == "deterministic":
            point = np.eye(vocab)[rng.integers(vocab, size=len(fixture.draft))]
            fixture = AutoregressiveFixture(fixture.target, point, vocab, fixture.length)
        yield fixture


def _judged(rule, fixture: AutoregressiveFixture, drafts: int) -> tuple[float, float]:
    """(TV from the target's joint, E[tau] of the first round minus the paper's)."""
    law = exact_block.output_distribution(rule, fixture, lambda context: min(drafts, fixture.length - len(context) - 1))
    gap = exact_block.expected_accepted(
        exact_block.accepted_length_law(rule, fixture, (), drafts)
    ) - exact_block.expected_accepted(exact_block.accepted_length_law(exact_block.PAPER_RULE, fixture, (), drafts))
    return total_variation(law, target_joint(fixture)), gap


def judge(
    algorithm: str,
    rule,
    follows: str,
    drafter: str,
    *,
    max_drafts: int = 3,
    vocabs: Sequence[int] = (2, 3, 4),
    per_size: int = 12,
    seed: int = 0,
) -> BlockFinding:
    """`rule` over every (g, V) up to `max_drafts` drafts, fewest drafts first (see the module)."""
    tried, largest, gaps = 0, 0.0, []
    for drafts, vocab in itertools.product(range(1, max_drafts + 1), vocabs):
        found = [(*_judged(rule, f, drafts), f) for f in block_fixtures(drafts, vocab, per_size, seed, drafter)]
        tried += len(found)
        gaps += [gap for _, gap, _ in found]
        tv, _, fixture = max(found, key=lambda entry: entry[0])
        largest = max(largest, tv)
        if tv > EXACT_IDENTITY:
            return BlockFinding(
                algorithm, follows, drafter, False, tried, tv, float(np.mean(gaps)), drafts, vocab, fixture.target,
                fixture.draft,
            )  # fmt: skip
    return BlockFinding(algorithm, follows, drafter, True, tried, largest, float(np.mean(gaps)))


def judgement_table(*, drafters: Sequence[str] = DRAFTERS, names: Sequence[str] | None = None, **options):
    """Every published rule judged with every drafter of `drafters`."""
    return [
        judge(name, rule, follows, drafter, **options)
        for name, (rule, follows) in published_rules().items()
        if names is None or name in names
        for drafter in drafters
    ]


def format_table(findings: Sequence[BlockFinding], *, rows: bool = True) -> str:
    """One line per finding; with `rows`, each counterexample's target and draft rows below it."""
    lines = [
        f"{'algorithm':28} {'follows':32} {'drafts':13} {'exact?':22} {'g':>2} {'V':>2} {'TV':>9} "
        f"{'E[tau] - paper':>15}"
    ]
    for f in findings:
        verdict = f"yes, on {f.tried} fixtures" if f.exact else "NO"
        tv = f"<= {max(f.largest_tv, 0.0):.1g}" if f.exact else f"{f.largest_tv:.3g}"
        lines.append(
            f"{f.algorithm:28} {f.follows:32} {f.drafter:13} {verdict:22} {f.drafts or '':>2} {f.vocab or '':>2} "
            f"{tv:>9} {f.accepted_gap:>+15.4f}"
        )
        if rows and f.drafts is not None and f.vocab is not None:
            contexts = [c for depth in range(f.drafts + 1) for c in itertools.product(range(f.vocab), repeat=depth)]
            for context, p, q in zip(contexts, np.asarray(f.target), np.asarray(f.draft)):
                lines.append(
                    f"    after {str(context):12} p = {np.round(p, 4).tolist()}  q = {np.round(q, 4).tolist()}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ncm_verify.peers.block_judgement", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--max-drafts", type=int, default=3)
    parser.add_argument("--per-size", type=int, default=12, help="fixtures per (drafts, vocabulary)")
    arguments = parser.parse_args(argv)
    print(format_table(judgement_table(max_drafts=arguments.max_drafts, per_size=arguments.per_size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
