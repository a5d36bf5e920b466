"""The MLX speculative decoders users run, each judged in an environment of its own.

    python -m ncm_verify.run_mlx_peers install mlx-vlm          (make install-peers PEER=mlx-vlm)
    python -m ncm_verify.run_mlx_peers verify mlx-vlm,dflash-mlx (make verify-peers PEERS=mlx-vlm,dflash-mlx)

`install` makes ``.peers/<name>/`` (uv, this project's Python), installs the package at its pinned version with
``--no-deps`` and then only what its judged code imports (`MlxPeer.needs`; the heavy GUI/vision/server extras are
left out, each peer says which). `verify` runs ``mlx_peer_properties/test_<module>.py`` with that environment's
Python (this repository's ``src`` on its path, nothing of it installed there) and writes, per package and property,
passed / finding / not applicable with its reason, and whether the planted control was caught:
``<reports>/peers-mlx.{md,html,json}``. Exit status 0 when every peer's run gave a verdict, no property failed
outside the findings table, no finding went away unannounced, and every peer's planted control was caught.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ncm_verify.peers import mlx_reach, reach
from ncm_verify.peers.reach import Reason, Scope
from ncm_verify.report import mlx_peers as report

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = ROOT / ".peers"
TOOLS = ("pytest>=8", "hypothesis>=6.100", "numpy", "scipy", "coverage>=7.6")
"""What every peer environment gets beside the package: the properties' own tools (coverage.py measures reach)."""
REACH_BEFORE = ROOT / "mlx_peer_properties" / "reach_before.json"
"""Each package's reach by the properties before the reach work (`make verify-peers PEERS=all` at the commit it
names): the report's "before" column."""


@dataclasses.dataclass(frozen=True)
class MlxPeer:
    name: str
    pin: str
    needs: tuple[str, ...]
    """Installed after ``pip install --no-deps <pin>``: what the judged modules import, at the package's bounds."""
    left_out: str
    """The declared dependencies not installed, and why the judged code runs without them."""
    beside: tuple[str, ...] = ()
    """Declared dependencies installed with ``--no-deps`` too (their own heavy extras are not needed)."""
    reach: tuple[Scope, ...] = ()
    """The package's speculative code, whose branch coverage by the properties the report gives (`peers.reach`)."""
    unreached: tuple[Reason, ...] = ()
    """Why branches of `reach` stay unreached, keyed by file and line range; the rest show as unexplained."""

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def python(self) -> Path:
        return PEERS_DIR / self.name / "bin" / "python"

    @property
    def site(self) -> Path:
        """The environment's site-packages, where `reach`'s globs are resolved."""
        found = sorted((PEERS_DIR / self.name / "lib").glob("python*/site-packages"))
        if not found:
            raise ValueError(f"peer: {self.name} has no environment under {PEERS_DIR / self.name}")
        return found[0]

    @property
    def tests(self) -> str:
        return f"mlx_peer_properties/test_{self.module}.py"


MLX_PEERS = (
    MlxPeer(
        "mlx-vlm",
        "mlx-vlm==0.7.10",
        (
            "mlx[cpu]>=0.32.4",
            "transformers>=5.14.0",
            "pillow>=10.3.0",
            "tqdm>=4.66.2",
            "jinja2>=3.1.0",
            "requests>=2.31.0",
            "huggingface_hub",
        ),
        "datasets, sentencepiece, miniaudio, llguidance, mlx-audio, opencv-python, fastapi, python-multipart, "
        "starlette, uvicorn, websockets, cryptography: audio, vision preprocessing, server and training extras; "
        "`mlx_vlm.generate.ar` and `mlx_vlm.speculative` import without them",
        reach=mlx_reach.MLX_VLM,
        unreached=mlx_reach.MLX_VLM_REASONS,
    ),
    MlxPeer(
        "dflash-mlx",
        "dflash-mlx==0.1.8",
        ("mlx[cpu]>=0.31.0", "mlx-lm[cpu]>=0.31.0"),
        "nothing: mlx and mlx-lm are its only dependencies",
        reach=mlx_reach.DFLASH_MLX,
        unreached=mlx_reach.DFLASH_MLX_REASONS,
    ),
    MlxPeer(
        "mtplx",
        "mtplx==2.12.2",
        ("mlx[cpu]>=0.31", "mlx-lm[cpu]>=0.31,<0.32", "numpy>=2"),
        "fastapi, huggingface-hub, pillow, pydantic, rich, safetensors, uvicorn, transformers, nanobind: the server, "
        "CLI and loading; its rule and cache modules (sampling.py, cache_state.py) import mlx and numpy only",
        reach=mlx_reach.MTPLX,
        unreached=mlx_reach.MTPLX_REASONS,
    ),
    MlxPeer(
        "mlx-lm-broomva",
        "mlx-lm-broomva==0.31.3",
        ("mlx[cpu]>=0.31.2", "numpy", "transformers>=5.0.0", "pyyaml", "jinja2", "protobuf", "sentencepiece"),
        "nothing but its Darwin-only mlx marker, replaced by mlx[cpu]",
        reach=mlx_reach.MLX_LM_BROOMVA,
        unreached=mlx_reach.MLX_LM_BROOMVA_REASONS,
    ),
    MlxPeer(
        "vllm-mlx",
        "vllm-mlx==0.6.0",
        (
            "mlx[cpu]>=0.32.4",
            "mlx-lm[cpu]>=0.31.3,<0.32.0",
            "requests>=2.28.0",
            "numpy>=1.24.0",
            "transformers>=5.14.0",
            "pillow>=10.3.0",
            "tqdm>=4.66.2",
            "jinja2>=3.1.0",
            "huggingface_hub",
        ),
        "gradio, opencv-python, torchvision, fastapi, mcp, lm-format-enforcer, llguidance, mlx-embeddings and the "
        "rest: server, GUI and vision; mlx-vlm's own extras (as for the mlx-vlm peer). mlx-vlm 0.7.10 (its bound "
        ">=0.6.5) comes with --no-deps beside it, with mlx-vlm's needs (mlx>=0.32.4, transformers, pillow, tqdm, "
        "jinja2, huggingface_hub): MLLMBatchGenerator runs over an mlx-vlm model and imports mlx_vlm",
        beside=("mlx-vlm==0.7.10",),
        reach=mlx_reach.VLLM_MLX,
        unreached=mlx_reach.VLLM_MLX_REASONS,
    ),
)
BY_NAME = {peer.name: peer for peer in MLX_PEERS}


def select(names: str) -> list[MlxPeer]:
    """The peers named in a comma-separated list ('all' for every one), in `MLX_PEERS`' order."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if wanted == ["all"]:
        return list(MLX_PEERS)
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown or not wanted:
        raise ValueError(f"peers: expected names among {', '.join(BY_NAME)} (or 'all'), got {names!r}")
    return [peer for peer in MLX_PEERS if peer.name in wanted]


def uv() -> str:
    return str(ROOT / ".venv" / "uv" / "bin" / "uv")


def install(peer: MlxPeer) -> None:
    """``.peers/<name>/``: the package at its pin with --no-deps, then `peer.needs` and the properties' tools."""
    target = str(peer.python)
    if not peer.python.exists():
        subprocess.run([uv(), "venv", "-q", "--python", sys.executable, str(PEERS_DIR / peer.name)], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, "--no-deps", peer.pin, *peer.beside], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, *peer.needs, *TOOLS], check=True)


def verify(peers: list[MlxPeer], reports: Path, examples: int = 3, measure_reach: bool = True) -> int:
    """Each peer's properties in its own environment (its `reach` measured unless told not), then the report; the
    run's exit status."""
    reports.mkdir(parents=True, exist_ok=True)
    before = json.loads(REACH_BEFORE.read_text(encoding="utf-8")) if REACH_BEFORE.exists() else {}
    runs = []
    for peer in peers:
        if not peer.python.exists():
            install(peer)
        results = reports / f"peers-mlx-{peer.name}.jsonl"
        results.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # the suite's code, importable, installed nowhere there
        command = [str(peer.python), "-m", "pytest", peer.tests, "-q", "-p", "no:cacheprovider", "--tb=short"]
        command += [f"--mlx-peers-results={results}", f"--mlx-peers-examples={examples}"]
        files = reach.resolve(peer.site, peer.reach) if measure_reach else []
        if files and subprocess.run([str(peer.python), "-c", "import coverage"], capture_output=True).returncode:
            # an environment made before coverage.py joined TOOLS: add the tools, nothing else
            subprocess.run([uv(), "pip", "install", "-q", "--python", str(peer.python), *TOOLS], check=True)
        raw = reports / f"peers-mlx-{peer.name}-reach.json"
        raw.unlink(missing_ok=True)
        if files:
            command += [f"--mlx-peers-reach={raw}", *(f"--mlx-peers-reach-file={f}" for f in files)]
        print(f"ncm-verify: {peer.name}: {' '.join(command[:9])} (+{len(files)} files measured)", flush=True)
        started = time.monotonic()
        status = subprocess.run(command, cwd=ROOT, env=env).returncode
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        reached = (
            reach.judge(json.loads(raw.read_text()), peer.site, peer.reach, peer.unreached) if raw.exists() else None
        )
        runs.append(
            report.PeerRun(
                peer.name, peer.pin, peer.left_out, status, round(seconds, 1), records, reached, before.get(peer.name)
            )
        )
    return report.write(runs, reports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.run_mlx_peers")
    parser.add_argument("action", choices=("install", "verify"))
    parser.add_argument("peers", help=f"comma-separated among {', '.join(BY_NAME)}, or 'all'")
    parser.add_argument("--reports", type=Path, default=ROOT / "reports")
    parser.add_argument("--examples", type=int, default=3, help="Hypothesis examples per property (some ask more)")
    parser.add_argument("--no-reach", action="store_true", help="do not measure the branch coverage (its overhead)")
    args = parser.parse_args(argv)
    try:
        peers = select(args.peers)
    except ValueError as error:
        print(f"ncm-verify: {error}")
        return 2
    if args.action == "install":
        for peer in peers:
            install(peer)
        return 0
    return verify(peers, args.reports, args.examples, measure_reach=not args.no_reach)


if __name__ == "__main__":
    sys.exit(main())
