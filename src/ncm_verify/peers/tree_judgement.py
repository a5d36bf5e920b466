"""The published tree rules judged by the exact enumerator: exact or not, and the smallest counterexample.

For each rule of :func:`ncm_verify.peers.tree_rules.published_rules` (and the reference rule of each
mode, as the control) and each child-drawing mode, :func:`judge` enumerates the rule's exact output
law (:func:`ncm_verify.oracles.exact_tree.tree_laws`) on seeded random fixtures over every full tree
shape up to a node budget, in order of node count, then vocabulary. The first (shape, vocabulary)
where some fixture's law differs from the target's by more than ``EXACT_IDENTITY`` in total
variation is the smallest counterexample; the fixture with the largest distance there is reported.
A rule with none is *exact on every fixture tried*: evidence, not a proof, stated with its count.

``python -m ncm_verify.peers.tree_judgement`` prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ncm_verify.oracles.exact import AutoregressiveFixture, context_offsets, total_variation
from ncm_verify.oracles.exact_tree import MODES, reference_rule, target_joint, tree_laws, tree_nodes
from ncm_verify.peers.tree_rules import published_rules
from ncm_verify.tolerances import EXACT_IDENTITY

__all__ = ["Finding", "shapes_by_size", "random_fixture", "judge", "judgement_table", "format_table", "main"]

CONCENTRATIONS = (0.3, 1.0, 3.0)
"""Dirichlet concentrations the fixtures cycle through: peaked rows, flat-ish ones and in between."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One rule judged in one mode: exact on all `tried` fixtures, or the smallest counterexample."""

    algorithm: str
    mode: str
    targeted: bool
    exact: bool
    tried: int
    largest_tv: float
    shape: tuple[int, ...] | None = None
    parents: tuple[int, ...] | None = None
    vocab: int | None = None
    target: np.ndarray | None = None
    draft: np.ndarray | None = None

    @property
    def nodes(self) -> int | None:
        return None if self.parents is None else len(self.parents)


def shapes_by_size(max_nodes: int) -> list[tuple[int, ...]]:
    """Every full tree shape (children per depth) with at most `max_nodes` nodes, fewest nodes first."""
    shapes = []
    for depth in range(1, max_nodes + 1):
        for shape in itertools.product(range(1, max_nodes + 1), repeat=depth):
            if len(tree_nodes(shape)) <= max_nodes:
                shapes.append(shape)
    return sorted(shapes, key=lambda shape: (len(tree_nodes(shape)), shape))


def random_fixture(rng: np.random.Generator, vocab: int, length: int, concentration: float) -> AutoregressiveFixture:
    """Target and draft tables over every context shorter than `length`, rows drawn from a Dirichlet."""
    rows = int(context_offsets(vocab, length)[length])
    target, draft = (rng.dirichlet(np.full(vocab, concentration), size=rows) for _ in range(2))
    return AutoregressiveFixture(target=target, draft=draft, vocab=vocab, length=length)


def fixtures(shape: Sequence[int], vocab: int, count: int, seed: int) -> Iterator[AutoregressiveFixture]:
    """`count` seeded fixtures just long enough for one round of `shape` (its depth, then the bonus)."""
    rng = np.random.default_rng([seed, vocab, *shape])
    for index in range(count):
        yield random_fixture(rng, vocab, len(shape) + 1, CONCENTRATIONS[index % len(CONCENTRATIONS)])


def distance(rule, fixture: AutoregressiveFixture, shape: Sequence[int], mode: str) -> float:
    """Total variation between the rule's emitted law and the target's joint law."""
    return total_variation(tree_laws(rule, fixture, shape, mode).emitted, target_joint(fixture))


def judge(
    algorithm: str,
    rule,
    mode: str,
    *,
    targeted: bool = True,
    max_nodes: int = 4,
    vocabs: Sequence[int] = (2, 3, 4),
    per_size: int = 12,
    seed: int = 0,
) -> Finding:
    """`rule` in `mode` over every shape up to `max_nodes` nodes and every vocabulary (see the module)."""
    tried, largest = 0, 0.0
    for shape in shapes_by_size(max_nodes):
        for vocab in vocabs:
            found = [(distance(rule, f, shape, mode), f) for f in fixtures(shape, vocab, per_size, seed)]
            tried += len(found)
            tv, fixture = max(found, key=lambda pair: pair[0])
            largest = max(largest, tv)
            if tv > EXACT_IDENTITY:
                parents = tuple(tree_nodes(shape))
                return Finding(
                    algorithm, mode, targeted, False, tried, tv, shape, parents, vocab, fixture.target, fixture.draft
                )
    return Finding(algorithm, mode, targeted, True, tried, largest)


def judgement_table(*, modes: Sequence[str] = MODES, names: Sequence[str] | None = None, **options) -> list[Finding]:
    """Every published rule (and each mode's reference rule) judged in every mode of `modes`."""
    rules: dict[str, tuple[Any, tuple[str, ...]]] = {
        f"reference[{mode}]": (reference_rule(mode), (mode,)) for mode in MODES
    }
    rules.update(published_rules())
    findings = []
    for name, (rule, targets) in rules.items():
        if names is not None and name not in names:
            continue
        for mode in modes:
            findings.append(judge(name, rule, mode, targeted=mode in targets, **options))
    return findings


def format_table(findings: Sequence[Finding], *, rows: bool = True) -> str:
    """One line per finding; with `rows`, each counterexample's target and draft tables below it."""
    lines = [
        f"{'algorithm':30} {'mode':20} {'targets':7} {'exact?':28} {'tree (parents)':18} {'V':>2} {'TV':>10}",
    ]
    for f in findings:
        verdict = f"yes, on {f.tried} fixtures" if f.exact else "NO"
        tree = "" if f.parents is None else str(list(f.parents))
        tv = f"{f.largest_tv:.3g}" if not f.exact else f"<= {max(f.largest_tv, 0.0):.1g}"
        lines.append(
            f"{f.algorithm:30} {f.mode:20} {'yes' if f.targeted else '':7} {verdict:28} {tree:18} "
            f"{f.vocab or '':>2} {tv:>10}"
        )
        if rows and not f.exact:
            lines += _rows_text(f)
    return "\n".join(lines)


def _rows_text(finding: Finding) -> list[str]:
    """The counterexample's target and draft rows, one line per context of the tree."""
    lines = []
    contexts = [
        c
        for depth in range(len(finding.shape or ()))
        for c in itertools.product(range(finding.vocab or 0), repeat=depth)
    ]
    for context, p, q in zip(contexts, np.asarray(finding.target), np.asarray(finding.draft)):
        lines.append(f"    after {str(context):10} p = {np.round(p, 4).tolist()}  q = {np.round(q, 4).tolist()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ncm_verify.peers.tree_judgement", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--max-nodes", type=int, default=4)
    parser.add_argument("--per-size", type=int, default=12, help="fixtures per (shape, vocabulary)")
    parser.add_argument("--targeted-only", action="store_true", help="judge each rule only in the modes it targets")
    arguments = parser.parse_args(argv)
    findings = judgement_table(max_nodes=arguments.max_nodes, per_size=arguments.per_size)
    if arguments.targeted_only:
        findings = [f for f in findings if f.targeted]
    print(format_table(findings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
