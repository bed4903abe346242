"""`harness compact`: a results file split into its current state and its history, and written afresh.

A file an older harness wrote keeps every run's rows in `outcomes`, and every answer folds them
all. Any writer of the file (`harness sweep`, `attribute`, `merge`) splits it once, by migration
`0010_history` (docs/store.md, "History"); this command does that for a file nobody sweeps into
(a copy downloaded from CI, a file to publish), and then writes the file afresh: DuckDB reuses the
space of deleted rows but never gives it back, so a file split from 30 nights kept their size.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console

from harness.errors import EXIT_OK, BadInput
from harness.workflows.support import keep_support


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compact",
        help="split a results file an older harness wrote into its current state and the history of what changed, and rewrite it",
        description="Apply the schema migrations the file lacks (a file from before the history split gets its runs settled into "
        "the current state and spans of history), then write the file afresh without the space of deleted rows. "
        "Exit 0; 2 for a missing or foreign file.",
    )
    p.add_argument("--db", type=Path, default=Path("results/compat.duckdb"), help="the results file (default results/compat.duckdb)")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.storage import queries
    from harness.storage.store import Store

    if not args.db.is_file() or args.db.suffix == ".jsonl":
        raise BadInput(f"no DuckDB results file at {str(args.db)!r}; pass --db with the .duckdb file a sweep or a merge wrote")
    started, size = time.perf_counter(), args.db.stat().st_size
    with Store(args.db, read_only=True) as reader:
        before = set(reader.applied_migrations())
    with Store(args.db) as store:  # a writer applies the missing migrations (the split among them) before anything else
        store.compact()  # and the file is written afresh, without the space deleted rows left
        keep_support(store)  # the Support page's tables, once here rather than on each first render
        applied = [m for m in store.applied_migrations() if m not in before]
        current, kept = queries.row_count(store, "outcomes"), queries.row_count(store, "history")
    done = f"applied {', '.join(applied)}" if applied else "already up to date"
    mib = f"{size / 2**20:,.1f} -> {args.db.stat().st_size / 2**20:,.1f} MiB"
    console.print(
        f"{args.db}: {done}; {current:,} current outcome(s), {kept:,} history row(s); {mib} ({time.perf_counter() - started:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_OK
