"""The MLX speculative decoders users run, and the prefix caches MLX servers keep, each judged in an environment of
its own.

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
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ncm_verify.report import mlx_peers as report

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = ROOT / ".peers"
TOOLS = ("pytest>=8", "hypothesis>=6.100", "numpy", "scipy")
"""What every peer environment gets beside the package: the properties' own tools."""


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
    requires_python: str = ""
    """The Python minor version the package requires when this project's own is outside its bounds (e.g. "3.13"):
    found on PATH or under pyenv (`find_python`); where none is found the peer's row reads not applicable."""
    test_file: str = ""
    """Its properties' file when not ``test_<module>.py`` (the smaller servers: ``test_<module>_prefix_cache.py``)."""

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def python(self) -> Path:
        return PEERS_DIR / self.name / "bin" / "python"

    @property
    def tests(self) -> str:
        return self.test_file or f"mlx_peer_properties/test_{self.module}.py"


def find_python(version: str) -> str | None:
    """An interpreter of `version` ("3.13") that runs: ``python3.13`` on PATH, else the newest pyenv build of it (a
    pyenv shim on PATH fails where that version is not selected, hence each candidate is run once)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}"), *reversed(sorted(root.glob(f"versions/{version}.*/bin/python*")))]
    for candidate in candidates:
        if candidate and Path(candidate).name == f"python{version}":
            if subprocess.run([str(candidate), "-c", "pass"], capture_output=True).returncode == 0:
                return str(candidate)
    return None


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
    ),
    MlxPeer(
        "dflash-mlx",
        "dflash-mlx==0.1.8",
        ("mlx[cpu]>=0.31.0", "mlx-lm[cpu]>=0.31.0"),
        "nothing: mlx and mlx-lm are its only dependencies",
    ),
    MlxPeer(
        "mtplx",
        "mtplx==2.12.2",
        ("mlx[cpu]>=0.31", "mlx-lm[cpu]>=0.31,<0.32", "numpy>=2"),
        "fastapi, huggingface-hub, pillow, pydantic, rich, safetensors, uvicorn, transformers, nanobind: the server, "
        "CLI and loading; its rule and cache modules (sampling.py, cache_state.py) import mlx and numpy only",
    ),
    MlxPeer(
        "mlx-lm-broomva",
        "mlx-lm-broomva==0.31.3",
        ("mlx[cpu]>=0.31.2", "numpy", "transformers>=5.0.0", "pyyaml", "jinja2", "protobuf", "sentencepiece"),
        "nothing but its Darwin-only mlx marker, replaced by mlx[cpu]",
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
    ),
    MlxPeer(
        "mlx-lm",
        "mlx-lm==0.32.2",
        ("mlx[cpu]>=0.32.2", "numpy", "transformers>=5.7.0", "sentencepiece", "protobuf", "pyyaml", "jinja2"),
        "nothing but its Darwin-only mlx marker, replaced by mlx[cpu]: its prefix cache (LRUPromptCache), server "
        "(mlx_lm.server), prompt-cache files and draft-model path are judged as served",
    ),
    MlxPeer(
        "yunshu",
        "yunshu==0.1.5",
        ("mlx[cpu]>=0.32.3,<0.32.4", "mlx-lm[cpu]>=0.32.0", "numpy>=1.24.0"),
        "fastapi, uvicorn, openai, llguidance, opentelemetry, prometheus-client, trafilatura, pypdf and the rest: "
        "its gateway, console, tools and telemetry; BatchedEngine, KVPrefixCache and PromptCacheManager import mlx, "
        "mlx-lm and numpy only. Needs Python >= 3.13 (found on PATH or under pyenv)",
        requires_python="3.13",
        test_file="mlx_peer_properties/test_yunshu_prefix_cache.py",
    ),
    MlxPeer(
        "locals",
        "locals==0.2.1",
        ("mlx[cpu]>=0.32,<0.34", "mlx-lm[cpu]>=0.32,<0.33", "numpy>=1.26"),
        "huggingface_hub, llguidance, outlines-core, rich: downloads, grammars and the console; HybridBatchEngine, "
        "chain_cache and DiskPromptCache import mlx and mlx-lm",
        test_file="mlx_peer_properties/test_locals_prefix_cache.py",
    ),
    MlxPeer(
        "mlx-textgen",
        "mlx-textgen==0.2.1",
        ("mlx[cpu]", "mlx-lm[cpu]>=0.24.0", "outlines>=0.2.3", "pydantic"),
        "mlx-vlm, fastapi, uvicorn: vision models and the server; LLMModel and CacheManager import mlx-lm, pydantic "
        "and (for sampling) outlines",
        test_file="mlx_peer_properties/test_mlx_textgen_prefix_cache.py",
    ),
    MlxPeer(
        "mlx-openai-server",
        "mlx-openai-server==1.8.1",
        (
            "mlx[cpu]>=0.31.2",
            "mlx-lm[cpu]>=0.31.3,<0.32",
            "numpy>=2.2.0,<2.4",
            "dill>=0.4,<0.5",
            "xxhash>=3.6,<4",
            "loguru>=0.7.3,<0.8",
            "outlines>=1.1.1,<1.2",
            "fastapi>=0.115.14,<0.130",
            "openai>=2.21,<3",
            "openai-harmony>=0.0.8,<0.1",
        ),
        "av, librosa, mlx-embeddings, mlx-vlm, mlx-whisper, mflux, torchvision, pillow, uvicorn and the rest: audio, "
        "image, video and embedding models and the HTTP server; MLXLMHandler, LRUPromptCache and MLX_LM import "
        "what is installed",
        test_file="mlx_peer_properties/test_mlx_openai_server_prefix_cache.py",
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
        interpreter = find_python(peer.requires_python) if peer.requires_python else sys.executable
        if interpreter is None:
            raise FileNotFoundError(f"{peer.name} needs Python {peer.requires_python}: none on PATH or under pyenv")
        subprocess.run([uv(), "venv", "-q", "--python", interpreter, str(PEERS_DIR / peer.name)], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, "--no-deps", peer.pin, *peer.beside], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, *peer.needs, *TOOLS], check=True)


def verify(peers: list[MlxPeer], reports: Path, examples: int = 3) -> int:
    """Each peer's properties in its own environment, then the report; the run's exit status."""
    reports.mkdir(parents=True, exist_ok=True)
    runs = []
    for peer in peers:
        if not peer.python.exists():
            try:
                install(peer)
            except FileNotFoundError as missing:  # no interpreter the package admits: a verdict, not a crash
                rules = list(report.PREFIX_RULES) if "prefix_cache" in peer.tests else []
                properties = [] if rules else list(report.PROPERTIES)
                record = dict(nodeid=peer.tests, property=properties, rule=rules, status="not applicable",
                              detail=f"not applicable: {missing}", seconds=0)  # fmt: skip
                runs.append(report.PeerRun(peer.name, peer.pin, peer.left_out, 0, 0.0, [record]))
                continue
        results = reports / f"peers-mlx-{peer.name}.jsonl"
        results.unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # the suite's code, importable, installed nowhere there
        command = [str(peer.python), "-m", "pytest", peer.tests, "-q", "-p", "no:cacheprovider", "--tb=short"]
        command += [f"--mlx-peers-results={results}", f"--mlx-peers-examples={examples}"]
        print(f"ncm-verify: {peer.name}: {' '.join(command)}", flush=True)
        started = time.monotonic()
        status = subprocess.run(command, cwd=ROOT, env=env).returncode
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        runs.append(report.PeerRun(peer.name, peer.pin, peer.left_out, status, round(seconds, 1), records))
    return report.write(runs, reports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.run_mlx_peers")
    parser.add_argument("action", choices=("install", "verify"))
    parser.add_argument("peers", help=f"comma-separated among {', '.join(BY_NAME)}, or 'all'")
    parser.add_argument("--reports", type=Path, default=ROOT / "reports")
    parser.add_argument("--examples", type=int, default=3, help="Hypothesis examples per property (some ask more)")
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
    return verify(peers, args.reports, args.examples)


if __name__ == "__main__":
    sys.exit(main())
