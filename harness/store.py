"""The results store: a DuckDB file, its named migrations, and everything that writes to it.

Outcomes are keyed by (run, cell, scenario, repeat) and only ever inserted; each insert is its
own transaction, so a sweep killed at any moment leaves whole rows or none, and a rerun fills
in exactly the missing keys. Users query the view `outcomes_v` (documented in docs/store.md).
Reads live beside this module in `queries.py`, named by what they return; the schema, the
writes and the merges live here. Between them they hold all of the harness's SQL.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from harness.errors import StoreError
from harness.outcome import CellRecord, Outcome

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
)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ would need pytz


class Store:
    """One DuckDB file. Open read-only for the dashboard and for queries."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.con = self._connect()
        if not read_only:
            self.migrate()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        if self.path != ":memory:":
            target = Path(self.path)
            if target.is_dir():
                raise StoreError(f"database path {self.path!r} is a directory; pass --db path/to/results.duckdb")
            if self.read_only and not target.exists():
                raise StoreError(f"database {self.path!r} does not exist; run a sweep first or pass --db with an existing file")
            parent = target.parent if str(target.parent) else Path(".")
            if not self.read_only and not target.exists() and not parent.is_dir():
                raise StoreError(
                    f"cannot create database {self.path!r}: folder {str(parent)!r} does not exist; create it or pass --db with another path"
                )
            if not self.read_only and not target.exists() and not os.access(parent, os.W_OK):
                raise StoreError(f"cannot create database {self.path!r}: {target.parent} is not writable; pass --db with a writable path")
        try:
            return duckdb.connect(self.path, read_only=self.read_only)
        except (duckdb.IOException, duckdb.InvalidInputException, duckdb.SerializationException) as exc:
            first = str(exc).splitlines()[0]
            raise StoreError(
                f"cannot open {self.path!r} as a DuckDB database ({first}); "
                "pass --db with a .duckdb file the harness created, or a new path"
            ) from exc

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        self.con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
        done = {row[0] for row in self.con.execute("SELECT name FROM schema_migrations").fetchall()}
        applied = []
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            self.con.execute("BEGIN TRANSACTION")
            try:
                self.con.execute(sql)
                self.con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [name, _now()])
                self.con.execute("COMMIT")
            except Exception:
                self.con.execute("ROLLBACK")
                raise
            applied.append(name)
        return applied

    def applied_migrations(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]

    # -- writes ---------------------------------------------------------------------------
    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None:
        self.con.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [run_id, _now(), matrix_path, matrix_text, json.dumps(settings), harness_version, json.dumps(host)],
        )

    def record_cell(self, rec: CellRecord) -> None:
        """Latest environment facts for a cell in a run (a rebuild replaces them)."""
        self.con.execute(
            "INSERT OR REPLACE INTO cells (run_id, cell_id, python, versions, requirements, installed, inherited, git_commits,"
            " env_status, env_message, env_seconds, env_reused, built_at, cuda_runtime, python_version, origin)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                rec.run_id,
                rec.cell_id,
                rec.python,
                json.dumps(rec.versions),
                json.dumps(rec.requirements),
                json.dumps(rec.freeze),
                json.dumps(rec.inherited),
                json.dumps(rec.git_commits),
                rec.env_status,
                rec.env_message,
                rec.env_seconds,
                rec.env_reused,
                _now(),
                rec.cuda_runtime,
                rec.python_version,
                rec.origin,
            ],
        )

    def add_outcome(self, outcome: Outcome) -> bool:
        """Insert one outcome; False if its key is already stored (append-only: never overwritten)."""
        d = outcome.serialize()
        before = self.con.execute(
            "SELECT count(*) FROM outcomes WHERE run_id=? AND cell_id=? AND scenario=? AND repeat=?",
            [d["run_id"], d["cell_id"], d["scenario"], d["repeat"]],
        ).fetchone()
        if before and before[0]:
            return False
        self.con.execute(
            "INSERT INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [
                d["run_id"],
                d["cell_id"],
                d["scenario"],
                d["repeat"],
                d["status"],
                d["message"],
                d["signature"],
                d["signature_family"],
                d["blamed_library"],
                d["exception_type"],
                d["traceback"],
                d["output_tail"],
                d["seconds"],
                json.dumps(d["metrics"]),
                d["started_at"] or _now(),
            ],
        )
        return True

    # -- merging ----------------------------------------------------------------------------
    def merge_records(self, records: Iterable[dict[str, Any]]) -> int:
        """Bring a JSON-lines shard in; returns the outcomes added (existing keys are kept)."""
        added = 0
        for rec in records:
            kind = rec.get("type")
            if kind == "run":
                self.ensure_run(
                    rec["run_id"],
                    rec.get("matrix_path", ""),
                    rec.get("matrix_text", ""),
                    rec.get("settings", {}),
                    rec.get("harness_version", ""),
                    rec.get("host", {}),
                )
            elif kind == "cell":
                fields = {k: v for k, v in rec.items() if k != "type"}
                self.record_cell(CellRecord(**fields))
            elif kind == "outcome":
                fields = {k: v for k, v in rec.items() if k != "type"}
                added += self.add_outcome(Outcome.from_dict(fields))
            elif kind == "releases":
                self.record_releases(rec["run_id"], {rec["axis"]: [(v, None) for v in rec.get("versions", [])]})
        return added

    def merge_database(self, path: Path) -> int:
        """Bring another DuckDB results file in, in one transaction; returns the outcomes added."""
        before = self._outcome_count()
        self.con.execute("ATTACH ? AS other (READ_ONLY)", [str(path)])
        try:
            self.con.execute("BEGIN TRANSACTION")
            # BY NAME: a file written by another harness version may order its columns differently
            self.con.execute("INSERT INTO runs BY NAME SELECT * FROM other.runs ON CONFLICT DO NOTHING")
            self.con.execute("INSERT OR REPLACE INTO cells BY NAME SELECT * FROM other.cells")
            self.con.execute("INSERT INTO outcomes BY NAME SELECT * FROM other.outcomes ON CONFLICT DO NOTHING")
            if self._attached_has("releases"):
                self.con.execute("INSERT INTO releases BY NAME SELECT * FROM other.releases ON CONFLICT DO NOTHING")
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        finally:
            self.con.execute("DETACH other")
        return self._outcome_count() - before

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
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute(delete, params)
            for row in rows:
                values = [json.dumps(row.get(c)) if c in self._TRANSITION_JSON else row.get(c) for c in columns]
                values[0] = scope
                self.con.execute(insert, [*values, written, now])
                written += 1
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return written

    def record_releases(self, run_id: str, releases: dict[str, list[tuple[str, datetime | None]]]) -> int:
        """The releases on the index of each axis, as the run saw them (replacing its earlier list), in one transaction."""
        written = 0
        self.con.execute("BEGIN TRANSACTION")
        try:
            for axis, listed in releases.items():
                self.con.execute("DELETE FROM releases WHERE run_id = ? AND axis = ?", [run_id, axis])
                for version, uploaded in listed:
                    self.con.execute("INSERT INTO releases VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", [run_id, axis, version, uploaded])
                    written += 1
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return written

    # -- resume -----------------------------------------------------------------------------
    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        """(cell, scenario, repeat) already stored for a run: a rerun computes only the rest."""
        rows = self.con.execute("SELECT cell_id, scenario, repeat FROM outcomes WHERE run_id = ?", [run_id]).fetchall()
        return {(r[0], r[1], int(r[2])) for r in rows}

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts: the one primitive `queries` builds on."""
        cur = self.con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def has_table(self, name: str) -> bool:
        row = self.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()
        return bool(row and row[0])

    def _outcome_count(self) -> int:
        row = self.con.execute("SELECT count(*) FROM outcomes").fetchone()
        return int(row[0]) if row else 0

    def _attached_has(self, table: str) -> bool:
        row = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_catalog = 'other' AND table_name = ?", [table]
        ).fetchone()
        return bool(row and row[0])
