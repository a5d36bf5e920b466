"""Where a run happened: versions, the MLX default device, platform, commit."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_output(directory: Path | None, *args: str) -> str | None:
    """What `git args` prints in `directory`, stripped; None outside a git work tree or without git."""
    try:
        result = subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_commit(directory: Path | None = None) -> str | None:
    """The checked-out commit, or None outside a git work tree."""
    return git_output(directory, "rev-parse", "HEAD") or None


def git_dirty(directory: Path | None = None) -> bool | None:
    """Whether the work tree has uncommitted changes; None outside a git work tree."""
    status = git_output(directory, "status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def describe_environment() -> dict:
    """The facts every report and figure carries; the device is asked of MLX, never assumed."""
    import mlx.core as mx

    from ncm_verify.mlx_jit import preamble_state

    return {
        "mlx": mx.__version__,
        "mlx_default_device": str(mx.default_device()),
        "mlx_cpu_jit_preamble": preamble_state(),
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": package_version("numpy"),
        "scipy": package_version("scipy"),
        "hypothesis": package_version("hypothesis"),
        "pytest": package_version("pytest"),
        "ncm_verify": package_version("ncm-verify"),
        "mlx_lm": package_version("mlx-lm"),
        "commit": git_commit(),
    }


def checkout_root() -> Path | None:
    """The checkout holding this package (src layout) when it sits in one."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "properties").is_dir():
        return checkout
    return None


def installed_suite_root() -> Path | None:
    """The package's data/ folder when the suite runs installed (a wheel, no checkout): it holds the properties,
    self-tests, ledger, fixtures and pytest's settings laid out as a checkout holds them."""
    data = Path(__file__).resolve().parent / "data"
    if checkout_root() is None and (data / "properties").is_dir():
        return data
    return None


def suite_root() -> Path:
    """Where the properties and self-tests run from: the checkout holding this package, else the installed
    package's data/ folder, else the cwd."""
    return checkout_root() or installed_suite_root() or Path.cwd()
