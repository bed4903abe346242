"""`harness explain`: every regression and fix since the last run narrowed to its cause, by running it.

The face of `workflows.explain`: which changes (all, or `--test`), how hard to look (`--budget`
probes or minutes in all, `--repeats` per probe), and the causes it found, stored in the results
file for `harness changes`, the summary and the published page to show.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.workflows.explain import ExplainOptions, explain_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="narrow every regression and fix since the last run to its cause (a package, an upstream commit, your commit) by running it",
        description=(
            "For each test that started failing or was fixed since the run before the newest sweep (or --since), in the cell where "
            "it changed: what moved between the two runs (packages, a git axis's commits, your code, the machine); where several "
            "things moved, the changed tests run again in the night before's environment with the moves brought forward one "
            "at a time or halved (delta debugging), then the commits of a git axis or of your repository bisected; each probe "
            "runs them --repeats times, and a probe whose runs disagree is inconclusive (flaky), never a culprit. The causes "
            "are stored in the results file: `harness changes` shows them. Exit 0 with the causes; 2 for bad input."
        ),
    )
    flags.add_db(p)
    p.add_argument("--since", default="", help="a run id of the file, or a date: explain the changes since then")
    p.add_argument("--budget", default="30", help="the most probes in all (20), or minutes (30m); what it leaves is said (default 30)")
    p.add_argument("--repeats", type=int, default=3, help="runs of the changed tests per probe; runs that disagree are flaky (default 3)")
    p.add_argument(
        "--test", action="append", default=[], metavar="NODEID", help="explain only the changes of this test, file or scenario (repeatable)"
    )
    p.add_argument("--env-root", type=Path, default=None, help="where the probes' virtualenvs live (default: the runs' own env folder)")


def run(args: argparse.Namespace, console: Console) -> int:
    options = ExplainOptions(args.db, args.since, args.budget, args.repeats, args.env_root, list(args.test))
    done = explain_file(options, on_line=lambda text: console.print(escape(text), soft_wrap=True, highlight=False))
    if done:
        probes = sum(len(d.found.probes) for d in done)
        seconds = sum(d.seconds for d in done)
        console.print(f"{len(done)} change(s) explained with {probes} probe(s) in {seconds:.0f} s; `harness changes` shows each cause")
    return EXIT_OK
