"""Command line: run the verification, regenerate the report from JSON, and check or show the ledger.

ncm-verify verify [--impl NAME_OR_PATH] [--profile ci] [--reports DIR] [--cache DIR] [--jobs 2] [--rerun-selftests]
ncm-verify report [--reports DIR] [--ledger PATH]
ncm-verify peers [--profile dev] [--reports DIR] [--jobs 2] [--seed 0] [--rebuild]
ncm-verify ledger check [--ledger PATH] [--no-collect]
ncm-verify ledger show [--ledger PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ncm_verify.report.ledger import LedgerError, check_ledger, load_ledger
from ncm_verify.report.output import print_report, write_reports


def command_report(args) -> int:
    """Rebuild the report from a run's JSON; the exit status is the same verdict the run had."""
    reports_dir = Path(args.reports)
    document = write_reports(reports_dir, args.ledger)
    print_report(document, reports_dir)
    return document.verdict.exit_status


def command_verify(args) -> int:
    from ncm_verify.run import ROOT, verify

    if not (ROOT / "properties").is_dir():
        print(
            f"ncm-verify: no properties/ in {ROOT}: the suite is neither a checkout nor an installed wheel holding "
            "its properties and self-tests (reinstall it: pip install ncm-verify from a wheel or git URL)",
            file=sys.stderr,
        )
        return 2

    return verify(
        args.impl,
        args.profile,
        Path(args.reports),
        args.jobs,
        rerun_selftests=args.rerun_selftests,
        seed=args.seed,
        cache=args.cache,
        model=args.model,
        required=[item.strip() for items in args.require for item in items.split(",") if item.strip()],
        properties=args.properties or None,
        selftests=not args.no_selftests,
    )


def command_peers(args) -> int:
    from ncm_verify.run_peers import rebuild_comparison, verify_peers

    if args.rebuild:
        return rebuild_comparison(Path(args.reports))
    return verify_peers(args.profile, Path(args.reports), args.jobs, args.seed)


def command_ledger_check(args) -> int:
    problems = check_ledger(args.ledger, collect=not args.no_collect)
    for problem in problems:
        print(f"ledger: {problem}", file=sys.stderr)
    if not problems:
        print("ledger: ok")
    return 1 if problems else 0


def command_ledger_show(args) -> int:
    ledger = load_ledger(args.ledger)
    for claim in ledger["claims"]:
        print(f"{claim['id']}: {claim['statement']}")
        print(f"    sources: {', '.join(claim['sources']) or '-'}")
        for node in claim["properties"]:
            print(f"    property: {node}")
        if claim.get("not_checkable"):
            print(f"    not checkable: {claim['not_checkable']}")
    return 0


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="ncm-verify", description=__doc__.splitlines()[0])
    commands = main_parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("verify", help="run properties, self-tests and the report; exit with the verdict")
    run.add_argument("--impl", default="ncm_verify.reference", help="module name or file path (default: %(default)s)")
    run.add_argument("--profile", default="ci", help="Hypothesis profile: dev, ci, thorough (default: %(default)s)")
    run.add_argument("--reports", default="reports", help="folder for evidence and report (default: %(default)s)")
    run.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="folder for the reference evidence and self-test results reused across runs and reports folders "
        "(default: .ncm-verify-cache at the checkout's root; for an installed suite, in the current folder)",
    )
    run.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers (default: %(default)s)")
    run.add_argument("--seed", type=int, default=None, help="redraw the profile's examples from this seed")
    run.add_argument("--rerun-selftests", action="store_true", help="rerun the self-tests even if cached")
    run.add_argument(
        "--model",
        default=None,
        help="checkpoint the model-level properties judge on path (b) (default: fixtures/ncm_concept_tiny.safetensors)",
    )
    run.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="C5,C11,TreeVerification",
        help="claims (shown on the module's own code) and protocol families (every name its own and judged) the "
        "module must provide; the run fails listing what is missing",
    )
    run.add_argument(
        "--properties",
        nargs="+",
        default=None,
        metavar="properties/test_x.py[::test_y]",
        help="run only these property files or node ids (a quick look: the claims left unrun fail the verdict)",
    )
    run.add_argument(
        "--no-selftests",
        action="store_true",
        help="skip the planted bugs and calibration (a quick look: the verdict fails, the suite's teeth unproven)",
    )
    run.set_defaults(run=command_verify)
    report = commands.add_parser("report", help="write verify.json/.md/.html from the JSON of a run")
    report.add_argument("--reports", default="reports", help="folder holding evidence.json (default: %(default)s)")
    report.add_argument("--ledger", type=Path, default=None, help="ledger.json (default: the project's)")
    report.set_defaults(run=command_report)
    peers = commands.add_parser("peers", help="the chain properties against each peer, and their comparison")
    peers.add_argument("--profile", default="dev", help="Hypothesis profile (default: %(default)s)")
    peers.add_argument("--reports", default="reports", help="folder for peers/ and peers.md (default: %(default)s)")
    peers.add_argument("--jobs", type=int, default=2, help="pytest-xdist workers (default: %(default)s)")
    peers.add_argument("--seed", type=int, default=0, help="Hypothesis seed of every peer's run (default: %(default)s)")
    peers.add_argument(
        "--rebuild", action="store_true", help="rewrite peers.md/.json from the folder's JSON, rerunning nothing"
    )
    peers.set_defaults(run=command_peers)
    ledger = commands.add_parser("ledger", help="check or show ledger.json")
    ledger_commands = ledger.add_subparsers(dest="ledger_command", required=True)
    check = ledger_commands.add_parser("check", help="schema, sources, and the properties pytest collects")
    check.add_argument("--ledger", type=Path, default=None)
    check.add_argument("--no-collect", action="store_true", help="skip the pytest collection checks")
    check.set_defaults(run=command_ledger_check)
    show = ledger_commands.add_parser("show", help="print each claim with its sources and properties")
    show.add_argument("--ledger", type=Path, default=None)
    show.set_defaults(run=command_ledger_show)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except LedgerError as error:
        print(error, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
