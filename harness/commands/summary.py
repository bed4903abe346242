"""`harness summary`: the answers of a results file, its known-good set per machine and its grid
(`render.summary` words them; `workflows.answering` answers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    with open_results(args.db, read_only=True) as store:
        found = answer(store, args.run_id or None, loud=not (args.json or args.wide))  # both print every test
    if not args.json and not args.run_id:
        print_history(Path(args.db), console)
    if args.json:
        for row in found.rows:
            print(json.dumps(row, default=str))
        return EXIT_OK
    render_answer(found, console, title=f"{args.db}" + (f" run {args.run_id}" if args.run_id else ""), wide=args.wide)
    return EXIT_OK
