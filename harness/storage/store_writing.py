"""A writer of a results file: its journal, and the folds that bring every journal into the file.

No harness process writes the file in place, nor holds it between calls (docs/store.md, "Readers
and writers at once"). A writer appends each record to its own journal beside the file
(`journal.py`: fsynced, locked by no one) and, every `fold_seconds` and at close, folds the
journals into a copy of the file, which one rename swaps in (`Writer.writing`). Writers take turns
on the file (`store_file.Turn`); readers keep their open snapshot.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from harness import __version__
from harness.errors import StoreError, StoreLocked
from harness.storage.journal import Journal, folder_of, pending, remove, writer_alive
from harness.storage.store_file import Busy, DbFile, Turn, fsync, limited, store_error, within_limits
from harness.storage.store_rows import apply
from harness.storage.store_schema import MIGRATIONS, folded, migrate, migration_names, now

#: A fold during a sweep waits this long for another writer's turn, then leaves the records in
#: the journal, where every harness reader sees them anyway.
FOLD_TRY_SECONDS = 1.0
#: At close, a writer waits this long for its turn, so that the file holds everything.
CLOSE_WAIT_SECONDS = 30.0


def rebuilt(path: Path) -> None:
    """Write the DuckDB file `path` afresh, in place: the same tables and rows in a new file. A
    file keeps the space of the rows deleted from it (the history's settle deletes what it merges
    into spans) and reuses it, but never gives it back: a file from before the split, settled
    once, kept every night's size."""
    fresh = path.with_name(path.name + ".fresh")
    fresh.unlink(missing_ok=True)
    con = within_limits(duckdb.connect(str(fresh)))  # it copies every row: spilling, not growing
    try:
        migrate(con)
        con.execute("ATTACH ? AS _rebuild_source (READ_ONLY)", [str(path)])
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = '_rebuild_source' AND schema_name = 'main'"
            ).fetchall()
        ]
        ours = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}
        con.execute("BEGIN TRANSACTION")
        for table in tables:
            if table in ours:
                con.execute(f'DELETE FROM main."{table}"')
                con.execute(f'INSERT INTO main."{table}" BY NAME SELECT * FROM _rebuild_source.main."{table}"')
            else:  # a table of the user's own: kept as it is
                con.execute(f'CREATE TABLE main."{table}" AS SELECT * FROM _rebuild_source.main."{table}"')
        con.execute("COMMIT")
        con.execute("DETACH _rebuild_source")
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        fresh.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(fresh, path)


class Writer:
    """This process's writes to one results file (`store.Store` serialises the calls under `db.lock`).

    Records go to the journal, or through `held`: a connection to the file itself, held until
    `close()` (`Store.con` for bulk tools and tests, and a `:memory:` store's only connection).
    """

    def __init__(self, db: DbFile, fold_seconds: float) -> None:
        self.db = db
        self.held: duckdb.DuckDBPyConnection | None = None
        self.turn: Turn | None = None  # held with `held`
        self.journal: Journal | None = None
        #: Fold at most this often; on a large file the interval grows (see `_fold`).
        self.fold_seconds = fold_seconds
        self.fold_every = fold_seconds
        self.last_fold = time.monotonic()
        self.timer: threading.Timer | None = None  # a fold due after the last record
        self.own_folded = 0  # bytes of our journal the file holds
        self.failed = False  # closed by an exception: a journal left behind says the writer stopped
        #: After close: the journal left unfolded because another writer kept its turn ("" if none).
        self.left_journal = ""

    # -- opening and closing ---------------------------------------------------------------
    def prepare(self) -> None:
        """A writer's file: created whole if missing, else checked to be one this harness can write."""
        if not Path(self.db.path).exists():
            self.db.create()
            return
        with self.db.lock:
            con = self.db.connect(read_only=True, wait=self.db.lock_wait)
            try:
                names = migration_names(con)
            finally:
                con.close()
        known = {name for name, _ in MIGRATIONS}
        newer = sorted(set(names) - known)
        if newer:
            raise StoreError(
                f"{self.db.path!r} was written by a newer harness (schema {', '.join(newer)}, unknown to harness {__version__}); "
                "upgrade the harness, or pass --db with a new path"
            )
        if known - set(names):
            self.fold(wait=FOLD_TRY_SECONDS)  # migrates now if it can; else the first fold that gets the file does

    def hold(self) -> duckdb.DuckDBPyConnection:
        """The file itself, written in place until `close()`: this takes the writers' turn and
        DuckDB's write lock for as long as it is held (the journals are folded first)."""
        if self.held is None:
            self.turn = Turn.take(self.db.where, self.db.lock_wait)
            try:
                con = self.db.connect(read_only=False, wait=self.db.lock_wait)
                try:
                    migrate(con)
                    self.fold_into(con, remove_now=True)
                except BaseException:
                    con.close()
                    raise
            except BaseException:
                self.turn.release()
                self.turn = None
                raise
            self.held = con
        return self.held

    def close(self, waiting: float) -> None:
        """Fold what this writer journaled (waiting up to `waiting` s for another writer's turn) and let go of the file."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        try:
            if self.journal is not None:
                done = False
                try:
                    done = self._fold(waiting, closing=True)
                finally:
                    self.left_journal = "" if done else str(self.journal.path)
                    self.journal.close(folded=done, state="stopped" if self.failed else "finished")
                    self.journal = None
        finally:
            if self.held is not None:
                con, self.held = self.held, None
                try:
                    con.execute("CHECKPOINT")  # its errors, not swallowed at close
                    self.db.close(con)
                finally:
                    if self.turn is not None:
                        self.turn.release()
                        self.turn = None

    # -- writing ---------------------------------------------------------------------------
    def writable(self) -> None:
        if self.db.read_only:
            raise StoreError(f"{self.db.path!r} is open read-only; open it with Store(path) to write")

    @contextmanager
    def writing(
        self, *, wait: float | None = None, closing: bool = False, busy: bool = False, rebuild: bool = False
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A transaction on the next version of the file: the journals folded in, then the block's
        own changes (a merge, transitions). It is written beside the file and swapped in with one
        rename when the block ends, so readers keep their open snapshot and a failure leaves the
        file as it was. Writers take turns (up to `wait` s, default `lock_wait`); `busy`: a turn
        not had in time raises `Busy` (a fold gives up) rather than StoreLocked. `rebuild`: the
        next version is written afresh (`rebuilt`), without the free space deleted rows left."""
        self.writable()
        with self.db.lock:
            if self.held is not None:
                yield self.held
                return
            try:
                turn = Turn.take(self.db.where, self.db.lock_wait if wait is None else wait)
                try:
                    turn.keep_out_outsiders()
                except BaseException:
                    turn.release()
                    raise
            except Busy as exc:
                if busy:
                    raise
                raise StoreLocked(f"{exc}; rerun when it is done") from None
            try:
                target = Path(self.db.where)
                tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.fold")
                wal = Path(f"{self.db.where}.wal")
                try:
                    try:
                        turn.copy_to(tmp)
                        if wal.exists():  # left by a writer killed outside the harness: DuckDB replays it into the copy
                            shutil.copyfile(wal, f"{tmp}.wal")
                        con = duckdb.connect(str(tmp))
                    except (OSError, duckdb.Error) as exc:
                        raise store_error(self.db.path, exc) from exc
                    try:
                        with limited(con):  # an older file's split reads every row it holds
                            migrate(con)
                        gone = self.fold_into(con, closing=closing)
                        yield con
                        # Explicitly: DuckDB's checkpoint at close swallows its errors (a full disk)
                        # and leaves the rows in the WAL, which must not be left behind by the swap.
                        con.execute("CHECKPOINT")
                    except duckdb.Error as exc:
                        con.close()
                        raise store_error(self.db.path, exc) from exc
                    except BaseException:
                        con.close()
                        raise
                    self.db.close(con)
                    if Path(f"{tmp}.wal").exists():
                        raise StoreError(f"the fold of {self.db.path!r} did not reach the file (a WAL was left); free disk space and rerun")
                    if rebuild:
                        try:
                            rebuilt(tmp)
                        except (OSError, duckdb.Error) as exc:
                            raise store_error(self.db.path, exc) from exc
                    try:
                        fsync(tmp)
                        wal.unlink(missing_ok=True)  # its records are in the copy now
                        os.replace(tmp, target)
                        fsync(target.parent)
                    except OSError as exc:
                        raise store_error(self.db.path, exc) from exc
                finally:
                    for leftover in (tmp, Path(f"{tmp}.wal")):
                        leftover.unlink(missing_ok=True)
            finally:
                turn.release()
            folder = folder_of(self.db.where)
            for name in gone:  # after the swap: the file that holds their records is the one readers open now
                remove(folder / name)

    def record(self, record: dict[str, Any]) -> int:
        """Journal one record (or write it through a held connection); fold now and then."""
        self.writable()
        with self.db.lock:
            if self.held is not None:
                return apply(self.held, [record])
            try:
                if self.journal is None:
                    self.journal = Journal(self.db.where)
                self.journal.append(record)
            except OSError as exc:
                raise store_error(self.db.path, exc) from exc
            due = self.last_fold + self.fold_every - time.monotonic()
            if due <= 0:
                self.fold(wait=FOLD_TRY_SECONDS)
            elif self.timer is None:
                # The last record before a long scenario must not wait for the next one to reach
                # the file (a user's own SQL reads only the file): fold it when it is due anyway.
                self.timer = threading.Timer(due, self._fold_later)
                self.timer.daemon = True
                self.timer.start()
            return 1 if record.get("type") == "outcome" else 0

    def status(self, **changes: Any) -> None:
        """Tell readers what this writer is doing (its journal's status file); nothing before the first record."""
        if self.journal is not None:
            self.journal.update_status(**changes)

    # -- folding ---------------------------------------------------------------------------
    def _fold_later(self) -> None:
        with self.db.lock:
            self.timer = None
            if self.journal is None:
                return  # closed meanwhile: close folded
            try:
                self.fold(wait=FOLD_TRY_SECONDS)
            except StoreError:
                pass  # the next record's fold (or close) meets the same cause and reports it

    def fold(self, wait: float = 0.0) -> bool:
        """Bring every journal's new records into the file; False if another writer kept its turn
        (or a process outside the harness the file) for longer than `wait` s: the records then
        wait in the journals, where readers see them."""
        if self.db.read_only or self.held is not None:
            return True
        with self.db.lock:
            return self._fold(wait)

    def _fold(self, wait: float, *, closing: bool = False) -> bool:
        if self.held is not None:
            self.fold_into(self.held, closing=closing, remove_now=True)
            return True
        if not closing and self.journal is not None and self.journal.size() == self.own_folded:
            return True  # nothing of ours to fold: no copy for nothing (other writers fold their own)
        started = time.monotonic()
        try:
            with self.writing(wait=wait, closing=closing, busy=True):
                pass
        except Busy:
            return False
        finally:
            self.last_fold = time.monotonic()
        # A fold copies the file: on a large one, fold less often (at most ~5% of the time).
        self.fold_every = max(self.fold_seconds, 20 * (self.last_fold - started))
        return True

    def fold_into(self, con: duckdb.DuckDBPyConnection, *, closing: bool = False, remove_now: bool = False) -> list[str]:
        """Insert what lies past each journal's folded offset and move the offsets, in one
        transaction. Returns the journals no one will write again (their writers are gone; with
        `closing`, ours too), to delete once the file that holds them is in place (`remove_now`:
        `con` is that file). Their offsets stay: a journal deleted late is never read twice."""
        offsets = folded(con)
        found = pending(self.db.where, offsets)
        moved = [name for name, end in found.ends.items() if end != offsets.get(name, 0)]
        if moved:
            con.execute("BEGIN TRANSACTION")
            try:
                apply(con, (rec for name in moved for rec in found.records[name]))
                for name in moved:
                    con.execute("INSERT OR REPLACE INTO journal_folds VALUES (?, ?, ?)", [name, found.ends[name], now()])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        own = self.journal.path.name if self.journal is not None else ""
        self.own_folded = found.ends.get(own, 0)
        folder = folder_of(self.db.where)
        # A writer that is gone adds nothing more; bytes past its last newline are half a line a kill cut short.
        gone = [name for name in found.ends if (name == own and closing) or (name != own and not writer_alive(folder / name))]
        if remove_now:
            for name in gone:
                remove(folder / name)
            return []
        return gone
