"""The results store: a DuckDB file, its named migrations, and everything that writes to it.

Outcomes are keyed by (run, cell, scenario, repeat) and only ever inserted: a sweep killed at
any moment leaves whole rows or none, and a rerun fills in exactly the missing keys. Users
query the view `outcomes_v` (documented in docs/store.md). Reads live beside this module in
`queries.py`, named by what they return; the schema, the writes and the merges live here.
Between them they hold all of the harness's SQL.

Watching a sweep live (docs/store.md, "Readers and writers at once"): DuckDB lets one process
write a file and, meanwhile, no other process open it at all, not even read-only. So no harness
process ever writes the file in place, nor holds it between calls. A writer appends each record
to its own journal beside the file (`journal.py`: fsynced, locked by no one) and, every
FOLD_SECONDS and at close, folds the journals into a copy of the file, which one rename swaps in
(`writing`). Readers open the file read-only for one read (or one `reading()` block) and lay the
journals' unfolded records over it through temporary views. So a reader never waits for a writer
and never makes one wait: the dashboard, `summary` and the analyses see each outcome the moment
it is journaled, and a user's own `duckdb.connect(path, read_only=True)` always opens, seeing the
file as of the last fold.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from harness import __version__
from harness.errors import StoreError, StoreLocked
from harness.journal import Journal, disk_error, folder_of, journals, pending, remove, writer_alive
from harness.outcome import CellRecord, Outcome

#: What the answers read: an outcome with its cell's versions and its run's machine (the newest
#: definition; migrations 0001-0006 wrote earlier ones).
OUTCOMES_VIEW = """
SELECT
    o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
    o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
    COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
    COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
    COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
    COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
    COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
    c.versions, c.installed, c.git_commits, c.inherited, c.python,
    r.host->>'platform' AS platform,
    r.host->>'gpu' AS gpu,
    TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
    json_extract_string(r.host, '$.gpus[0]."memory.total"') AS gpu_memory,
    json_extract_string(r.host, '$.gpus[0].compute_cap') AS gpu_compute_capability,
    json_extract_string(r.host, '$.gpus[0].driver_version') AS gpu_driver,
    c.cuda_runtime,
    c.python_version,
    r.host->>'python' AS host_python,
    COALESCE(c.origin, 'matrix') AS origin,
    o.seconds, c.env_seconds, o.metrics, o.started_at
FROM outcomes o
LEFT JOIN cells c USING (run_id, cell_id)
LEFT JOIN runs r USING (run_id)
"""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_initial",
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            matrix_path TEXT,
            matrix_text TEXT,
            settings JSON,
            harness_version TEXT,
            host JSON
        );
        CREATE TABLE cells (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            python TEXT,
            versions JSON,          -- axis -> requested version / git URL / "inherit"
            requirements JSON,      -- what was handed to the resolver
            installed JSON,         -- package -> exact installed version or URL (uv pip freeze)
            inherited JSON,         -- package -> version taken from the base interpreter
            git_commits JSON,       -- package -> commit for git and path candidates
            env_status TEXT,        -- ready | unresolvable | install_failed
            env_message TEXT,
            env_seconds DOUBLE,
            env_reused BOOLEAN,
            built_at TIMESTAMP,
            PRIMARY KEY (run_id, cell_id)
        );
        CREATE TABLE outcomes (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            scenario TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            status TEXT NOT NULL,
            message TEXT,
            signature TEXT,
            signature_family TEXT,
            blamed_library TEXT,
            exception_type TEXT,
            traceback TEXT,
            output_tail TEXT,
            seconds DOUBLE,
            metrics JSON,
            started_at TIMESTAMP,
            PRIMARY KEY (run_id, cell_id, scenario, repeat)
        );
        """,
    ),
    (
        "0002_outcomes_view",
        """
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # IF NOT EXISTS: a migration re-applied after its record was lost must not fail.
        "0003_transitions",
        """
        CREATE TABLE IF NOT EXISTS transitions (
            scope TEXT NOT NULL,        -- the run id the outcomes came from; '' for all runs
            scenario TEXT NOT NULL,
            signature TEXT NOT NULL,
            signature_family TEXT,
            axis TEXT NOT NULL,         -- '' for a flaky cell
            kind TEXT NOT NULL,         -- introduced | fixed | flaky
            before TEXT,                -- last candidate on the old side
            after TEXT,                 -- first candidate on the new side
            untested JSON,              -- known versions between them never tried on this line
            inconclusive JSON,          -- tried between them, but said nothing (n/a, flaky, ...)
            held JSON,                  -- the other axes, held fixed (a flaky cell: all its axes)
            before_cell TEXT,
            after_cell TEXT,
            runs JSON,
            description TEXT,
            seq INTEGER,                -- order within the scope: as attribution listed them
            computed_at TIMESTAMP
        );
        """,
    ),
    (
        # Hardware as data: the GPU's memory, compute capability and driver, and how many GPUs
        # the runner had, on every outcome row, so runs from different runners compare.
        "0004_hardware_columns",
        """
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # The CUDA runtime each cell's torch was built for (torch.version.cuda): with the
        # driver it says which native libraries (bitsandbytes') a cell could load.
        "0005_cuda_runtime",
        """
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS cuda_runtime TEXT DEFAULT '';
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            c.cuda_runtime,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # What the answers need to say how sure they are: the cell's own Python and where it came
        # from (the matrix, or a refinement probe), the machine each transition holds on, how it
        # was obtained, and the releases on the index between tested versions (per run).
        "0006_machines_and_releases",
        """
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS python_version TEXT DEFAULT '';
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS origin TEXT DEFAULT 'matrix';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS machine TEXT DEFAULT '';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS other_machine TEXT DEFAULT '';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS how TEXT DEFAULT '';
        CREATE TABLE IF NOT EXISTS releases (
            run_id TEXT NOT NULL,       -- the run that listed them ('' for a list fetched by `harness attribute`)
            axis TEXT NOT NULL,
            version TEXT NOT NULL,      -- a final, non-yanked release installable for the run's Python and platform
            uploaded_at TIMESTAMP,
            PRIMARY KEY (run_id, axis, version)
        );
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            c.cuda_runtime,
            c.python_version,
            r.host->>'python' AS host_python,
            COALESCE(c.origin, 'matrix') AS origin,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # Which records of each writer's journal (harness/journal.py) the tables hold: a fold
        # inserts them and moves the offset in one transaction, so a record is folded once, and
        # a reader adds only what lies past the offset.
        "0007_journal_folds",
        """
        CREATE TABLE IF NOT EXISTS journal_folds (
            journal TEXT PRIMARY KEY,   -- a journal's file name in <db>.journal/
            folded_bytes BIGINT NOT NULL,  -- its records up to this byte are in the tables
            folded_at TIMESTAMP
        );
        """,
    ),
    (
        # DuckDB 2.0.0 stored `host->'gpus'->0->>'memory.total'` as `host->'gpus'->(0->>'…')`, and
        # 2.0.1 reads that text back as written and refuses it: every query of the view failed.
        # The view now names its JSON paths whole (readers lay it over an older file too).
        "0008_outcomes_v_json_paths",
        "CREATE OR REPLACE VIEW outcomes_v AS " + OUTCOMES_VIEW + ";",
    ),
)


#: How long to wait for a lock the harness does not take for moments only: another writer's turn
#: (a merge, a fold of a large file), or a process outside the harness that opened the file for
#: writing (DuckDB then refuses everyone else); then say who holds it.
LOCK_WAIT_SECONDS = float(os.environ.get("HARNESS_LOCK_WAIT", "60"))
#: A writer folds its journal into the file at most this often (and when it closes). A fold copies
#: the file, inserts, checkpoints and renames: 0.08 s for 8.7 MB, 0.34 s for 380 MB (here); on a
#: large file the interval grows to keep folds under ~5% of the time.
FOLD_SECONDS = float(os.environ.get("HARNESS_FOLD_SECONDS", "2"))
#: A fold during a sweep waits this long for another writer's turn, then leaves the records in
#: the journal, where every harness reader sees them anyway.
FOLD_TRY_SECONDS = 1.0
#: At close, a writer waits this long for its turn, so that the file holds everything.
CLOSE_WAIT_SECONDS = 30.0

OUTCOME_COLUMNS = (
    "run_id",
    "cell_id",
    "scenario",
    "repeat",
    "status",
    "message",
    "signature",
    "signature_family",
    "blamed_library",
    "exception_type",
    "traceback",
    "output_tail",
    "seconds",
    "metrics",
    "started_at",
)
CELL_COLUMNS = (
    "run_id",
    "cell_id",
    "python",
    "versions",
    "requirements",
    "installed",
    "inherited",
    "git_commits",
    "env_status",
    "env_message",
    "env_seconds",
    "env_reused",
    "built_at",
    "cuda_runtime",
    "python_version",
    "origin",
)
RUN_COLUMNS = ("run_id", "started_at", "matrix_path", "matrix_text", "settings", "harness_version", "host")
RELEASE_COLUMNS = ("run_id", "axis", "version", "uploaded_at")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ would need pytz


# -- records (a journal's lines, a shard's lines) as rows ------------------------------------
def _outcome_row(rec: dict[str, Any]) -> list[Any]:
    row = {**rec, "metrics": json.dumps(rec.get("metrics") or {}), "started_at": rec.get("started_at") or _now()}
    return [row.get(c) for c in OUTCOME_COLUMNS]


def _cell_row(rec: dict[str, Any]) -> list[Any]:
    row = {
        **rec,
        **{
            k: json.dumps(rec.get(k) or ({} if k != "requirements" else []))
            for k in ("versions", "requirements", "inherited", "git_commits")
        },
        "installed": json.dumps(rec.get("freeze") or {}),
        "built_at": rec.get("built_at") or _now(),
        "cuda_runtime": rec.get("cuda_runtime") or "",
        "python_version": rec.get("python_version") or "",
        "origin": rec.get("origin") or "matrix",
    }
    return [row.get(c) for c in CELL_COLUMNS]


def _run_row(rec: dict[str, Any]) -> list[Any]:
    row = {
        **rec,
        "started_at": rec.get("started_at") or _now(),
        "settings": json.dumps(rec.get("settings") or {}, default=str),
        "host": json.dumps(rec.get("host") or {}, default=str),
    }
    return [row.get(c) for c in RUN_COLUMNS]


def _release_rows(rec: dict[str, Any]) -> list[list[Any]]:
    versions = list(rec.get("versions") or [])
    uploaded = list(rec.get("uploaded") or [None] * len(versions))
    return [[rec["run_id"], rec["axis"], str(v), u] for v, u in zip(versions, uploaded)]


def _insert(table: str, columns: Sequence[str], conflict: str = "", rows: int = 1) -> str:
    verb = "INSERT OR REPLACE" if conflict == "replace" else "INSERT"
    tail = " ON CONFLICT DO NOTHING" if conflict == "nothing" else ""
    values = ", ".join(["(" + ", ".join("?" for _ in columns) + ")"] * rows)
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES {values}{tail}"


def _insert_many(
    con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str], rows: Iterable[list[Any]], conflict: str = "", counted: bool = False
) -> int:
    """Insert rows a few hundred to a statement (DuckDB's executemany prepares each row: 30x
    slower, 10 s for 5,000 outcomes); returns the rows inserted when `counted`."""
    pending = list(rows)
    added = 0
    for start in range(0, len(pending), 200):
        chunk = pending[start : start + 200]
        sql = _insert(table, columns, conflict, len(chunk)) + (" RETURNING 1" if counted else "")
        cur = con.execute(sql, [value for row in chunk for value in row])
        added += len(cur.fetchall()) if counted else 0
    return added


@dataclass
class _Rows:
    """Records (a journal's, a shard's) as the rows a fold writes, by the rules of each table:
    an outcome or a run is never overwritten (the first stored wins: two sweeps of one run
    computing one key leave one row), a cell's latest env facts replace the earlier ones, and a
    run's latest list of releases of an axis replaces its earlier list."""

    outcomes: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    runs: dict[Any, list[Any]] = field(default_factory=dict)
    cells: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    releases: dict[tuple[Any, ...], list[list[Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> _Rows:
        rows = cls()
        for rec in records:
            kind = rec.get("type")
            if kind == "outcome":
                rows.outcomes.setdefault((rec["run_id"], rec["cell_id"], rec["scenario"], int(rec["repeat"])), _outcome_row(rec))
            elif kind == "run":
                rows.runs.setdefault(rec["run_id"], _run_row(rec))
            elif kind == "cell":
                rows.cells[(rec["run_id"], rec["cell_id"])] = _cell_row(rec)
            elif kind == "releases":
                rows.releases[(rec["run_id"], rec["axis"])] = _release_rows(rec)
        return rows

    def __bool__(self) -> bool:
        return bool(self.outcomes or self.runs or self.cells or self.releases)


def _apply(con: duckdb.DuckDBPyConnection, records: Iterable[dict[str, Any]]) -> int:
    """Write records into the tables, as their writers meant them (`_Rows`); returns the outcomes added."""
    rows = _Rows.of(records)
    _insert_many(con, "runs", RUN_COLUMNS, rows.runs.values(), "nothing")
    _insert_many(con, "cells", CELL_COLUMNS, rows.cells.values(), "replace")
    for (run_id, axis), listed in rows.releases.items():
        con.execute("DELETE FROM releases WHERE run_id = ? AND axis = ?", [run_id, axis])
        _insert_many(con, "releases", RELEASE_COLUMNS, listed, "nothing")
    return _insert_many(con, "outcomes", OUTCOME_COLUMNS, rows.outcomes.values(), "nothing", counted=True)


# -- what DuckDB and the OS said, as one line that names the fix ------------------------------
def is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def store_error(path: str, exc: BaseException, waited: float = 0.0) -> StoreError:
    """The cause of a failure to open or write a results file, and its fix (exit 2)."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    low = text.lower()
    cause = disk_error(exc) if isinstance(exc, OSError) else ""
    if is_lock_error(exc):
        holder = re.search(r"lock is held in (.+?) \(PID (\d+)\)", text)
        who = f"{holder[1]} (PID {holder[2]})" if holder else "another process"
        return StoreLocked(
            f"{path!r} stayed locked by {who} for {waited:g} s: a process opened it for writing outside the harness "
            "(harness writers hold it for moments only), and DuckDB then lets no one else open it; close that connection "
            "or open it with duckdb.connect(..., read_only=True), then rerun"
        )
    if "database file with version number" in low or "version of duckdb" in low:
        return StoreError(
            f"{path!r} was written by a DuckDB whose storage format duckdb {duckdb.__version__} cannot read ({first}); "
            "install the duckdb that wrote it, or pass --db with a new path"
        )
    if "not a valid duckdb database" in low or "corrupt database file" in low:
        return StoreError(f"{path!r} is not a DuckDB database ({first}); pass --db with a .duckdb file the harness created, or a new path")
    if cause == "full" or "no space left on device" in low or "disk quota exceeded" in low:
        return StoreError(
            f"the disk holding {path!r} is full; free some space and rerun the same command "
            "(every outcome stored so far is kept, and the rerun resumes)"
        )
    if cause == "read-only" or "read-only file system" in low or "permission denied" in low:
        return StoreError(_read_only_folder(path))
    return StoreError(
        f"cannot open {path!r} as a DuckDB database ({first}); pass --db with a .duckdb file the harness created, or a new path"
    )


def _read_only_folder(path: str) -> str:
    folder = os.path.dirname(path) or "."
    return f"cannot write {path!r}: its folder {folder!r} is read-only; pass --db with a path in a writable folder (or copy the file there)"


# One DuckDB instance per file and process: a read-only and a read-write connection to the same
# file cannot coexist in one process, so every Store of a path in this process takes turns.
_PATH_LOCKS: dict[str, threading.RLock] = {}
_PATH_LOCKS_GUARD = threading.Lock()


def _path_lock(path: str) -> threading.RLock:
    key = os.path.realpath(path)
    with _PATH_LOCKS_GUARD:
        return _PATH_LOCKS.setdefault(key, threading.RLock())


class Store:
    """One results file. No DuckDB connection is held between calls (see the module docstring).

    Readers (`read_only=True`: the dashboard, `summary`, queries) see the file plus the records
    of every journal beside it that the file does not hold yet. Writers append to their own
    journal and fold it into a copy swapped in by rename. `con` holds a connection until
    `close()`, for bulk tools and tests.
    """

    def __init__(self, path: Path | str, *, read_only: bool = False, lock_wait: float | None = None) -> None:
        self.path = str(path)
        self.read_only = read_only
        #: How long to wait for another process's lock before saying who holds it.
        self.lock_wait = LOCK_WAIT_SECONDS if lock_wait is None else lock_wait
        # Where the file really is: a swap replaces it (not a symlink to it), the journals sit beside
        # it, and another working directory does not matter.
        self._where = os.path.realpath(self.path)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._journal: Journal | None = None
        self._session: duckdb.DuckDBPyConnection | None = None
        self._known: dict[str, set[tuple[str, str, int]]] = {}
        self._turn: _Turn | None = None  # held with a writer's `con`
        self._last_fold = time.monotonic()
        self._fold_every = FOLD_SECONDS
        self._timer: threading.Timer | None = None  # a fold due after the last record
        self._own_folded = 0  # bytes of our journal the file holds
        self._failed = False  # closed by an exception: a journal left behind says the writer stopped
        #: After close: the journal left unfolded because another writer kept its turn ("" if none).
        self.left_journal = ""
        if self.path == ":memory:":
            self._lock = threading.RLock()
            self._con = duckdb.connect(":memory:")
            self._migrate(self._con)
            return
        self._lock = _path_lock(self.path)
        self._check_path()
        if not read_only:
            self._prepare()

    # -- opening ---------------------------------------------------------------------------
    def _check_path(self) -> None:
        target = Path(self.path)
        if target.is_dir():
            raise StoreError(f"database path {self.path!r} is a directory; pass --db path/to/results.duckdb")
        if self.read_only:
            if not target.exists():
                raise StoreError(f"database {self.path!r} does not exist; run a sweep first or pass --db with an existing file")
            return
        parent = target.parent if str(target.parent) else Path(".")
        if not target.exists() and not parent.is_dir():
            raise StoreError(
                f"cannot create database {self.path!r}: folder {str(parent)!r} does not exist; create it or pass --db with another path"
            )
        if not os.access(parent, os.W_OK):
            # DuckDB writes its WAL beside the file and the journals live there too.
            raise StoreError(_read_only_folder(self.path))

    def _prepare(self) -> None:
        """A writer's file: created whole if missing, else checked to be one this harness can write."""
        target = Path(self.path)
        if not target.exists():
            self._create(target)
            return
        with self._lock:
            con = self._connect(read_only=True, wait=self.lock_wait)
            try:
                names = self._migration_names(con)
            finally:
                con.close()
        known = {name for name, _ in MIGRATIONS}
        newer = sorted(set(names) - known)
        if newer:
            raise StoreError(
                f"{self.path!r} was written by a newer harness (schema {', '.join(newer)}, unknown to harness {__version__}); "
                "upgrade the harness, or pass --db with a new path"
            )
        if known - set(names):
            self.fold(wait=FOLD_TRY_SECONDS)  # migrates now if it can; else the first fold that gets the file does

    def _create(self, target: Path) -> None:
        """Build the migrated file under a private name and link it into place: a reader never
        meets a half-made file, and of two writers creating it at once the first link wins."""
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.creating")
        try:
            con = duckdb.connect(str(tmp))
            try:
                self._migrate(con)
                con.execute("CHECKPOINT")  # its errors, not swallowed at close
            finally:
                con.close()
            try:
                os.link(tmp, target)
            except FileExistsError:
                pass  # another writer created it first: theirs is as good
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                if not target.exists():  # a file system without hard links: a rename, nearly as safe
                    os.rename(tmp, target)
        except (OSError, duckdb.Error) as exc:
            raise store_error(self.path, exc) from exc
        finally:
            for leftover in (tmp, Path(f"{tmp}.wal")):
                try:
                    leftover.unlink()
                except FileNotFoundError:
                    pass

    def _connect(self, *, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
        """A connection, retried for up to `wait` s while another process holds DuckDB's write lock
        (a writer's `con`, or a process outside the harness)."""
        deadline = time.monotonic() + wait
        delay = 0.005
        while True:
            try:
                return duckdb.connect(self.path, read_only=read_only)
            except duckdb.Error as exc:
                if not is_lock_error(exc):
                    raise store_error(self.path, exc) from exc
                if time.monotonic() >= deadline:
                    raise store_error(self.path, exc, wait) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def close(self, *, waiting: float = CLOSE_WAIT_SECONDS) -> None:
        """Fold what this writer journaled (waiting up to `waiting` s for another writer's turn) and let go of the file."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                if self._journal is not None:
                    folded = False
                    try:
                        folded = self._fold(waiting, closing=True)
                    finally:
                        self.left_journal = "" if folded else str(self._journal.path)
                        self._journal.close(folded=folded, state="stopped" if self._failed else "finished")
                        self._journal = None
            finally:
                if self._con is not None:
                    con, self._con = self._con, None
                    try:
                        if not self.read_only:
                            con.execute("CHECKPOINT")  # its errors, not swallowed at close
                        self._close(con)
                    finally:
                        if self._turn is not None:
                            self._turn.release()
                            self._turn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Already failing (a full disk, Ctrl-C): fold briefly and never hide the first error.
        # Whatever is not folded stays in the journal, which the next writer folds.
        self._failed = True
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
            if self._con is None:
                if self.read_only:
                    self._con = self._open_snapshot()
                else:
                    self._turn = _Turn.take(self._where, self.lock_wait)
                    try:
                        con = self._connect(read_only=False, wait=self.lock_wait)
                        try:
                            self._migrate(con)
                            self._fold_into(con, remove_now=True)
                        except BaseException:
                            con.close()
                            raise
                    except BaseException:
                        self._turn.release()
                        self._turn = None
                        raise
                    self._con = con
            return self._con

    def _close(self, con: duckdb.DuckDBPyConnection) -> None:
        try:
            con.close()  # the last connection checkpoints: no WAL is left for readers to replay
        except duckdb.Error as exc:
            raise store_error(self.path, exc) from exc

    # -- reading -----------------------------------------------------------------------------
    def _open_snapshot(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection with the journals' unfolded records laid over it.

        The file and the journals must agree: a writer that folded a journal into a new file
        between our open and our reading the journals may already have deleted it. So the
        file's identity is checked around the two, and a swap in between means: once more.
        """
        for _ in range(20):
            before = _identity(self._where)
            con = self._connect(read_only=True, wait=self.lock_wait)
            try:
                _overlay(con, self._where)
                _current_view(con)
            except BaseException:
                con.close()
                raise
            if _identity(self._where) == before:
                return con
            con.close()
        raise StoreError(f"{self.path!r} was replaced 20 times while being opened; rerun (are writers folding it in a loop?)")

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One consistent view for several reads: the file and the journals' unfolded records."""
        if self._con is not None:
            yield self._con
            return
        with self._lock:
            if self._session is not None:  # nested: the same view
                yield self._session
                return
            con = self._open_snapshot()
            try:
                self._session = con
                yield con
            finally:
                self._session = None
                con.close()

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts: the one primitive `queries` builds on."""
        with self.reading() as con:
            cur = con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def has_table(self, name: str) -> bool:
        rows = self.fetch("SELECT count(*) AS n FROM information_schema.tables WHERE table_name = ?", [name])
        return bool(rows and rows[0]["n"])

    def applied_migrations(self) -> list[str]:
        return [r["name"] for r in self.fetch("SELECT name FROM schema_migrations ORDER BY name")]

    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        """(cell, scenario, repeat) already stored for a run: a rerun computes only the rest."""
        rows = self.fetch("SELECT cell_id, scenario, repeat FROM outcomes WHERE run_id = ?", [run_id])
        keys = {(r["cell_id"], r["scenario"], int(r["repeat"])) for r in rows}
        with self._lock:
            self._known[run_id] = set(keys)
        return keys

    # -- schema ------------------------------------------------------------------------------
    @staticmethod
    def _migration_names(con: duckdb.DuckDBPyConnection) -> list[str]:
        try:
            return [row[0] for row in con.execute("SELECT name FROM schema_migrations").fetchall()]
        except duckdb.CatalogException:
            return []  # a DuckDB file the harness never wrote: the migrations add its tables

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
        done = set(self._migration_names(con))
        applied = []
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(sql)
                con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [name, _now()])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            applied.append(name)
        return applied

    def migrate(self) -> list[str]:
        """Apply the missing migrations now; returns their names."""
        with self._lock:
            if self._con is not None:
                return self._migrate(self._con)
            before = set(self.applied_migrations())
            with self.writing():
                pass
            return [name for name, _ in MIGRATIONS if name not in before]

    # -- writing -----------------------------------------------------------------------------
    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.path!r} is open read-only; open it with Store(path) to write")

    @contextmanager
    def writing(self, *, wait: float | None = None, closing: bool = False, busy: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A transaction on the next version of the file: the journals folded in, then the block's
        own changes (a merge, transitions). It is written beside the file and swapped in with one
        rename when the block ends, so readers keep their open snapshot and a failure leaves the
        file as it was. Writers take turns (up to `wait` s, default `lock_wait`); `busy`: a turn
        not had in time raises `_Busy` (a fold gives up) rather than StoreLocked."""
        self._writable()
        with self._lock:
            if self._con is not None:
                yield self._con
                return
            try:
                turn = _Turn.take(self._where, self.lock_wait if wait is None else wait)
                try:
                    turn.keep_out_outsiders()
                except BaseException:
                    turn.release()
                    raise
            except _Busy as exc:
                if busy:
                    raise
                raise StoreLocked(f"{exc}; rerun when it is done") from None
            try:
                target = Path(self._where)
                tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.fold")
                wal = Path(f"{self._where}.wal")
                try:
                    try:
                        turn.copy_to(tmp)
                        if wal.exists():  # left by a writer killed outside the harness: DuckDB replays it into the copy
                            shutil.copyfile(wal, f"{tmp}.wal")
                        con = duckdb.connect(str(tmp))
                    except (OSError, duckdb.Error) as exc:
                        raise store_error(self.path, exc) from exc
                    try:
                        self._migrate(con)
                        gone = self._fold_into(con, closing=closing)
                        yield con
                        # Explicitly: DuckDB's checkpoint at close swallows its errors (a full disk)
                        # and leaves the rows in the WAL, which must not be left behind by the swap.
                        con.execute("CHECKPOINT")
                    except duckdb.Error as exc:
                        con.close()
                        raise store_error(self.path, exc) from exc
                    except BaseException:
                        con.close()
                        raise
                    self._close(con)
                    if Path(f"{tmp}.wal").exists():
                        raise StoreError(f"the fold of {self.path!r} did not reach the file (a WAL was left); free disk space and rerun")
                    try:
                        _fsync(tmp)
                        wal.unlink(missing_ok=True)  # its records are in the copy now
                        os.replace(tmp, target)
                        _fsync(target.parent)
                    except OSError as exc:
                        raise store_error(self.path, exc) from exc
                finally:
                    for leftover in (tmp, Path(f"{tmp}.wal")):
                        leftover.unlink(missing_ok=True)
            finally:
                turn.release()
            folder = folder_of(self._where)
            for name in gone:  # after the swap: the file that holds their records is the one readers open now
                remove(folder / name)

    def _record(self, record: dict[str, Any]) -> int:
        """Journal one record (or write it through a held connection); fold now and then."""
        self._writable()
        with self._lock:
            if self._con is not None:
                return _apply(self._con, [record])
            try:
                if self._journal is None:
                    self._journal = Journal(self._where)
                self._journal.append(record)
            except OSError as exc:
                raise store_error(self.path, exc) from exc
            due = self._last_fold + self._fold_every - time.monotonic()
            if due <= 0:
                self.fold(wait=FOLD_TRY_SECONDS)
            elif self._timer is None:
                # The last record before a long scenario must not wait for the next one to reach
                # the file (a user's own SQL reads only the file): fold it when it is due anyway.
                self._timer = threading.Timer(due, self._fold_later)
                self._timer.daemon = True
                self._timer.start()
            return 1 if record.get("type") == "outcome" else 0

    def _fold_later(self) -> None:
        with self._lock:
            self._timer = None
            if self._journal is None:
                return  # closed meanwhile: close folded
            try:
                self.fold(wait=FOLD_TRY_SECONDS)
            except StoreError:
                pass  # the next record's fold (or close) meets the same cause and reports it

    def fold(self, wait: float = 0.0) -> bool:
        """Bring every journal's new records into the file; False if another writer kept its turn
        (or a process outside the harness the file) for longer than `wait` s: the records then
        wait in the journals, where readers see them."""
        if self.read_only or self._con is not None:
            return True
        with self._lock:
            return self._fold(wait)

    def _fold(self, wait: float, *, closing: bool = False) -> bool:
        if self._con is not None:
            self._fold_into(self._con, closing=closing, remove_now=True)
            return True
        if not closing and self._journal is not None and self._journal.size() == self._own_folded:
            return True  # nothing of ours to fold: no copy for nothing (other writers fold their own)
        started = time.monotonic()
        try:
            with self.writing(wait=wait, closing=closing, busy=True):
                pass
        except _Busy:
            return False
        finally:
            self._last_fold = time.monotonic()
        # A fold copies the file: on a large one, fold less often (at most ~5% of the time).
        self._fold_every = max(FOLD_SECONDS, 20 * (self._last_fold - started))
        return True

    def _fold_into(self, con: duckdb.DuckDBPyConnection, *, closing: bool = False, remove_now: bool = False) -> list[str]:
        """Insert what lies past each journal's folded offset and move the offsets, in one
        transaction. Returns the journals no one will write again (their writers are gone; with
        `closing`, ours too), to delete once the file that holds them is in place (`remove_now`:
        `con` is that file). Their offsets stay: a journal deleted late is never read twice."""
        folded = _folded(con)
        found = pending(self._where, folded)
        moved = [name for name, end in found.ends.items() if end != folded.get(name, 0)]
        if moved:
            con.execute("BEGIN TRANSACTION")
            try:
                _apply(con, (rec for name in moved for rec in found.records[name]))
                for name in moved:
                    con.execute("INSERT OR REPLACE INTO journal_folds VALUES (?, ?, ?)", [name, found.ends[name], _now()])
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        own = self._journal.path.name if self._journal is not None else ""
        self._own_folded = found.ends.get(own, 0)
        folder = folder_of(self._where)
        # A writer that is gone adds nothing more; bytes past its last newline are half a line a kill cut short.
        gone = [name for name in found.ends if (name == own and closing) or (name != own and not writer_alive(folder / name))]
        if remove_now:
            for name in gone:
                remove(folder / name)
            return []
        return gone

    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None:
        record = {
            "type": "run",
            "run_id": run_id,
            "started_at": _now().isoformat(),
            "matrix_path": matrix_path,
            "matrix_text": matrix_text,
            "settings": settings,
            "harness_version": harness_version,
            "host": host,
        }
        self._record(record)
        if self._journal is not None:
            self._journal.update_status(run_id=run_id)

    def record_cell(self, rec: CellRecord) -> None:
        """Latest environment facts for a cell in a run (a rebuild replaces them)."""
        self._record({"type": "cell", **asdict(rec), "built_at": _now().isoformat()})

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
            added = self._record({"type": "outcome", **d, "started_at": d["started_at"] or _now().isoformat()})
            known.add(key)
            return bool(added)

    def record_releases(self, run_id: str, releases: dict[str, list[tuple[str, datetime | None]]]) -> int:
        """The releases on the index of each axis, as the run saw them (replacing its earlier list)."""
        for axis, listed in releases.items():
            self._record(
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
            if self._journal is not None:
                self._journal.update_status(**status)

    # -- merging ----------------------------------------------------------------------------
    def merge_records(self, records: Iterable[dict[str, Any]]) -> int:
        """Bring a JSON-lines shard (or a journal) in, in one transaction; returns the outcomes added."""
        with self.writing() as con:
            added = 0
            con.execute("BEGIN TRANSACTION")
            try:
                added = _apply(con, records)
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return added

    def merge_database(self, path: Path) -> int:
        """Bring another DuckDB results file in, in one transaction; returns the outcomes added."""
        with self.writing() as con:
            before = _count(con)
            con.execute("ATTACH ? AS other (READ_ONLY)", [str(path)])
            try:
                con.execute("BEGIN TRANSACTION")
                # BY NAME: a file written by another harness version may order its columns differently
                con.execute("INSERT INTO runs BY NAME SELECT * FROM other.runs ON CONFLICT DO NOTHING")
                con.execute("INSERT OR REPLACE INTO cells BY NAME SELECT * FROM other.cells")
                con.execute("INSERT INTO outcomes BY NAME SELECT * FROM other.outcomes ON CONFLICT DO NOTHING")
                if _attached_has(con, "releases"):
                    con.execute("INSERT INTO releases BY NAME SELECT * FROM other.releases ON CONFLICT DO NOTHING")
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            finally:
                con.execute("DETACH other")
            return _count(con) - before

    # -- answers (analysis.attribution computes them; queries.transitions reads them) -------
    _TRANSITION_COLUMNS = (
        "scope",
        "scenario",
        "signature",
        "signature_family",
        "axis",
        "kind",
        "before",
        "after",
        "untested",
        "inconclusive",
        "held",
        "machine",
        "other_machine",
        "how",
        "before_cell",
        "after_cell",
        "runs",
        "description",
    )
    _TRANSITION_JSON = frozenset({"untested", "inconclusive", "held", "runs"})

    def replace_transitions(self, rows: Iterable[dict[str, Any]], *, scope: str = "", scenarios: Sequence[str] = ()) -> int:
        """Store freshly computed transitions in place of the old ones of the same scope, in one transaction.

        scope: the run id they were computed from ("" for all runs). scenarios: replace only
        these scenarios' rows (empty: every row of the scope). Returns the rows written.
        """
        delete = "DELETE FROM transitions WHERE scope = ?"
        params: list[Any] = [scope]
        if scenarios:
            delete += f" AND scenario IN ({', '.join('?' for _ in scenarios)})"
            params.extend(scenarios)
        columns = self._TRANSITION_COLUMNS
        insert = f"INSERT INTO transitions ({', '.join(columns)}, seq, computed_at) VALUES ({', '.join('?' for _ in columns)}, ?, ?)"
        now = _now()
        written = 0
        with self.writing() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(delete, params)
                for row in rows:
                    values = [json.dumps(row.get(c)) if c in self._TRANSITION_JSON else row.get(c) for c in columns]
                    values[0] = scope
                    con.execute(insert, [*values, written, now])
                    written += 1
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return written


class _Busy(Exception):
    """Another writer kept its turn (or an outsider the file) for the whole wait."""


class _Turn:
    """Writers of one results file take turns: an exclusive flock on the file itself (DuckDB's own
    locks are fcntl locks, which flock does not touch on Linux). Each turn swaps the file, so a
    lock counts only on the file still in place; a waiter that locked a swapped one tries again.
    """

    def __init__(self, path: str, wait: float) -> None:
        self.path = path
        self.wait = wait
        self.fd: int | None = None

    @classmethod
    def take(cls, path: str, wait: float) -> _Turn:
        return cls(path, wait).__enter__()

    def __enter__(self) -> _Turn:
        deadline = time.monotonic() + self.wait
        delay = 0.005
        while True:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                raise store_error(self.path, exc) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise _Busy(f"another harness process kept its turn writing {self.path!r} for {self.wait:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            if _identity_of(fd) == _identity(self.path):
                self.fd = fd
                return self
            os.close(fd)  # swapped while we waited: the file in place now is the one to lock

    def keep_out_outsiders(self) -> None:
        """A shared fcntl lock, DuckDB's own read lock, while the file is copied and swapped: a
        process outside the harness that holds the file open for writing would tear the copy, so
        it makes us wait; one that opens it for writing meanwhile is refused by DuckDB. (Closing
        any descriptor of the file would drop this lock: the copy reads through this one.)"""
        assert self.fd is not None
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise store_error(self.path, exc) from exc
            if time.monotonic() >= deadline:
                try:  # DuckDB names the process that holds it
                    duckdb.connect(self.path, read_only=True).close()
                except duckdb.Error as exc:
                    if is_lock_error(exc):
                        raise _Busy(str(store_error(self.path, exc, self.wait))) from exc
                raise _Busy(f"{self.path!r} stayed locked for writing by another process for {self.wait:g} s")
            time.sleep(0.05)

    def copy_to(self, target: Path) -> None:
        """The file as it is, into `target` (a new file), read through the locked descriptor."""
        assert self.fd is not None
        stat = os.fstat(self.fd)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.st_mode & 0o777)
        try:
            offset = 0
            while offset < stat.st_size:
                try:
                    copied = os.copy_file_range(self.fd, out, stat.st_size - offset, offset, offset)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    copied = os.pwrite(out, os.pread(self.fd, min(1 << 24, stat.st_size - offset), offset), offset)
                if copied == 0:
                    break
                offset += copied
        finally:
            os.close(out)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # drops the flock and the fcntl lock
            self.fd = None

    def __exit__(self, *exc: object) -> None:
        self.release()


def _identity_of(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _identity(path: str) -> tuple[int, int, int, int] | None:
    """Which file is at `path` now (a swap changes it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT count(*) FROM outcomes").fetchone()
    return int(row[0]) if row else 0


def _attached_has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_catalog = 'other' AND table_name = ?", [table]).fetchone()
    return bool(row and row[0])


def _folded(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """journal name -> offset its records are folded up to ({} for a file from before 0007)."""
    try:
        return {str(name): int(end) for name, end in con.execute("SELECT journal, folded_bytes FROM journal_folds").fetchall()}
    except duckdb.CatalogException:
        return {}


# -- a reader's view: the file plus what the journals hold past the folded offsets -------------
def _current_view(con: duckdb.DuckDBPyConnection) -> None:
    """Lay this harness's `outcomes_v` over the file's, in this read-only connection: a file a
    reader may not migrate (one DuckDB 2.0.0 wrote) still reads. A file older than the view's
    columns keeps its own."""
    try:
        con.execute("CREATE OR REPLACE TEMP VIEW outcomes_v AS " + OUTCOMES_VIEW)
    except duckdb.Error:
        pass


def _overlay(con: duckdb.DuckDBPyConnection, db: str) -> None:
    """Shadow runs, cells, outcomes and releases with temporary views that add the journals'
    unfolded records, in this connection only (a read-only connection may create TEMP objects,
    and unqualified names, `outcomes_v`'s included, resolve to them first).

    Each record is taken as a fold would write it: the first outcome or run of a key, the last
    cell and list of releases; a key already in the file keeps its row.
    """
    if not journals(db):
        return
    found = pending(db, _folded(con))
    if not found:
        return
    found_rows = _Rows.of(found.all())
    releases = found_rows.releases
    row = con.execute("SELECT current_database()").fetchone()
    catalog = '"' + str(row[0] if row else "").replace('"', '""') + '"'
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
        _insert_many(con, f"temp.journal_{table}", names, ([r[i] for i in chosen] for r in rows))
        match = " AND ".join(f"j.{k} = t.{k}" for k in keys[table])
        if rule == "keep":  # the file's row wins: a fold would do nothing for this key
            sql = (
                f"SELECT * FROM {catalog}.main.{table} UNION ALL BY NAME "
                f"SELECT * FROM temp.journal_{table} j WHERE NOT EXISTS (SELECT 1 FROM {catalog}.main.{table} t WHERE {match})"
            )
        else:  # the journal's row wins (a rebuilt cell, a run's newer list of releases)
            replaced = list(releases) if table == "releases" else list(found_rows.cells)
            key_columns = ", ".join(f"{k} TEXT" for k in keys[table])
            con.execute(f"CREATE OR REPLACE TEMP TABLE journal_{table}_keys ({key_columns})")
            _insert_many(con, f"temp.journal_{table}_keys", keys[table], (list(k) for k in replaced))
            sql = (
                f"SELECT * FROM {catalog}.main.{table} t WHERE NOT EXISTS (SELECT 1 FROM temp.journal_{table}_keys j WHERE {match}) "
                f"UNION ALL BY NAME SELECT * FROM temp.journal_{table}"
            )
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS {sql}")
