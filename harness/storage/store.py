"""The results store: a DuckDB file, its named migrations, and everything that writes to it.

Outcomes are keyed by (run, cell, scenario, repeat) and only ever inserted: a sweep killed at
any moment leaves whole rows or none, and a rerun fills in exactly the missing keys. Users
query the view `outcomes_v` (documented in docs/store.md). Reads live in `queries.py` and the
modules beside it (`recorded`, `attributed`, `pages`, `suites`), named by what they return; the
schema, the writes and the merges live here and in the `store_*` modules beside this one.
Between them they hold all of the harness's SQL.

`Store` is the one face of a DuckDB results file. Its parts: `store_schema` (the tables, the
view and the named migrations), `store_rows` (records as rows, merges, transitions),
`store_file` (opening and creating the file, writers' turns, what a failure means),
`store_reading` (a reader's view) and `store_writing` (a writer's journal and folds). Code that
runs on either kind of results file, this or a JSON-lines shard, is typed against
`resultsfile.ResultsFile`.

Watching a sweep live (docs/store.md, "Readers and writers at once"): DuckDB lets one process
write a file and, meanwhile, no other process open it at all, not even read-only. So no harness
process ever writes the file in place, nor holds it between calls. A writer appends each record
to its own journal beside the file (`journal.py`: fsynced, locked by no one) and, every
FOLD_SECONDS and at close, folds the journals into a copy of the file, which one rename swaps in
(`store_writing`). Readers open the file read-only for one read (or one `reading()` block) and
lay the journals' unfolded records over it through temporary views (`store_reading`). So a
reader never waits for a writer and never makes one wait: the dashboard, `summary` and the
analyses see each outcome the moment it is journaled, and a user's own
`duckdb.connect(path, read_only=True)` always opens, seeing the file as of the last fold.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from harness.analysis.outcome import CellRecord, Collection, Outcome
from harness.analysis.status import NOT_COLLECTED
from harness.errors import StoreError
from harness.storage import cached, queries, store_rows
from harness.storage.store_file import DbFile, is_lock_error, store_error, within_memory
from harness.storage.store_reading import open_snapshot, read_aside
from harness.storage.store_schema import (
    CELL_COLUMNS,
    MIGRATIONS,
    OUTCOME_COLUMNS,
    OUTCOMES_VIEW,
    RELEASE_COLUMNS,
    RUN_COLUMNS,
    migrate,
    now,
)
from harness.storage.store_writing import CLOSE_WAIT_SECONDS, FOLD_TRY_SECONDS, Writer

__all__ = [
    "CELL_COLUMNS",
    "CLOSE_WAIT_SECONDS",
    "FOLD_SECONDS",
    "FOLD_TRY_SECONDS",
    "LOCK_WAIT_SECONDS",
    "MIGRATIONS",
    "OUTCOMES_VIEW",
    "OUTCOME_COLUMNS",
    "RELEASE_COLUMNS",
    "RUN_COLUMNS",
    "CellRecord",
    "Outcome",
    "Store",
    "is_lock_error",
    "store_error",
]

#: How long to wait for a lock the harness does not take for moments only: another writer's turn
#: (a merge, a fold of a large file), or a process outside the harness that opened the file for
#: writing (DuckDB then refuses everyone else); then say who holds it.
LOCK_WAIT_SECONDS = float(os.environ.get("HARNESS_LOCK_WAIT", "60"))
#: A writer folds its journal into the file at most this often (and when it closes). A fold copies
#: the file, inserts, checkpoints and renames: 0.08 s for 8.7 MB, 0.34 s for 380 MB (here); on a
#: large file the interval grows to keep folds under ~5% of the time. Read when a Store opens.
FOLD_SECONDS = float(os.environ.get("HARNESS_FOLD_SECONDS", "2"))


class Store:
    """One results file. No DuckDB connection is held between calls (see the module docstring).

    Readers (`read_only=True`: the dashboard, `summary`, queries) see the file plus the records
    of every journal beside it that the file does not hold yet. Writers append to their own
    journal and fold it into a copy swapped in by rename. `con` holds a connection until
    `close()`, for bulk tools and tests.

    A `resultsfile.SqlResultsFile`: what a sweep writes through, and what `queries` reads.
    """

    def __init__(self, path: Path | str, *, read_only: bool = False, lock_wait: float | None = None) -> None:
        self._db = DbFile(str(path), read_only=read_only, lock_wait=LOCK_WAIT_SECONDS if lock_wait is None else lock_wait)
        self._writer = Writer(self._db, FOLD_SECONDS)
        self._lock = self._db.lock  # one per file and process: see store_file.path_lock
        self._snapshot: duckdb.DuckDBPyConnection | None = None  # a reader's `con`
        self._session: duckdb.DuckDBPyConnection | None = None  # the view of the `reading()` block under way
        self._known: dict[str, set[tuple[str, str, int]]] = {}
        if self.path == ":memory:":
            self._writer.held = duckdb.connect(":memory:")
            migrate(self._writer.held)
            return
        self._db.check()
        if not read_only:
            self._writer.prepare()

    @property
    def path(self) -> str:
        return self._db.path

    @property
    def read_only(self) -> bool:
        return self._db.read_only

    @property
    def lock_wait(self) -> float:
        """How long to wait for another process's lock before saying who holds it."""
        return self._db.lock_wait

    @lock_wait.setter
    def lock_wait(self, seconds: float) -> None:
        self._db.lock_wait = seconds

    @property
    def left_journal(self) -> str:
        """After close: the journal left unfolded because another writer kept its turn ("" if none)."""
        return self._writer.left_journal

    @property
    def watchable(self) -> bool:
        """Readers can watch this file's writers (the dashboard's progress line): any file on disk."""
        return self.path != ":memory:"

    # -- opening and closing ---------------------------------------------------------------
    def close(self, *, waiting: float = CLOSE_WAIT_SECONDS) -> None:
        """Fold what this writer journaled (waiting up to `waiting` s for another writer's turn) and let go of the file."""
        with self._lock:
            try:
                self._writer.close(waiting)
            finally:
                if self._snapshot is not None:
                    con, self._snapshot = self._snapshot, None
                    self._db.close(con)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Already failing (a full disk, Ctrl-C): fold briefly and never hide the first error.
        # Whatever is not folded stays in the journal, which the next writer folds.
        self._writer.failed = True
        try:
            self.close(waiting=2.0)
        except (StoreError, duckdb.Error, OSError):
            pass

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """A connection held until `close()`, for bulk tools and tests. A reader's is a snapshot of
        the file and the journals as they were when it opened. A writer's writes the file in place:
        it takes the writers' turn and DuckDB's write lock for as long as it is held, so no other
        writer folds and no reader opens the file meanwhile (the journals are folded first)."""
        with self._lock:
            if not self.read_only:
                return self._writer.hold()
            if self._snapshot is None:
                self._snapshot = open_snapshot(self._db)
            return self._snapshot

    def _held(self) -> duckdb.DuckDBPyConnection | None:
        return self._snapshot if self.read_only else self._writer.held

    # -- reading -----------------------------------------------------------------------------
    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One consistent view for several reads: the file and the journals' unfolded records."""
        held = self._held()
        if held is not None:
            yield held
            return
        with self._lock:
            if self._session is not None:  # nested: the same view
                yield self._session
                return
            con = open_snapshot(self._db)
            try:
                self._session = con
                yield con
            finally:
                self._session = None
                con.close()

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts: the one primitive `queries` builds on."""
        with self.reading() as con, within_memory(self.path):
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def fetch_tuples(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows as tuples, in the order the query lists its columns, to be read once: for reads of 400,000 rows,
        where the caller builds its own dicts (`queries.outcome_rows`). Read column by column (`fetchnumpy`, then
        each column's `tolist`): the same values and types as `fetchall`, NULL as None, in half the time at 400,000
        rows x 14 columns. The tuples are made as the caller reads them, never held in a list: 0.6 s less at 1,000,000 rows."""
        with self.reading() as con, within_memory(self.path):
            columns = con.execute(sql, list(params)).fetchnumpy()
            lists = [column.tolist() for column in columns.values()]
        return zip(*lists)

    def fetch_aside(self, sql: str, params: Sequence[Any] = ()) -> Future[list[tuple[Any, ...]]]:
        """`fetch_tuples` in a thread on a connection of its own (`store_reading.read_aside`); at once where it writes or holds a view."""
        held = not self.read_only or self._held() is not None or self._session is not None  # its rows must be that view's
        return (None if held else read_aside(self._db, self._lock, sql, params)) or queries.done_with(list(self.fetch_tuples(sql, params)))

    def fetch_chunks(self, sql: str, params: Sequence[Any] = (), size: int = 50_000) -> Iterator[list[tuple[Any, ...]]]:
        """Rows as tuples, `size` at a time, the connection held while they are read: an export of
        every row without them all in memory (`queries.each_outcome_row`)."""
        with self.reading() as con, within_memory(self.path):
            cur = con.execute(sql, list(params))
            while chunk := cur.fetchmany(size):
                yield chunk

    def has_table(self, name: str) -> bool:
        rows = self.fetch("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = ?", [name])
        return bool(rows and rows[0]["n"])

    def applied_migrations(self) -> list[str]:
        return [r["name"] for r in self.fetch("SELECT name FROM schema_migrations ORDER BY name")]

    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        """(cell, scenario, repeat) already stored for a run: a rerun computes only the rest."""
        # a test the run did not collect (`not_collected`) was never computed: not done
        of_table = f"SELECT cell_id, scenario, repeat FROM {{}} WHERE run_id = ? AND status <> '{NOT_COLLECTED}'"
        rows = self.fetch(of_table.format("outcomes") + " UNION " + of_table.format("history"), [run_id, run_id])
        keys = {(r["cell_id"], r["scenario"], int(r["repeat"])) for r in rows}
        with self._lock:
            self._known[run_id] = set(keys)
        return keys

    def outcome_rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """`queries.outcome_rows`: every row of `outcomes_v` (of one run, or all)."""
        return queries.outcome_rows(self, run_id)

    def known_releases(self) -> dict[str, list[str]]:
        """`queries.known_releases`: axis -> every release any run listed."""
        return queries.known_releases(self)

    # -- writing -----------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply the missing migrations now; returns their names."""
        with self._lock:
            held = self._held()
            if held is not None:
                return migrate(held)
            before = set(self.applied_migrations())
            with self.writing():
                pass
            return [name for name, _ in MIGRATIONS if name not in before]

    def writing(
        self, *, wait: float | None = None, closing: bool = False, busy: bool = False, rebuild: bool = False
    ) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A transaction on the next version of the file, swapped in when the block ends (`Writer.writing`)."""
        return self._writer.writing(wait=wait, closing=closing, busy=busy, rebuild=rebuild)

    def compact(self, *, when_sparse: bool = False) -> bool:
        """Write the file afresh, without the space of the rows deleted from it (`store_writing.rebuilt`);
        `when_sparse`: only when a third of its blocks or more are free (a merge's settle deletes
        a night's worth of rows: 30 nights of 20,000 tests x 20 cells kept 48 % of 169.5 MiB free,
        82.0 MiB after, written in 1.5 s). Returns whether it did."""
        if when_sparse:
            row = self.fetch("SELECT free_blocks, total_blocks FROM pragma_database_size() WHERE database_name = current_database()")
            if not row or int(row[0]["free_blocks"]) * 3 < int(row[0]["total_blocks"]):
                return False
        with self.writing(rebuild=True):
            pass
        return True

    def fold(self, wait: float = 0.0) -> bool:
        """Bring every journal's new records into the file; False if another writer kept its turn
        (or a process outside the harness the file) for longer than `wait` s: the records then
        wait in the journals, where readers see them."""
        return self._writer.fold(wait)

    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None:
        record = {
            "type": "run",
            "run_id": run_id,
            "started_at": now().isoformat(),
            "matrix_path": matrix_path,
            "matrix_text": matrix_text,
            "settings": settings,
            "harness_version": harness_version,
            "host": host,
        }
        self._writer.record(record)
        self._writer.status(run_id=run_id)

    def record_cell(self, rec: CellRecord) -> None:
        """Latest environment facts for a cell in a run (a rebuild replaces them)."""
        self._writer.record({"type": "cell", **asdict(rec), "built_at": now().isoformat()})

    def record_collection(self, rec: Collection) -> None:
        """What a suite's run collected in a cell: the tests it no longer holds leave the current state at the fold."""
        self._writer.record({"type": "collection", **asdict(rec)})

    def add_outcome(self, outcome: Outcome) -> bool:
        """Insert one outcome; False if its key is already stored (append-only: never overwritten)."""
        d = outcome.serialize()
        key = (d["cell_id"], d["scenario"], int(d["repeat"]))
        with self._lock:
            known = self._known.get(d["run_id"])
            if known is None:
                self.done_keys(d["run_id"])
                known = self._known[d["run_id"]]
            if key in known:
                return False
            added = self._writer.record({"type": "outcome", **d, "started_at": d["started_at"] or now().isoformat()})
            known.add(key)
            return bool(added)

    def record_releases(self, run_id: str, releases: dict[str, list[tuple[str, datetime | None]]]) -> int:
        """The releases on the index of each axis, as the run saw them (replacing its earlier list)."""
        for axis, listed in releases.items():
            self._writer.record(
                {
                    "type": "releases",
                    "run_id": run_id,
                    "axis": axis,
                    "versions": [v for v, _ in listed],
                    "uploaded": [u.isoformat() if u else None for _, u in listed],
                }
            )
        return sum(len(v) for v in releases.values())

    def report(self, **status: Any) -> None:
        """Tell readers what this writer is doing (the dashboard's progress line); best effort."""
        with self._lock:
            self._writer.status(**status)

    # -- merging and answers (analysis.attribution computes them; attributed.transitions reads them)
    def merge_records(self, records: Iterable[dict[str, Any]]) -> int:
        """Bring a JSON-lines shard (or a journal) in, in one transaction; returns the outcomes added.

        Stored answers described the outcomes before the merge: one that adds outcomes drops
        them (`harness attribute` stores them again; until then readers answer fresh)."""
        with self.writing() as con:
            return _dropping_answers(con, store_rows.merge_records(con, records))

    def merge_database(self, path: Path) -> int:
        """Bring another DuckDB results file in, in one transaction; returns the outcomes added
        (and drops the stored answers if it added any, as `merge_records` does)."""
        with self.writing() as con:
            return _dropping_answers(con, store_rows.merge_database(con, path))

    def replace_transitions(
        self,
        rows: Iterable[dict[str, Any]],
        *,
        scope: str = "",
        scenarios: Sequence[str] = (),
    ) -> int:
        """Store freshly computed transitions in place of the old ones of the same scope, in one transaction.

        scope: the run id they were computed from ("" for all runs). scenarios: replace only
        these scenarios' rows (empty: every row of the scope). Returns the rows written.
        """
        return self.replace_transition_columns(store_rows.columns_of(rows), scope=scope, scenarios=scenarios)

    def replace_transition_columns(self, columns: Mapping[str, Sequence[Any]], *, scope: str = "", scenarios: Sequence[str] = ()) -> int:
        """`replace_transitions` of transitions by column (`attribution.to_columns`: no dict made per answer)."""
        stamp = now()
        with self.writing() as con:
            return store_rows.replace_transitions(con, columns, scope, scenarios, stamp)


def _dropping_answers(con: duckdb.DuckDBPyConnection, added: int) -> int:
    """`added`, after deleting the stored answers if it is more than none."""
    if added:
        con.execute("DELETE FROM transitions")
        cached.drop_stamps(con)
    return added
