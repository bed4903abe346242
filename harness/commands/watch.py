"""`harness watch`: the face of `workflows.watching`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.commands import flags
from harness.render.progress import ProgressReporter
from harness.workflows.watching import WatchOptions, print_round, watch


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="test the releases newer than the results file holds against the last known-good set; exit 1 names a regression",
        description="Asks the index which releases of each axis are newer than the results file holds, builds the known-good "
        "set with one axis moved to its newest release (an ordinary sweep into the same file), refines what breaks down to the "
        "exact release, and reports: exit 0 nothing new broke, 1 a regression (scenario, signature, the exact release and "
        "the one before it, on this machine), 2 bad input. See docs/tool.md.",
    )
    flags.add_matrix(p, "matrix for the axes and the index settings (default: matrix.toml)")
    flags.add_db(p)
    p.add_argument(
        "--exclude-newer",
        default="",
        help="stand-in for now: only releases uploaded before this date (e.g. 2026-11-20), and the new cells resolved as of it "
        "(default: the matrix's exclude_newer, else now)",
    )
    p.add_argument("--axis", action="append", default=[], help="watch only this axis (repeatable; default: every axis with releases)")
    p.add_argument("--scenario", action="append", default=[], help="a scenario file the sweep ran from outside scenarios/ (repeatable)")
    p.add_argument(
        "--tests",
        nargs="+",
        default=[],
        metavar="PATH",
        help="your pytest suite, as `harness sweep --tests` takes it (default: the matrix's [tests] table, else the suite the "
        "results file's newest run recorded); the report groups tests by file and signature",
    )
    p.add_argument("--tests-root", default="", help="with --tests: the folder where you run pytest (default .)")
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    p.add_argument("--test-requirement", action="append", default=[], help="a test dependency for every new cell (repeatable)")
    flags.add_allow_empty(p)
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text", help="the report on stdout (default: text)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the markdown report here (a CI summary, an issue body)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    p.add_argument("--dry-run", action="store_true", help="say what is new and which cells would be built; build nothing")
    p.add_argument(
        "--no-refine", action="store_true", help="leave a failing release's range as a range (default: build the releases between)"
    )
    p.add_argument("--refine-limit", type=int, default=None, help="build at most this many probe cells (default: the matrix's)")
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live (default: the matrix's env_dir)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI); progress goes to stderr either way")


def run(args: argparse.Namespace, console: Console) -> int:

    log = Console(stderr=True, width=console.width)
    options = WatchOptions(args.matrix, args.db, args.exclude_newer, args.axis, args.scenario, args.env_root)
    options.refine, options.refine_limit, options.dry_run = not args.no_refine, args.refine_limit, args.dry_run
    options.tests, options.tests_root, options.keyword, options.marker = args.tests, args.tests_root, args.keyword, args.marker
    options.test_requirements, options.allow_empty = args.test_requirement, args.allow_empty
    progress = None if args.no_progress else ProgressReporter(log)
    report = watch(options, progress, print_round(lambda line: log.print(escape(line), highlight=False)))  # a node id has [brackets]
    for path, text in ((args.markdown, report.markdown()), (args.json, report.json() + "\n")):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.format == "markdown":
        print(report.markdown(), end="")
    elif args.format == "json":
        print(report.json())
    else:
        print("\n".join(report.text()))
    return report.exit_status
