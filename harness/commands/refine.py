"""`harness refine`: the face of `workflows.refining`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.render.progress import print_rounds
from harness.workflows.refining import refine_and_attribute, trip_account, write_probe_matrix


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "refine",
        help="turn a results file's ranges into exact releases: build the releases between tested ones, on this machine",
        description="Bisects every range 'between X (fails) and Z (passes); not built: Y…' of the file whose machine is this one, "
        "building probe cells on the same line (other axes held), stored as ordinary outcomes under run refine-<machine>. "
        "Settings (index, find-links, python) come from --matrix. See docs/attribution.md.",
    )
    flags.add_db(p)
    flags.add_matrix(p, "matrix for the index settings and python (default: matrix.toml)")
    p.add_argument("--limit", type=int, default=None, help="build at most this many probe cells (default: the matrix's refine_limit)")
    p.add_argument("--lines", choices=["all", "first"], default=None, help="refine every line of a failure, or only its first")
    p.add_argument("--scenario", action="append", default=[], help="a scenario file the sweep ran from outside scenarios/ (repeatable)")
    p.add_argument(
        "--git",
        action="append",
        default=[],
        help="AXIS=PATH: a clone of that axis' repository with release tags; exact answers are walked down to the commit and its PR",
    )
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live")
    p.add_argument(
        "--plan",
        type=Path,
        default=None,
        help="build nothing: write a matrix of the probe cells the next --rounds rounds may need (for an offline runner)",
    )
    p.add_argument("--rounds", type=int, default=2, help="with --plan: rounds of bisection to prepare for (default: 2)")
    p.add_argument("--machine", default="", help="with --plan: only answers on machines whose label contains this, e.g. H200")
    p.add_argument("--axis", action="append", default=[], help="with --plan: only ranges along this axis (repeatable)")
    p.add_argument(
        "--account",
        action="store_true",
        help="build nothing: say per line of the matrix how each answer of --db (a .jsonl shard too) was reached, "
        "against what the wheelhouse held, and whether a second trip can help (the one trip's closing lines)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="with --account: the wheelhouse folder (default: the matrix's find_links folder with harness-wheelhouse.json)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.render.summary import render_transitions

    if args.account:  # on the offline runner too: its .jsonl shard, no DuckDB
        for line in trip_account(args.db, args.matrix, args.wheelhouse):
            console.print(line, soft_wrap=True, highlight=False)
        return EXIT_OK
    db = Path(flags.existing_duckdb(args.db))
    if args.plan:
        plan = write_probe_matrix(db, args.matrix, args.plan, args.rounds, args.machine, args.axis)
        versions = sorted({f"{p.line.axis} {p.value}" for p in plan.probes})
        lines = len({(p.line.machine, p.line.axis, p.line.held) for p in plan.probes})
        console.print(f"wrote {args.plan}: {len(plan.probes)} probe cell(s) on {lines} line(s); releases to prepare: {', '.join(versions)}")
        for line in plan.left_out:
            console.print(f"  left out: {line}", soft_wrap=True, highlight=False)
        return EXIT_OK
    done = refine_and_attribute(
        db,
        args.matrix,
        git=args.git,
        limit=args.limit,
        share=args.lines,
        scenario_files=args.scenario,
        env_root=args.env_root,
        on_round=print_rounds(console),
        on_probe=lambda line: console.print(line, highlight=False),
    )
    console.print(f"{done.report.line()}; probes stored under run {done.run_id}")
    for found in done.commits:
        console.print(found.line(), highlight=False)
    result = done.answers.result
    render_transitions(result.transitions, console, result.flaky, result.machines)
    return EXIT_OK
