"""`harness summary`: the answers of a results file, its known-good set per machine and its grid
(`render.summary` words them; `workflows.answering` answers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import cast

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.render.summary import print_history, render_answer


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("summary", help="print the outcome table of a results file")
    flags.add_db(p)
    p.add_argument("db_file", nargs="?", type=Path, default=None, metavar="DB", help="the results file (the same as --db)")
    p.add_argument("--run-id", default="", help="only this run")
    p.add_argument("--wide", action="store_true", help="the full grid (cells × scenarios, one word each) and every line's answer")
    p.add_argument("--json", action="store_true", help="every outcome row as one JSON object per line")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.storage.opening import open_results
    from harness.workflows.answering import answer

    args.db = args.db_file or args.db
    if args.json:
        _print_rows(args.db, args.run_id or None)
        return EXIT_OK
    with open_results(args.db, read_only=True) as store:
        found = answer(store, args.run_id or None, loud=not args.wide)  # the full grid prints every test
    if not args.run_id:
        print_history(Path(args.db), console)
    render_answer(found, console, title=f"{args.db}" + (f" run {args.run_id}" if args.run_id else ""), wide=args.wide)
    return EXIT_OK


def _print_rows(db: Path, run_id: str | None) -> None:
    """Every outcome row as one JSON object per line; from a DuckDB file a chunk at a time, not all
    held at once (a suite's 2,000,000 rows took 3.6 GB)."""
    from harness.storage import queries
    from harness.storage.opening import open_results
    from harness.storage.resultsfile import SqlResultsFile

    with open_results(db, read_only=True) as store:
        sql = hasattr(store, "fetch_chunks")  # a runner's JSON-lines shard has no SQL, and few rows
        rows = queries.each_outcome_row(cast(SqlResultsFile, store), run_id) if sql else store.outcome_rows(run_id)
        for row in rows:
            print(json.dumps(row, default=str))
