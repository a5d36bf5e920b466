"""MLX's CPU JIT preamble, precompiled once: `python -m ncm_verify.mlx_jit` (run by `make install`).

On Linux MLX compiles every fused CPU kernel with ``g++ -std=c++17 -O3 -Wall -fPIC -shared -I <mlx/include>``
from a source whose first line includes ``mlx/backend/cpu/compiled_preamble.h``; parsing that header is about
0.5 s of each kernel's 0.6-0.75 s, and a cold `make test` compiles hundreds. g++ reads a precompiled header
found beside the header it includes, so a ``compiled_preamble.h.gch`` there serves every kernel MLX compiles
(0.14 s each), with no change to MLX or its command. Two guards keep the kernels what MLX alone would build:

- a probe kernel in MLX's own form is compiled with and without the precompiled header, and it is kept only if
  the two shared libraries are byte-identical;
- g++ uses a ``.gch`` whatever the header now says, so a stamp holds the sha256 of MLX's headers and the
  compiler's version; `remove_if_stale` (every test session calls it) deletes one that no longer matches.

Elsewhere (macOS's Metal, CUDA, no g++) there is nothing to do.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PREAMBLE = Path("mlx/backend/cpu/compiled_preamble.h")
FLAGS = ("-std=c++17", "-O3", "-Wall", "-fPIC")
"""MLX's own flags (its command adds -shared); a .gch made with others is not used by g++."""
PROBE = """#include "mlx/backend/cpu/compiled_preamble.h"
using namespace mlx::core;
using namespace mlx::core::detail;
extern "C" {
void probe_contiguous(int* shape, int64_t** strides, void** args) {
  float* A = (float*)args[0];
  float* B = (float*)args[1];
  const size_t size = (size_t)args[2];
  for (size_t i = 0; i < size; ++i) {
    B[i] = Multiply()(Exp()(A[i]), Sigmoid()(A[i]));
  }
}
}
"""


def mlx_include() -> Path | None:
    """The include folder MLX hands g++ (beside its library), or None when MLX ships none."""
    import importlib.util

    spec = importlib.util.find_spec("mlx")
    locations = (spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (Path(location) / "include" / PREAMBLE).is_file():
            return Path(location) / "include"
    return None


def _compiler_version() -> str:
    return subprocess.run(["g++", "--version"], capture_output=True, text=True, check=True).stdout


def fingerprint(include: Path) -> str:
    """sha256 of every MLX header (path and bytes) and of g++'s version: what the .gch was made from."""
    digest = hashlib.sha256(_compiler_version().encode())
    for path in sorted(
        p for p in (include / "mlx").rglob("*") if p.is_file() and not p.name.endswith((".gch", ".gch.sha256"))
    ):
        digest.update(str(path.relative_to(include)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _paths(include: Path) -> tuple[Path, Path]:
    header = include / PREAMBLE
    return header.with_name(header.name + ".gch"), header.with_name(header.name + ".gch.sha256")


def _compile_probe(folder: Path, includes: list[Path], name: str) -> bytes:
    source = folder / "probe.cpp"
    source.write_text(PROBE)
    out = folder / name
    flags = [arg for path in includes for arg in ("-I", str(path))]
    subprocess.run(["g++", *FLAGS, "-shared", *flags, str(source), "-o", str(out)], capture_output=True, check=True)
    return out.read_bytes()


def ensure_precompiled(include: Path | None = None) -> str:
    """Build (or keep) the precompiled preamble where MLX's g++ finds it (in `include`, MLX's by default);
    what was done, in words."""
    if not sys.platform.startswith("linux") or shutil.which("g++") is None:
        return "skipped: MLX does not JIT-compile CPU kernels with g++ here"
    include = include or mlx_include()
    if include is None:
        return "skipped: this MLX ships no CPU preamble header"
    gch, stamp = _paths(include)
    expected = fingerprint(include)
    if gch.exists() and stamp.exists() and stamp.read_text() == expected:
        return f"current: {gch}"
    stamp.unlink(missing_ok=True)
    gch.unlink(missing_ok=True)  # the plain probe must not read an old one
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        plain = _compile_probe(folder, [include], "plain.so")
        built = folder / "preamble.gch"
        subprocess.run(
            ["g++", *FLAGS, "-I", str(include), "-x", "c++-header", str(include / PREAMBLE), "-o", str(built)],
            capture_output=True,
            check=True,
        )
        shutil.move(str(built), gch)
        if _compile_probe(folder, [include], "precompiled.so") != plain:
            gch.unlink()
            return "removed: the probe kernel built with the precompiled preamble differed from MLX's own build"
    stamp.write_text(expected)
    return f"built: {gch}"


def remove_if_stale(include: Path | None = None) -> None:
    """Delete a precompiled preamble whose stamp no longer matches MLX's headers and g++ (MLX then parses them).

    Without a g++ on PATH nothing here can read it: it is kept for the environments that have one (each checks).
    """
    include = include or mlx_include()
    if include is None:
        return
    gch, stamp = _paths(include)
    if not gch.exists() or shutil.which("g++") is None:
        return
    try:
        current = stamp.exists() and stamp.read_text() == fingerprint(include)
    except (OSError, subprocess.SubprocessError):
        current = False
    if not current:
        gch.unlink(missing_ok=True)


def preamble_state(include: Path | None = None) -> str:
    """How MLX's CPU JIT reads its preamble in this environment (recorded with every figure)."""
    include = include or mlx_include()
    if include is None or not sys.platform.startswith("linux"):
        return "not applicable"
    gch, stamp = _paths(include)
    return "precompiled" if gch.exists() and stamp.exists() else "parsed per kernel"


if __name__ == "__main__":
    print(f"MLX CPU JIT preamble: {ensure_precompiled()}")
