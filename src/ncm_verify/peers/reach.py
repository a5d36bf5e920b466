"""Reach: which branches of a package's speculative code its properties executed (coverage.py, branch mode).

A peer names its speculative code as `Scope`s (globs relative to its environment's site-packages, optionally
narrowed to functions or classes by qualified name) and explains what stays unreached with `Reason`s keyed by file
and line range (or qualified name). Two halves:

- `measure` / `dump` run inside the peer's own environment (`mlx_peer_properties/conftest.py`, option
  ``--mlx-peers-reach``): coverage.py with branches over the scope's files, started before the package is imported,
  and the per-file branch table (every branch line's exit count, the exits never taken) written as JSON;
- `judge` runs in the suite's environment (`run_mlx_peers`): keeps the branches inside the scopes, marks those a
  reason declares not runnable here (macOS-only, Metal kernel, ...), and lists every unreached branch with its reason
  or with none, so an unexplained gap is visible. Pure Python; coverage.py is imported only by `measure`.

A branch is coverage.py's: an exit of a line with more than one possible exit, ``line->destination`` (a negative
destination leaves the function).
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import glob
import json
import re
from pathlib import Path
from typing import Any

UNEXPLAINED = "NO REASON"


@dataclasses.dataclass(frozen=True)
class Scope:
    """Speculative code of a package: files matching `path` (a glob relative to site-packages, ``**`` allowed)."""

    path: str
    within: tuple[str, ...] = ()
    """Qualified names (``generate_step``, ``BatchGenerator.next``) whose lines count; empty: the whole file."""


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why the branches from `lines` of the files matching `path` stay unreached by the properties."""

    path: str
    lines: str
    """``"120-180"``, ``"77"``, a qualified name (``"_metal_kernel"``, ``"Engine.serve"``), or ``"re:PATTERN"``: the
    branch lines whose text the regular expression matches (``"re:if profile_cycles"``), robust to moved lines."""
    reason: str
    runnable: bool = False
    """False: the branches cannot run here (macOS-only, Metal kernel, dead code) and leave the runnable total.
    True: runnable but not reached by design (the reason says why); they stay in the total, as unreached."""
    dead: bool = False
    """True: the branch lines run, but the exits they leave untaken cannot be taken (a guard an earlier return
    decides, a constant argument): those exits leave the runnable total; a line whose every exit ran is listed
    as stale. Only with `runnable` False."""
    speculative: bool = True
    """False: the branch lines decide only what is not the speculative path (instrumentation, the server's prefix
    snapshots): their exits leave the total whether taken or not (the guard itself runs, so no stale check)."""


def resolve(site: Path, scopes: tuple[Scope, ...]) -> list[Path]:
    """The files of `scopes` under `site`, sorted, each once."""
    found = {Path(f) for scope in scopes for f in glob.glob(str(site / scope.path), recursive=True)}
    return sorted(f for f in found if f.suffix == ".py")


def measure(files: list[str]) -> Any:
    """A started coverage.py measurement (branches) of `files`; call before the package is imported."""
    import coverage

    cov = coverage.Coverage(branch=True, include=files, data_file=None, config_file=False)
    cov.start()
    return cov


def dump(cov: Any, files: list[str], out: Path) -> None:
    """Stop `cov` and write, per file, its branch lines' exit counts and the exits never taken (JSON)."""
    cov.stop()
    table = {}
    for file in files:
        analysis = cov._analyze(file)  # what coverage's own reporters use; works for files never imported too
        branches = {line: count for line, count in analysis.exit_counts.items() if count > 1}
        missing = analysis.missing_branch_arcs()
        table[file] = {
            "branches": {str(line): count for line, count in sorted(branches.items())},
            "missing": {str(line): sorted(dests) for line, dests in sorted(missing.items())},
        }
    out.write_text(json.dumps(table), encoding="utf-8")


def qualified_ranges(source: str) -> dict[str, tuple[int, int]]:
    """Every function's and class's qualified name in `source` -> its first (decorators included) and last line."""
    ranges: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                ranges[name] = (first, child.end_lineno or child.lineno)
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return ranges


def line_spans(spec: str, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """A `Reason.lines` or `Scope.within` entry as an inclusive line span."""
    if spec.startswith("re:"):
        return 1, 10**9  # every line of the file; `covers` reads the pattern
    if spec in ranges:
        return ranges[spec]
    first, _, last = spec.partition("-")
    if not first.isdigit() or (last and not last.isdigit()):
        raise ValueError(f"lines: expected 'N', 'N-M' or a qualified name defined in the file, got {spec!r}")
    return int(first), int(last or first)


def covers(reason: Reason, span: tuple[int, int], line: int, text: list[str]) -> bool:
    """Whether `reason` (its lines resolved to `span`) explains the branch from `line` (`text`: the file's lines)."""
    if not span[0] <= line <= span[1]:
        return False
    return not reason.lines.startswith("re:") or re.search(reason.lines[3:], text[line - 1]) is not None


def branch_name(file: str, line: int, dest: int) -> str:
    """``file:line->destination`` (``->exit`` where the branch leaves the function)."""
    return f"{file}:{line}->{dest if dest > 0 else 'exit'}"


def judge(raw: dict, site: Path, scopes: tuple[Scope, ...], reasons: tuple[Reason, ...]) -> dict:
    """The reach of one peer's run from `dump`'s table: totals, and every unreached branch with its reason.

    Returns ``{"total", "not_runnable", "not_speculative", "runnable", "reached", "percent", "unreached":
    [{"branch", "reason", "runnable"}], "ran_though_not_runnable": [...], "reasons": [{"path", "lines", "reason",
    "runnable", "speculative", "branches"}], "files": {file: {"total", "reached"}}}``: a branch a reason calls not
    runnable that ran anyway is listed, so a stale reason shows.
    """
    totals = {"total": 0, "not_runnable": 0, "not_speculative": 0, "reached": 0}
    unreached, ran, files = [], [], {}
    per_reason = {reason: 0 for reason in reasons}
    for file, entry in sorted(raw.items()):
        relative = Path(file).resolve().relative_to(site.resolve()).as_posix()
        source = Path(file).read_text(encoding="utf-8")
        ranges, text = qualified_ranges(source), source.splitlines()
        scope_spans = [
            [line_spans(name, ranges) for name in scope.within] or [(1, 10**9)]
            for scope in scopes
            if fnmatch.fnmatch(relative, scope.path)
        ]
        spans = [span for group in scope_spans for span in group]
        own = [r for r in reasons if fnmatch.fnmatch(relative, r.path)]
        reason_spans = [(r, line_spans(r.lines, ranges)) for r in own]
        file_total = file_reached = 0
        for line_text, count in entry["branches"].items():
            line = int(line_text)
            if not any(a <= line <= b for a, b in spans):
                continue
            missing = entry["missing"].get(line_text, [])
            reason = next((r for r, span in reason_spans if covers(r, span, line, text)), None)
            if reason is not None:
                per_reason[reason] += count
            if reason is not None and not reason.speculative:
                totals["not_speculative"] += count
                continue
            if reason is not None and reason.dead and not reason.runnable:
                totals["not_runnable"] += len(missing)
                file_total += count - len(missing)
                file_reached += count - len(missing)
                ran += [] if missing else [f"{relative}:{line}"]
                continue
            if reason is not None and not reason.runnable:
                totals["not_runnable"] += count
                ran += [f"{relative}:{line}"] if len(missing) < count else []
                continue
            file_total += count
            file_reached += count - len(missing)
            for dest in missing:
                unreached.append(
                    {
                        "branch": branch_name(relative, line, dest),
                        "reason": reason.reason if reason else UNEXPLAINED,
                        "runnable": True,
                    }
                )
        totals["total"] += file_total
        totals["reached"] += file_reached
        files[relative] = {"total": file_total, "reached": file_reached}
    runnable = totals["total"]
    return {
        "total": runnable + totals["not_runnable"] + totals["not_speculative"],
        "not_runnable": totals["not_runnable"],
        "not_speculative": totals["not_speculative"],
        "runnable": runnable,
        "reached": totals["reached"],
        "percent": round(100.0 * totals["reached"] / runnable, 1) if runnable else None,
        "unreached": unreached,
        "ran_though_not_runnable": ran,
        "reasons": [
            {
                "path": r.path,
                "lines": r.lines,
                "reason": r.reason,
                "runnable": r.runnable and r.speculative,
                "speculative": r.speculative,
                "branches": n,
            }
            for r, n in per_reason.items()
        ],
        "files": files,
    }


def compact(branches: list[str]) -> str:
    """``a.py:3->4, a.py:3->exit, a.py:9->12`` as ``a.py: 3, 9``: the branch lines per file, for a table cell."""
    lines: dict[str, list[int]] = {}
    for branch in branches:
        file, _, rest = branch.rpartition(":")
        line = int(rest.split("->")[0])
        if line not in lines.setdefault(file, []):
            lines[file].append(line)
    return "; ".join(f"{file}: {', '.join(map(str, spans(sorted(ls))))}" for file, ls in lines.items())


def spans(lines: list[int]) -> list[str]:
    """Sorted line numbers as runs of neighbours within 3 lines: [1, 2, 4, 10] -> ['1-4', '10']."""
    runs: list[list[int]] = []
    for line in lines:
        if runs and line - runs[-1][-1] <= 3:
            runs[-1].append(line)
        else:
            runs.append([line])
    return [f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs]
