"""ledger.json: load it, check it against its schema, and check it against pytest's collection.

The ledger ties each claim (C1..C10 of DESIGN.md) to its sources, the code it
concerns, the properties that check it (or why nothing can) and the protocol
kernels whose failures count against it (`kernels`). It holds no status: the
report derives one from evidence. The schema is small enough to check by hand,
so no jsonschema dependency.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ncm_verify.protocol import PROTOCOL_NAMES

LEDGER_FILE = "ledger.json"
PACKAGED_LEDGER = Path(__file__).parents[1] / "data" / LEDGER_FILE
"""The ledger shipped as package data (a link to the checkout's in the source tree)."""
LEDGER_SCHEMA = "ncm-verify/ledger/1"
PROPERTIES_DIR = "properties"

SOURCE_ID = re.compile(r"^S\d{2}$")
CLAIM_ID = re.compile(r"^C\d+$")
PROPERTY_ID = re.compile(r"^properties/test_[A-Za-z0-9_]+\.py::[A-Za-z_][A-Za-z0-9_]*$")
URL = re.compile(r"^https?://\S+$")

TOP_FIELDS = {"schema": str, "title": str, "scope": str, "seed": str, "sources": list, "claims": list}
TOP_REQUIRED = {"schema", "sources", "claims"}
SOURCE_FIELDS = {
    "id": str,
    "authors": str,
    "title": str,
    "version": str,
    "url": str,
    "cache_url": str,
    "kind": str,
    "read_scope": str,
    "supports": str,
    "checked": str,
}
SOURCE_REQUIRED = {"id", "title", "url", "kind", "read_scope", "supports"}
CLAIM_FIELDS = {
    "id": str,
    "statement": str,
    "sources": list,
    "basis": str,
    "paths": list,
    "properties": list,
    "kernels": list,
    "benchmarks": list,
    "not_checkable": str,
    "hypothesis": bool,
    "thorough_properties": list,
    "judges_suite_code": str,
}
CLAIM_REQUIRED = {"id", "statement", "sources", "paths", "properties"}


class LedgerError(ValueError):
    """The ledger breaks its schema or disagrees with the repository."""


def default_ledger_path() -> Path:
    """ledger.json at the project root (the folder holding pyproject.toml), else the cwd's, else the installed one."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / LEDGER_FILE).exists() and (folder / "pyproject.toml").exists():
            return folder / LEDGER_FILE
    if (Path.cwd() / LEDGER_FILE).exists():
        return Path.cwd() / LEDGER_FILE
    return PACKAGED_LEDGER


def check_fields(where: str, entry, fields: dict, required: set, *, lists_of_strings=True) -> list[str]:
    """Problems with one object: not an object, missing keys, unknown keys, wrong types."""
    if not isinstance(entry, dict):
        return [f"{where}: expected an object, got {type(entry).__name__}"]
    problems = [f"{where}: missing {key!r}" for key in sorted(required - entry.keys())]
    for key, value in entry.items():
        if key not in fields:
            problems.append(f"{where}: unknown field {key!r} (status is derived, never written)")
        elif not isinstance(value, fields[key]):
            problems.append(f"{where}.{key}: expected {fields[key].__name__}, got {type(value).__name__}")
        elif isinstance(value, str) and not value.strip():
            problems.append(f"{where}.{key}: empty")
        elif lists_of_strings and isinstance(value, list) and not all(isinstance(v, str) and v for v in value):
            problems.append(f"{where}.{key}: every entry must be a non-empty string")
    return problems


def schema_problems(ledger) -> list[str]:
    """Every way `ledger` breaks the schema; empty when it conforms."""
    problems = check_fields("ledger", ledger, TOP_FIELDS, TOP_REQUIRED, lists_of_strings=False)
    if problems and not isinstance(ledger, dict):
        return problems
    if ledger.get("schema") != LEDGER_SCHEMA:
        problems.append(f"ledger.schema: expected {LEDGER_SCHEMA!r}, got {ledger.get('schema')!r}")
    source_ids = []
    for index, source in enumerate(ledger.get("sources") or []):
        where = f"sources[{index}]"
        problems += check_fields(where, source, SOURCE_FIELDS, SOURCE_REQUIRED)
        if not isinstance(source, dict):
            continue
        if not SOURCE_ID.match(str(source.get("id", ""))):
            problems.append(f"{where}.id: {source.get('id')!r} is not of the form S01")
        for key in ("url", "cache_url"):
            if key in source and not URL.match(str(source[key])):
                problems.append(f"{where}.{key}: {source[key]!r} is not an http(s) URL")
        source_ids.append(source.get("id"))
    problems += [f"sources: id {i!r} appears more than once" for i in sorted(duplicated(source_ids))]
    claim_ids = []
    for index, claim in enumerate(ledger.get("claims") or []):
        where = f"claims[{index}]"
        problems += check_fields(where, claim, CLAIM_FIELDS, CLAIM_REQUIRED)
        if not isinstance(claim, dict):
            continue
        claim_ids.append(claim.get("id"))
        where = f"claim {claim.get('id')}"
        if not CLAIM_ID.match(str(claim.get("id", ""))):
            problems.append(f"{where}: id is not of the form C1")
        for source in claim.get("sources") or []:
            if source not in source_ids:
                problems.append(f"{where}: source {source!r} is not in sources")
        for node in claim_properties(claim):
            if not PROPERTY_ID.match(str(node)):
                problems.append(
                    f"{where}: {node!r} is not a property node id without parametrization "
                    "(properties/test_x.py::test_name)"
                )
        has_properties = bool(claim.get("properties"))
        if not has_properties and not claim.get("not_checkable"):
            problems.append(f"{where}: no property checks it and no not_checkable reason says why")
        if has_properties and claim.get("not_checkable"):
            problems.append(f"{where}: lists properties and a not_checkable reason; keep one")
        for kernel in claim.get("kernels") or []:
            if kernel not in PROTOCOL_NAMES:
                problems.append(f"{where}: kernel {kernel!r} is not a protocol name (ncm_verify.protocol)")
    problems += [f"claims: id {i!r} appears more than once" for i in sorted(duplicated(claim_ids))]
    kernels = [k for claim in ledger.get("claims") or [] if isinstance(claim, dict) for k in claim.get("kernels") or []]
    problems += [f"claims: kernel {k!r} is listed under more than one claim" for k in sorted(duplicated(kernels))]
    return problems


def duplicated(values: list) -> set:
    return {v for v in values if values.count(v) > 1}


def read_ledger(path: Path | None = None) -> tuple[dict, list[str]]:
    """ledger.json and its schema problems; raise `LedgerError` only when unusable.

    The report reads it this way so that a half-finished ledger still yields a
    report, with its problems listed, rather than none.
    """
    path = Path(path) if path else default_ledger_path()
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise LedgerError(f"ledger: {path} does not exist") from error
    except json.JSONDecodeError as error:
        raise LedgerError(f"ledger: {path} is not JSON: {error}") from error
    problems = schema_problems(ledger)
    usable = isinstance(ledger, dict) and all(
        isinstance(entry, dict) and {"id"} <= entry.keys()
        for key in ("sources", "claims")
        for entry in (ledger.get(key) if isinstance(ledger.get(key), list) else [None])
    )
    if not usable:
        raise LedgerError(f"ledger: {path} breaks its schema:\n  " + "\n  ".join(problems))
    return ledger, problems


def load_ledger(path: Path | None = None) -> dict:
    """Read and schema-check ledger.json; raise `LedgerError` listing every problem."""
    ledger, problems = read_ledger(path)
    if problems:
        raise LedgerError(f"ledger: {path or default_ledger_path()} breaks its schema:\n  " + "\n  ".join(problems))
    return ledger


def kernel_claims(ledger: dict) -> dict[str, str]:
    """Kernel name -> the claim whose output it bears on (a failure on that kernel counts against it)."""
    return {kernel: claim["id"] for claim in ledger["claims"] for kernel in claim.get("kernels") or []}


@functools.lru_cache(maxsize=4)
def ledger_kernel_claims(path: Path | None = None) -> dict[str, str]:
    """`kernel_claims` of the ledger at `path` (default: the project's, else the installed one), read once."""
    return kernel_claims(read_ledger(path)[0])


THOROUGH_PROFILE = "thorough"
"""The profile under which a claim's `thorough_properties` run (properties marked `thorough_only`)."""


def claim_properties(claim: dict) -> list[str]:
    """Every property a claim lists: those every run must pass, then `thorough_properties`, which run only under
    the `thorough` profile (sampled smokes of whole loops, weak by design: the exact checks are the evidence)."""
    return [*(claim.get("properties") or []), *(claim.get("thorough_properties") or [])]


def listed_properties(ledger: dict) -> dict[str, list[str]]:
    """Property node id -> the claims that list it."""
    listed: dict[str, list[str]] = {}
    for claim in ledger["claims"]:
        for node in claim_properties(claim):
            listed.setdefault(node, []).append(claim["id"])
    return listed


def collect_properties(root: Path, properties_dir: str = PROPERTIES_DIR) -> list[dict]:
    """Ask pytest (in a subprocess, so nothing is imported here) what it collects.

    Returns the plugin's ``--ncm-inventory``: node id, property id, claim markers.
    """
    with tempfile.TemporaryDirectory() as scratch:
        inventory = Path(scratch) / "inventory.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                properties_dir,
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                f"--ncm-inventory={inventory}",
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if result.returncode not in (0, 5) or not inventory.exists():  # 5: nothing collected
            raise LedgerError(
                f"ledger: pytest could not collect {properties_dir} (exit {result.returncode}):\n"
                + (result.stdout + result.stderr)[-4000:]
            )
        return json.loads(inventory.read_text(encoding="utf-8"))


SHIPPED = ("src/", "properties/", "selftests/", "fixtures/", "ledger.json")
"""What an installed suite holds of the checkout: its package (for src/), and its data/ folder for the rest."""


def path_exists(root: Path, path: str, installed: bool) -> bool:
    """Whether a ledger path exists: under the checkout `root`, or for an `installed` suite in what it ships (the
    package for src/; the checkout's Makefile, tests and benchmarks are not shipped, so not asked for)."""
    if not installed:
        return (root / path).exists()
    if path.startswith("src/"):
        return (Path(__file__).resolve().parents[2] / path.removeprefix("src/")).exists()
    return not path.startswith(SHIPPED) or (root / path).exists()


def repository_problems(
    ledger: dict, root: Path, inventory: list[dict] | None, *, installed: bool = False, selected: bool = False
) -> list[str]:
    """Disagreements between the ledger and the repository (as pytest collects it, unless None); a `selected`
    inventory (some properties chosen to run) is not asked to hold every listed one."""
    problems = [
        f"claim {claim['id']}: path {path} does not exist"
        for claim in ledger["claims"]
        for path in claim["paths"]
        if not path_exists(root, path, installed)
    ]
    if inventory is None:
        return problems
    listed = listed_properties(ledger)
    collected: dict[str, set[str]] = {}
    for test in inventory:
        collected.setdefault(test["property"], set()).update(test["claims"])
    for node in sorted(set(listed) - set(collected)) if not selected else ():
        problems.append(f"{node}: listed under {', '.join(listed[node])} but pytest does not collect it")
    for node in sorted(set(collected) - set(listed)):
        problems.append(f"{node}: collected but listed under no claim")
    for node in sorted(set(listed) & set(collected)):
        marked, ledgered = collected[node], set(listed[node])
        if marked != ledgered:
            problems.append(
                f"{node}: its claim markers say {sorted(marked) or 'none'}, "
                f"the ledger lists it under {sorted(ledgered)}"
            )
    files = {path.relative_to(root).as_posix() for path in (root / PROPERTIES_DIR).glob("test_*.py")}
    named = {node.split("::", 1)[0] for node in listed}
    for path in sorted(files - named):
        problems.append(f"{path}: no property of this file is named in the ledger")
    return problems


def check_ledger(path: Path | None = None, *, collect: bool = True) -> list[str]:
    """All problems of the ledger at `path`: schema first, then against the repository."""
    path = Path(path) if path else default_ledger_path()
    ledger = load_ledger(path)
    root = path.resolve().parent
    inventory = collect_properties(root) if collect else None
    return repository_problems(ledger, root, inventory)
