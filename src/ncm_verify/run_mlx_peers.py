"""The MLX speculative decoders users run, and the prefix caches MLX servers keep, each judged in an environment of
its own.

    python -m ncm_verify.run_mlx_peers install mlx-vlm          (make install-peers PEER=mlx-vlm)
    python -m ncm_verify.run_mlx_peers verify mlx-vlm,dflash-mlx (make verify-peers PEERS=mlx-vlm,dflash-mlx)

`install` makes ``.peers/<name>/`` (uv, this project's Python), installs the package at its pinned version with
``--no-deps`` and then only what its judged code imports (`MlxPeer.needs`; the heavy GUI/vision/server extras are
left out, each peer says which). `verify` runs ``mlx_peer_properties/test_<module>.py`` (and
``test_<module>_prefix_cache.py`` where the package keeps a prefix cache) with that environment's Python (this
repository's ``src`` on its path, nothing of it installed there) and writes, per package and property,
passed / finding / not applicable with its reason, and whether the planted control was caught:
``<reports>/peers-mlx.{md,html,json}``. Exit status 0 when every peer's run gave a verdict, no property failed
outside the findings table, no finding went away unannounced, and every peer's planted control was caught.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from ncm_verify.peers import mlx_reach, mlx_reach_more, reach
from ncm_verify.peers.reach import Reason, Scope
from ncm_verify.progress import Progress
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
    requires_python: tuple[int, int] = (3, 10)
    """The oldest Python its metadata admits: the environment is made with an interpreter found on the machine."""
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
    def tests(self) -> list[str]:
        """Its speculative properties and, where it keeps a prefix cache, ``test_<module>_prefix_cache.py``."""
        files = [
            f"mlx_peer_properties/test_{self.module}.py",
            f"mlx_peer_properties/test_{self.module}_prefix_cache.py",
        ]
        return [name for name in files if (ROOT / name).exists()]


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
            "mlx-lm[cpu]>=0.32.2",
        ),
        "mlx-lm is not among its dependencies: it is installed for the prefix-cache machine alone (its model folders "
        "and uncached oracle use mlx-lm's model classes; mlx-vlm imports none of it). Left out: "
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
    MlxPeer(
        "yunshu",
        "yunshu==0.1.5",
        ("mlx[cpu]>=0.32.3,<0.32.4", "mlx-lm[cpu]>=0.32.0", "numpy>=1.24.0"),
        "fastapi, transformers, tokenizers, llguidance, openai, opentelemetry, pydantic, uvicorn and the rest: the "
        "gateway, server and tooling; `yunshu_engine.speculative_decoder` imports mlx and mlx-lm only, and "
        "BatchedEngine, KVPrefixCache and PromptCacheManager (its prefix caches) mlx, mlx-lm and numpy",
        requires_python=(3, 13),
        reach=mlx_reach_more.YUNSHU,
        unreached=mlx_reach_more.YUNSHU_REASONS,
    ),
    MlxPeer(
        "dspark-mlx",
        "dspark-mlx==0.1.0",
        ("mlx[cpu]>=0.31.0", "mlx-lm[cpu]>=0.31.0", "numpy"),
        "mlx-vlm: only its Gemma 4 unified host (`hosts/gemma4_unified.py`) imports it; the mlx-lm host is judged",
        reach=mlx_reach_more.DSPARK_MLX,
        unreached=mlx_reach_more.DSPARK_MLX_REASONS,
    ),
    MlxPeer(
        "mlx-dspark",
        "mlx-dspark==0.20.3",
        (
            "mlx[cpu]>=0.32.4",
            "mlx-lm[cpu]>=0.31.3",
            "numpy",
            "huggingface-hub",
            "transformers>=5.14.0",
            "pillow>=10.3.0",
            "tqdm>=4.66.2",
            "jinja2>=3.1.0",
            "requests>=2.31.0",
        ),
        "nothing of its own; mlx-vlm 0.7.10 (its bound >=0.6.12) comes with --no-deps beside it, with mlx-vlm's "
        "needs (transformers, pillow, tqdm, jinja2, requests), not its audio, vision-preprocessing and server "
        "extras: `mlx_dspark.model` imports `mlx_vlm.models.rope_utils`",
        beside=("mlx-vlm==0.7.10",),
        reach=mlx_reach_more.MLX_DSPARK,
        unreached=mlx_reach_more.MLX_DSPARK_REASONS,
    ),
    MlxPeer(
        "dfly-mlx",
        "dfly-mlx==0.1.0",
        ("mlx[cpu]>=0.31.0", "mlx-lm[cpu]>=0.31.0"),
        "torch, safetensors, huggingface-hub: its `convert` extra (checkpoint conversion), not the drafter backend; "
        "dflash-mlx 0.1.8 (its bound >=0.1.8,<0.2) comes with --no-deps beside it",
        beside=("dflash-mlx==0.1.8",),
        reach=mlx_reach_more.DFLY_MLX,
        unreached=mlx_reach_more.DFLY_MLX_REASONS,
    ),
    MlxPeer(
        "mlx-flash",
        "mlx-flash==0.9.2",
        ("mlx[cpu]>=0.24.0", "mlx-lm[cpu]>=0.32.0", "numpy>=1.24.0", "psutil>=5.9.0"),
        "huggingface-hub, safetensors, tabulate: downloading, conversion and tables; `mlx_flash_compress.dflash` "
        "and `eagle3` import mlx and numpy only",
        reach=mlx_reach_more.MLX_FLASH,
        unreached=mlx_reach_more.MLX_FLASH_REASONS,
    ),
    MlxPeer(
        "nunspark",
        "nunspark==0.13.0",
        ("mlx[cpu]>=0.31.0", "mlx-lm[cpu]>=0.31.0,<0.32", "numpy>=1.26"),
        "nothing: mlx, mlx-lm and numpy are its only dependencies (fastapi, uvicorn: its `web` extra); mlx-lm is "
        "held below 0.32 (0.31.3, inside its bound >=0.31.0): with 0.32.x, what its bound resolves, every "
        "speculative path raises at engine.py:132 (a finding, docs/peers-mlx.md)",
        requires_python=(3, 11),
        reach=mlx_reach_more.NUNSPARK,
        unreached=mlx_reach_more.NUNSPARK_REASONS,
    ),
    MlxPeer(
        "mlx-lm",
        "mlx-lm==0.32.2",
        ("mlx[cpu]>=0.32.2", "numpy", "transformers>=5.7.0", "sentencepiece", "protobuf", "pyyaml", "jinja2"),
        "nothing but its Darwin-only mlx marker, replaced by mlx[cpu]: its prefix cache (LRUPromptCache), server "
        "(mlx_lm.server), prompt-cache files and draft-model path are judged as served",
    ),
    MlxPeer(
        "locals",
        "locals==0.2.1",
        ("mlx[cpu]>=0.32,<0.34", "mlx-lm[cpu]>=0.32,<0.33", "numpy>=1.26"),
        "huggingface_hub, llguidance, outlines-core, rich: downloads, grammars and the console; HybridBatchEngine, "
        "chain_cache and DiskPromptCache import mlx and mlx-lm",
    ),
    MlxPeer(
        "mlx-textgen",
        "mlx-textgen==0.2.1",
        ("mlx[cpu]", "mlx-lm[cpu]>=0.24.0", "outlines>=0.2.3", "pydantic"),
        "mlx-vlm, fastapi, uvicorn: vision models and the server; LLMModel and CacheManager import mlx-lm, pydantic "
        "and (for sampling) outlines",
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
    ),
)
BY_NAME = {peer.name: peer for peer in MLX_PEERS}


def interpreter(peer: MlxPeer) -> str | None:
    """A Python on this machine that `peer.requires_python` admits: this project's, else one on PATH or under
    pyenv (``~/.pyenv/versions/*/bin``), newest first; None where there is none."""
    if sys.version_info[:2] >= peer.requires_python:
        return sys.executable
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"]
    found = sorted(
        (path for root in roots if root.is_dir() for path in root.glob("*/bin/python3.*") if path.name[8:].isdigit()),
        key=lambda path: int(path.name[8:]),
        reverse=True,
    )
    names = [f"python{peer.requires_python[0]}.{minor}" for minor in range(20, peer.requires_python[1] - 1, -1)]
    candidates = [str(path) for path in found] + [p for n in names if (p := shutil.which(n))]
    for candidate in candidates:
        version = subprocess.run([candidate, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True)
        if version.returncode == 0 and tuple(map(int, version.stdout.split())) >= peer.requires_python:
            return candidate
    return None


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
        python = interpreter(peer)
        if python is None:
            raise ValueError(f"peer: {peer.name} needs Python >= {'.'.join(map(str, peer.requires_python))}")
        subprocess.run([uv(), "venv", "-q", "--python", python, str(PEERS_DIR / peer.name)], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, "--no-deps", peer.pin, *peer.beside], check=True)
    subprocess.run([uv(), "pip", "install", "-q", "--python", target, *peer.needs, *TOOLS], check=True)


@dataclasses.dataclass(frozen=True)
class Part:
    """One pytest process of a peer's run: some of its test files, optionally narrowed by a marker expression. A peer's
    speculative file and its prefix-cache file are separate parts, and a file with sampled-law tests (`peer_law`, the
    long ones) is split into those and the rest, so that `verify` can run them beside each other."""

    peer: MlxPeer
    tests: tuple[str, ...]
    marker: str | None = None

    @property
    def label(self) -> str:
        kind = "prefix caches" if self.tests[0].endswith("_prefix_cache.py") else "speculative"
        return f"{self.peer.name} ({kind}{', ' + self.marker if self.marker else ''})"

    @property
    def slug(self) -> str:
        kind = "prefix" if self.tests[0].endswith("_prefix_cache.py") else "spec"
        return f"{self.peer.name}-{kind}" + ("" if self.marker is None else "-" + self.marker.replace(" ", "-"))


def parts_of(peer: MlxPeer) -> list[Part]:
    """`peer`'s tests as `Part`s: each file apart, a file with `peer_law` tests in two."""
    parts = []
    for name in peer.tests:
        if "mark.peer_law" in (ROOT / name).read_text(encoding="utf-8"):
            parts += [Part(peer, (name,), "peer_law"), Part(peer, (name,), "not peer_law")]
        else:
            parts.append(Part(peer, (name,)))
    return parts


COST = {
    "mlx-vlm-spec-peer_law": 300,
    "mlx-vlm-spec-not-peer_law": 150,
    "vllm-mlx-spec-peer_law": 120,
    "mlx-openai-server-prefix": 110,
    "mlx-lm-prefix": 100,
    "mlx-vlm-prefix": 90,
}
"""CPU seconds a part took, measured (docs/prefix-engines.md, "How long"): `verify` starts the longest first, so that
no long part starts last. A part not listed counts 60."""


@dataclasses.dataclass
class PartRun:
    part: Part
    status: int
    seconds: float
    cpu_seconds: float
    log: Path
    results: Path
    raw: Path


def run_part(part: Part, reports: Path, examples: int, files: list[Path]) -> PartRun:
    """One part's pytest in the peer's environment, its output to ``<reports>/peers-mlx-<slug>.log``; wall and CPU
    seconds (user + sys of the process and every process it waited for: the servers it starts)."""
    peer = part.peer
    results = reports / f"peers-mlx-{part.slug}.jsonl"
    raw = reports / f"peers-mlx-{part.slug}-reach.json"
    log = reports / f"peers-mlx-{part.slug}.log"
    for stale in (results, raw):
        stale.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # the suite's code, importable, installed nowhere there
    command = [str(peer.python), "-m", "pytest", *part.tests, "-q", "-p", "no:cacheprovider", "--tb=short"]
    command += [f"--mlx-peers-results={results}", f"--mlx-peers-examples={examples}"]
    command += ["-m", part.marker] if part.marker else []
    if files:
        command += [f"--mlx-peers-reach={raw}", *(f"--mlx-peers-reach-file={f}" for f in files)]
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"ncm-verify: {part.label}: {' '.join(command[:10])} (+{len(files)} files measured)\n")
        out.flush()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, wait_status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(wait_status)
    seconds, cpu = time.monotonic() - started, usage.ru_utime + usage.ru_stime
    return PartRun(part, process.returncode, seconds, cpu, log, results, raw)


def merge_reach(tables: list[dict]) -> dict:
    """`reach.dump` tables of one peer's parts as one: a branch is reached where any part reached it (an exit is
    missing only where every part missed it)."""
    merged: dict = {}
    for table in tables:
        for file, entry in table.items():
            if file not in merged:
                merged[file] = {"branches": dict(entry["branches"]), "missing": dict(entry["missing"])}
                continue
            missing = merged[file]["missing"]
            for line in list(missing):
                both = sorted(set(missing[line]) & set(entry["missing"].get(line, [])))
                if both:
                    missing[line] = both
                else:
                    del missing[line]
    return merged


def verify(peers: list[MlxPeer], reports: Path, examples: int = 3, measure_reach: bool = True, jobs: int = 2) -> int:
    """Each peer's properties in its own environment (its `reach` measured unless told not), `jobs` pytest processes
    at once (a peer's parts, `parts_of`, among them; the costliest first), each one's output kept whole in its log and
    printed whole when its peer is done; then the report. Returns the run's exit status."""
    if jobs < 1:
        raise ValueError(f"jobs: expected at least 1, got {jobs}")
    reports.mkdir(parents=True, exist_ok=True)
    before = json.loads(REACH_BEFORE.read_text(encoding="utf-8")) if REACH_BEFORE.exists() else {}
    ready, runs_of = [], {}
    for peer in peers:
        if not peer.python.exists() and interpreter(peer) is None:
            runs_of[peer.name] = unavailable(peer)
            print(f"ncm-verify: {peer.name}: not applicable, no Python it requires on this machine", flush=True)
            continue
        if not peer.python.exists():
            print(f"ncm-verify: installing {peer.name} ({peer.pin}) into {PEERS_DIR / peer.name}", flush=True)
            install(peer)
        files = reach.resolve(peer.site, peer.reach) if measure_reach else []
        if files and subprocess.run([str(peer.python), "-c", "import coverage"], capture_output=True).returncode:
            # an environment made before coverage.py joined TOOLS: add the tools, nothing else
            subprocess.run([uv(), "pip", "install", "-q", "--python", str(peer.python), *TOOLS], check=True)
        ready.append((peer, files))
    parts = sorted(
        ((part, files) for peer, files in ready for part in parts_of(peer)), key=lambda pf: -COST.get(pf[0].slug, 60)
    )
    progress = Progress(f"ncm-verify: MLX peers ({jobs} at once)", len(parts))
    lock = threading.Lock()
    left = collections.Counter(part.peer.name for part, _ in parts)
    finished: dict[str, list[PartRun]] = {name: [] for name in left}

    def one(part: Part, files: list[Path]) -> None:
        with lock:
            progress.start(part.label)
        done = run_part(part, reports, examples, files)
        with lock:
            finished[part.peer.name].append(done)
            left[part.peer.name] -= 1
            if not left[part.peer.name]:  # the peer's whole output at once, never interleaved with another's
                for run in sorted(finished[part.peer.name], key=lambda run: run.part.slug):
                    print(run.log.read_text(encoding="utf-8", errors="replace"), end="", flush=True)
            progress.done(
                f"{part.label}: exit status {done.status}, {done.seconds:.0f} s, {done.cpu_seconds:.0f} CPU s"
            )

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(one, part, files) for part, files in parts]:
            future.result()
    for peer, _ in ready:
        done = sorted(finished[peer.name], key=lambda run: run.part.slug)
        records = []
        for run in done:
            records += (
                [json.loads(line) for line in run.results.read_text().splitlines()] if run.results.exists() else []
            )
        tables = [json.loads(run.raw.read_text()) for run in done if run.raw.exists()]
        reached = reach.judge(merge_reach(tables), peer.site, peer.reach, peer.unreached) if tables else None
        status = next((run.status for run in done if run.status), 0)
        timings = [
            dict(tests=list(run.part.tests), marker=run.part.marker, seconds=round(run.seconds, 1),
                 cpu_seconds=round(run.cpu_seconds, 1))
            for run in done
        ]  # fmt: skip
        runs_of[peer.name] = report.PeerRun(
            peer.name, peer.pin, peer.left_out, status, round(sum(run.seconds for run in done), 1), records, reached,
            before.get(peer.name), round(sum(run.cpu_seconds for run in done), 1), timings,
        )  # fmt: skip
    return report.write([runs_of[peer.name] for peer in peers if peer.name in runs_of], reports)


def unavailable(peer: MlxPeer) -> report.PeerRun:
    """The run of a peer that needs a Python this machine lacks: every property not applicable, saying why."""
    need = ".".join(map(str, peer.requires_python))
    reason = f"not applicable: {peer.pin} requires Python >= {need} and this machine has none (PATH, pyenv)"
    files = peer.tests or [f"mlx_peer_properties/test_{peer.module}.py"]
    prefix = any(name.endswith("_prefix_cache.py") for name in files)
    decoder = any(not name.endswith("_prefix_cache.py") for name in files)
    records = [dict(nodeid=f"{files[0]}::no interpreter", property=list(report.PROPERTIES) if decoder else [],
                    rule=list(report.PREFIX_RULES) if prefix else [], status="not applicable", detail=reason,
                    seconds=0.0)]  # fmt: skip
    return report.PeerRun(peer.name, peer.pin, peer.left_out, 0, 0.0, records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ncm_verify.run_mlx_peers")
    parser.add_argument("action", choices=("install", "verify"))
    parser.add_argument("peers", help=f"comma-separated among {', '.join(BY_NAME)}, or 'all'")
    parser.add_argument("--reports", type=Path, default=ROOT / "reports")
    parser.add_argument("--examples", type=int, default=3, help="Hypothesis examples per property (some ask more)")
    parser.add_argument("--no-reach", action="store_true", help="do not measure the branch coverage (its overhead)")
    parser.add_argument("--jobs", type=int, default=2, help="pytest processes at once (default 2: the machine's cores)")
    args = parser.parse_args(argv)
    try:
        peers = select(args.peers)
    except ValueError as error:
        print(f"ncm-verify: {error}")
        return 2
    if args.action == "install":
        try:
            for peer in peers:
                install(peer)
        except ValueError as error:  # a peer needing a Python this machine lacks
            print(f"ncm-verify: {error}")
            return 2
        return 0
    return verify(peers, args.reports, args.examples, measure_reach=not args.no_reach, jobs=args.jobs)


if __name__ == "__main__":
    sys.exit(main())
