"""`make verify-peers`: the chain properties against each third-party peer, its edge cases, and the comparison.

    python -m ncm_verify peers [--profile dev] [--reports reports] [--jobs 2] [--seed 0]

Per peer (`PEERS`), into ``<reports>/peers/<name>/``: the chain-relevant properties (`PROPERTY_FILES`,
`SELECTION`) with ``--impl`` the peer's module, then its edge-case probes; ``peer_properties/`` (transformers'
assisted generation end to end) runs the same way when the folder exists. Then `report.peers` decides the
comparison and writes peers.json and peers.md, with mlx-lm's rows from the main run's evidence when present.
Exit status 0 when the comparison passes: the planted peer caught and every peer's run gave a verdict.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import uuid
from pathlib import Path

from ncm_verify.progress import Progress
from ncm_verify.protocol import ImplementationError, load_implementation
from ncm_verify.report import peers as comparison
from ncm_verify.run import QUIET_FAILURES, ROOT, check_profile, pytest_command, run_phase, say

PROPERTY_FILES = (
    "properties/test_chain.py",
    "properties/test_apply_exact.py",
    "properties/test_numerics.py",
    "properties/test_kernel_relations.py",
    "properties/test_bad_input.py",
)
"""The properties that judge a chain step; others need names a chain peer does not provide."""
SELECTION = "not factorized and not latent_chain and not greedy and not tree"
"""pytest -k over those files: the runs of kernels a chain peer lacks are left out rather than 'not provided'."""
TREE_PROPERTY_FILES = (
    "properties/test_tree.py",
    "properties/test_apply_exact.py",
    "properties/test_numerics.py",
    "properties/test_kernel_relations.py",
    "properties/test_bad_input.py",
)
"""The properties that judge a tree verifier: the tree's own and the runs of every kernel's that draw a tree."""
TREE_SELECTION = "tree or kernel_relations or half_precision or rules_out"
"""pytest -k over those files: the tree's runs, and the properties that draw among the kernels a module provides."""
LOOP_PROPERTIES = "peer_properties"
"""transformers' assisted generation end to end, when present: run as its own peer."""


@dataclasses.dataclass(frozen=True)
class Peer:
    name: str
    module: str
    planted: str | None = None
    """What the peer plants: it must fail (the comparison's teeth)."""
    files: tuple[str, ...] = PROPERTY_FILES
    selection: str = SELECTION
    edge_cases: bool = True
    """Whether the chain's edge-case probes apply (a chain verifier's step)."""


def tree_peer(name: str) -> Peer:
    """A published tree rule written here, judged by the tree's properties in every mode."""
    return Peer(name, f"ncm_verify.peers.{name}", files=TREE_PROPERTY_FILES, selection=TREE_SELECTION, edge_cases=False)


PEERS = (
    Peer("transformers_step", "ncm_verify.peers.transformers_step"),
    Peer("numpy_chain", "ncm_verify.peers.numpy_chain"),
    Peer("transformers_pre28508", "ncm_verify.peers.transformers_pre28508", planted="pre-#28508 correction"),
    *(tree_peer(name) for name in ("specinfer", "specinfer_merged", "eagle", "sglang_tree", "sglang_tree_half")),
)


def peer_facts(peer: Peer) -> dict:
    """What the comparison names: module, version of its code, rule and declared capabilities; or why it won't load."""
    facts: dict = {"name": peer.name, "module": peer.module, "planted": peer.planted}
    try:
        module = load_implementation(peer.module)
        facts.update(
            versions=module.versions(),
            acceptance_rule=getattr(module, "ACCEPTANCE_RULE", None),
            capabilities=getattr(module, "CAPABILITIES", {}),
        )
    except (ImplementationError, ImportError) as error:
        facts["problem"] = f"cannot load {peer.module}: {error} (make install-peers)"
    return facts


def run_peer(peer: Peer, folder: Path, run_id: str, jobs: int, env: dict, step: str, seed: int) -> dict:
    """The properties against `peer`, then its edge cases; its facts, as written to peer.json."""
    from ncm_verify.peers.edge_cases import probe_peer

    facts = peer_facts(peer)
    if "problem" not in facts:
        command = pytest_command(
            *peer.files,
            "-q",
            *QUIET_FAILURES,
            "-k",
            peer.selection,
            f"--impl={peer.module}",
            f"--ncm-report-dir={folder}",
            f"--ncm-run-id={run_id}",
            f"--hypothesis-seed={seed}",
            jobs=jobs,
        )
        phase = run_phase(peer.name, step, command, env)
        facts.update(exit_status=phase.exit_status, seconds=phase.seconds)
        if peer.edge_cases:
            edges = probe_peer(peer.module)
            (folder / comparison.EDGE_CASES_FILE).write_text(json.dumps(edges, indent=1) + "\n", encoding="utf-8")
    return facts


def run_loop(folder: Path, run_id: str, jobs: int, env: dict, step: str) -> dict:
    """``peer_properties/`` (transformers' assisted generation, end to end) into `folder`."""
    facts: dict = {"name": folder.name, "module": LOOP_PROPERTIES, "planted": None, "acceptance_rule": "optimal"}
    try:
        from ncm_verify.peers.transformers_step import versions

        facts["versions"] = versions()
    except ImportError as error:
        facts["problem"] = f"transformers is not installed: {error} (make install-peers)"
        return facts
    command = pytest_command(
        LOOP_PROPERTIES, "-q", *QUIET_FAILURES, f"--ncm-report-dir={folder}", f"--ncm-run-id={run_id}", jobs=jobs
    )
    phase = run_phase("transformers assisted generation", step, command, env)
    facts.update(exit_status=phase.exit_status, seconds=phase.seconds)
    return facts


def verify_peers(profile: str, reports: Path, jobs: int, seed: int = 0, peers: tuple[Peer, ...] = PEERS) -> int:
    """Every peer, then the comparison; returns its exit status (2: could not start). `seed` draws every peer's
    examples, so that a comparison reproduces (the default profile, dev, is not derandomized)."""
    try:
        check_profile(profile)
    except ValueError as error:
        print(f"ncm-verify: {error}")
        return 2
    root = reports.resolve() / comparison.PEERS_DIR
    shutil.rmtree(root, ignore_errors=True)  # an earlier comparison's peers must not pass for this one's
    run_id = uuid.uuid4().hex[:12]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCM_VERIFY_")}
    env.update(HYPOTHESIS_PROFILE=profile)
    loop = (ROOT / LOOP_PROPERTIES).is_dir()
    steps = len(peers) + loop
    started = datetime.datetime.now(datetime.timezone.utc)
    say(f"peers run {run_id}: {', '.join(p.name for p in peers)}{' and the assisted loop' if loop else ''}, {profile}")
    progress = Progress("ncm-verify: peers", steps)
    for number, peer in enumerate(peers, 1):
        folder = root / peer.name
        folder.mkdir(parents=True, exist_ok=True)
        facts = run_peer(peer, folder, run_id, jobs, env, f"{number}/{steps}", seed)
        facts.update(profile=profile, seed=seed)
        (folder / comparison.PEER_FILE).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
        progress.done(peer.name)
    if loop:
        folder = root / "transformers_assisted"
        folder.mkdir(parents=True, exist_ok=True)
        facts = run_loop(folder, run_id, jobs, env, f"{steps}/{steps}")
        (folder / comparison.PEER_FILE).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
        progress.done("transformers assisted generation")
    return rebuild_comparison(reports, started)


def rebuild_comparison(reports: Path, started: datetime.datetime | None = None) -> int:
    """Decide and write the comparison from `reports` (with mlx-lm's rows from a main run there); its exit status."""
    result = comparison.write_comparison(reports.resolve())
    for reason in result["reasons"]:
        say(f"peers: {reason}")
    took = f" after {(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds():.0f} s" if started else ""
    written = reports.resolve() / comparison.COMPARISON_MD
    say(f"peers: {result['verdict']}{took}; comparison in {written} and {comparison.COMPARISON_JSON}")
    return result["exit_status"]
