"""`harness merge SOURCES… --db FILE`: results files (a runner's .jsonl shards, other .duckdb
files) brought into one DuckDB store, each outcome once (`Store.merge_records`, `merge_database`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK, BadInput
from harness.workflows.support import keep_support


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine results files (.jsonl shards, .duckdb) into one DuckDB store, without duplicates")
    p.add_argument("sources", nargs="+", type=Path, help="results files to bring in")
    p.add_argument("--db", type=Path, default=flags.DEFAULT_DB, help="the DuckDB store to merge into (default: results/compat.duckdb)")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.storage import queries
    from harness.storage.shardfile import read_records
    from harness.storage.store import Store

    missing = [str(p) for p in args.sources if not p.is_file()]
    if missing:
        raise BadInput(f"no such results file(s): {', '.join(missing)}; pass .jsonl shards or .duckdb files")
    with Store(args.db) as store:
        for source in args.sources:
            added = store.merge_records(read_records(source)) if source.suffix == ".jsonl" else store.merge_database(source)
            console.print(f"{source}: {added} outcome(s) added")
        # the settle of what came in deletes what it merged into spans: give the space back once it is most of the file
        compacted = " (written afresh: a third of its space or more was free)" if store.compact(when_sparse=True) else ""
        keep_support(store)  # the Support page's tables, once here rather than on each first render
        current, kept, twice = queries.row_count(store), queries.row_count(store, "history"), queries.duplicate_key_count(store)
        console.print(f"{args.db}: {current} current outcome(s), {kept} history row(s), {twice} duplicate key(s){compacted}")
    return EXIT_OK
