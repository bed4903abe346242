"""A reader's view of a results file: the file, plus what the journals beside it hold past its folded offsets.

DuckDB lets no other process open a file one process writes, so harness writers journal their
records and fold them into a copy swapped in by rename (`store_writing`). A reader opens the file
read-only and lays the journals' unfolded records over its tables through temporary views, in its
own connection only: it sees each outcome the moment it is journaled, and never waits for a writer.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import duckdb

from harness.errors import StoreError
from harness.storage.history import lay_over
from harness.storage.journal import journals, pending
from harness.storage.store_file import DbFile, identity, within_memory
from harness.storage.store_rows import Rows, insert_many
from harness.storage.store_schema import CELL_COLUMNS, OUTCOME_COLUMNS, RELEASE_COLUMNS, RUN_COLUMNS, current_view, folded


def open_snapshot(db: DbFile) -> duckdb.DuckDBPyConnection:
    """A read-only connection with the journals' unfolded records laid over it.

    The file and the journals must agree: a writer that folded a journal into a new file
    between our open and our reading the journals may already have deleted it. So the
    file's identity is checked around the two, and a swap in between means: once more.
    """
    for _ in range(20):
        before = identity(db.where)
        con = db.connect(read_only=True, wait=db.lock_wait)
        try:
            catalog, journaled = overlay(con, db.where)
            lay_over(con, catalog, "temp.journal_outcomes" if journaled else None, journaled)
            current_view(con)
        except BaseException:
            con.close()
            raise
        if identity(db.where) == before:
            return con
        con.close()
    raise StoreError(f"{db.path!r} was replaced 20 times while being opened; rerun (are writers folding it in a loop?)")


def overlay(con: duckdb.DuckDBPyConnection, db: str) -> tuple[str, set[tuple[str, str]]]:
    """Shadow runs, cells and releases with temporary views that add the journals' unfolded
    records, in this connection only (a read-only connection may create TEMP objects, and
    unqualified names, `outcomes_v`'s included, resolve to them first); the journals' outcomes go
    into temp table `journal_outcomes`, for `history.lay_over` to settle over the file's.

    Each record is taken as a fold would write it: the first outcome or run of a key, the last
    cell and list of releases; a key already in the file keeps its row. Returns the file's
    catalog name and the (cell, test) of the journaled outcomes.
    """
    row = con.execute("SELECT current_database()").fetchone()
    name = str(row[0] if row else "")
    if not journals(db):
        return name, set()
    found = pending(db, folded(con))
    if not found:
        return name, set()
    found_rows = Rows.of(found.all())
    releases = found_rows.releases
    catalog = '"' + name.replace('"', '""') + '"'
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}
    keys = {
        "outcomes": ("run_id", "cell_id", "scenario", "repeat"),
        "runs": ("run_id",),
        "cells": ("run_id", "cell_id"),
        "releases": ("run_id", "axis"),
    }
    layers = {
        "outcomes": (OUTCOME_COLUMNS, list(found_rows.outcomes.values()), "keep"),
        "runs": (RUN_COLUMNS, list(found_rows.runs.values()), "keep"),
        "cells": (CELL_COLUMNS, list(found_rows.cells.values()), "replace"),
        "releases": (RELEASE_COLUMNS, [r for rows in releases.values() for r in rows], "replace"),
    }
    for table, (columns, rows, rule) in layers.items():
        if table not in tables or (not rows and not (table == "releases" and releases)):
            continue
        present = [r[0] for r in con.execute(f"DESCRIBE {catalog}.main.{table}").fetchall()]
        chosen = [i for i, c in enumerate(columns) if c in present]  # an older file lacks later columns
        names = [columns[i] for i in chosen]
        con.execute(f"CREATE OR REPLACE TEMP TABLE journal_{table} AS SELECT * FROM {catalog}.main.{table} LIMIT 0")
        insert_many(con, f"temp.journal_{table}", names, ([r[i] for i in chosen] for r in rows))
        match = " AND ".join(f"j.{k} = t.{k}" for k in keys[table])
        if table == "outcomes":
            continue  # settled over the file's current state and history by `history.lay_over`
        if rule == "keep":  # the file's row wins: a fold would do nothing for this key
            sql = (
                f"SELECT * FROM {catalog}.main.{table} UNION ALL BY NAME "
                f"SELECT * FROM temp.journal_{table} j WHERE NOT EXISTS (SELECT 1 FROM {catalog}.main.{table} t WHERE {match})"
            )
        else:  # the journal's row wins (a rebuilt cell, a run's newer list of releases)
            replaced = list(releases) if table == "releases" else list(found_rows.cells)
            key_columns = ", ".join(f"{k} TEXT" for k in keys[table])
            con.execute(f"CREATE OR REPLACE TEMP TABLE journal_{table}_keys ({key_columns})")
            insert_many(con, f"temp.journal_{table}_keys", keys[table], (list(k) for k in replaced))
            sql = (
                f"SELECT * FROM {catalog}.main.{table} t WHERE NOT EXISTS (SELECT 1 FROM temp.journal_{table}_keys j WHERE {match}) "
                f"UNION ALL BY NAME SELECT * FROM temp.journal_{table}"
            )
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS {sql}")
    touched = {(str(r[_CELL]), str(r[_TEST] or r[_NODE])) for r in found_rows.outcomes.values()}
    return name, touched if "outcomes" in tables else set()


_CELL, _NODE, _TEST = (OUTCOME_COLUMNS.index(c) for c in ("cell_id", "scenario", "test_id"))


def read_aside(db: DbFile, lock: Any, sql: str, params: Sequence[Any] = ()) -> Future[list[tuple[Any, ...]]] | None:
    """`sql`'s rows, read on a connection of its own (a snapshot: the journals laid over) in a thread
    while the caller goes on in Python: DuckDB lets go of the GIL while it works, so a query the
    caller needs later takes the core Python leaves idle. An error is raised where the rows are asked
    for. None where this thread holds the file's `lock` (one per path and process, through another
    Store of the file perhaps): a thread waiting for it would wait forever; read at once."""
    # `_is_owned`: CPython's own test (threading.Condition's) of whether this thread holds an RLock
    owned = getattr(lock, "_is_owned", None)
    if owned is None or owned():
        return None
    found: Future[list[tuple[Any, ...]]] = Future()

    def read() -> None:
        try:
            with lock:  # the store's reads take turns with it, as with a writer of the file in this process
                con = open_snapshot(db)
                try:
                    with within_memory(db.path):
                        found.set_result(con.execute(sql, list(params)).fetchall())
                finally:
                    con.close()
        except BaseException as exc:  # handed to the caller
            found.set_exception(exc)

    threading.Thread(target=read, name="harness-read-aside", daemon=True).start()
    return found
