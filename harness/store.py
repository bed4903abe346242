"""The results store: DuckDB, named migrations, append-only outcomes. All SQL lives here.

Outcomes are keyed by (run, cell, scenario, repeat) and only ever inserted; each insert is its
own transaction, so a sweep killed at any moment leaves whole rows or none, and a rerun fills
in exactly the missing keys. Users query the view `outcomes_v` (documented in docs/store.md).
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

AXIS_COLUMNS = ("torch", "transformers", "accelerate", "peft", "bitsandbytes")

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
            " env_status, env_message, env_seconds, env_reused, built_at, cuda_runtime) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        return added

    def merge_database(self, path: Path) -> int:
        """Bring another DuckDB results file in, in one transaction; returns the outcomes added."""
        before = self.count("outcomes")
        self.con.execute("ATTACH ? AS other (READ_ONLY)", [str(path)])
        try:
            self.con.execute("BEGIN TRANSACTION")
            # BY NAME: a file written by another harness version may order its columns differently
            self.con.execute("INSERT INTO runs BY NAME SELECT * FROM other.runs ON CONFLICT DO NOTHING")
            self.con.execute("INSERT OR REPLACE INTO cells BY NAME SELECT * FROM other.cells")
            self.con.execute("INSERT INTO outcomes BY NAME SELECT * FROM other.outcomes ON CONFLICT DO NOTHING")
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        finally:
            self.con.execute("DETACH other")
        return self.count("outcomes") - before

    # -- reads ----------------------------------------------------------------------------
    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        rows = self.con.execute("SELECT cell_id, scenario, repeat FROM outcomes WHERE run_id = ?", [run_id]).fetchall()
        return {(r[0], r[1], int(r[2])) for r in rows}

    def statuses(self, cell_id: str, scenario: str) -> list[str]:
        """Every stored status of one scenario in one cell, over all runs (bisection reuses them)."""
        rows = self.con.execute(
            "SELECT status FROM outcomes WHERE cell_id = ? AND scenario = ? ORDER BY started_at", [cell_id, scenario]
        ).fetchall()
        return [r[0] for r in rows]

    def outcomes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM outcomes_v"
        params: list[Any] = []
        if run_id:
            sql += " WHERE run_id = ?"
            params.append(run_id)
        sql += " ORDER BY cell_id, scenario, repeat"
        return self._dicts(sql, params)

    def cell(self, run_id: str, cell_id: str) -> dict[str, Any] | None:
        rows = self._dicts("SELECT * FROM cells WHERE run_id = ? AND cell_id = ?", [run_id, cell_id])
        return rows[0] if rows else None

    def count(self, table: str = "outcomes") -> int:
        if table not in ("outcomes", "cells", "runs"):
            raise ValueError(table)
        row = self.con.execute(f"SELECT count(*) FROM {table}").fetchone()
        return int(row[0]) if row else 0

    def duplicate_keys(self) -> int:
        row = self.con.execute(
            "SELECT count(*) FROM (SELECT run_id, cell_id, scenario, repeat FROM outcomes GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone()
        return int(row[0]) if row else 0

    def _dicts(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    # -- pins and reports -------------------------------------------------------------------
    _CELL_JSON = ("versions", "requirements", "installed", "inherited", "git_commits")

    def runs_info(self) -> dict[str, dict[str, Any]]:
        """run id -> its `runs` row, `settings` and `host` decoded: index settings, matrix path, GPU."""
        runs = {}
        for row in self._dicts("SELECT * FROM runs ORDER BY started_at, run_id"):
            for column in ("settings", "host"):
                value = json.loads(row[column]) if isinstance(row.get(column), str) else row.get(column)
                row[column] = value if isinstance(value, dict) else {}
            runs[row["run_id"]] = row
        return runs

    def outcomes_with_traces(self, scenarios: Sequence[str] = (), cell_id: str = "", signature: str = "") -> list[dict[str, Any]]:
        """`outcomes_v` rows plus each outcome's `traceback` and `output_tail` (the view leaves them out).

        scenarios: only these (empty: all). cell_id: only this cell. signature: only outcomes with it.
        """
        sql = "SELECT v.*, o.traceback, o.output_tail FROM outcomes_v v JOIN outcomes o USING (run_id, cell_id, scenario, repeat)"
        where: list[str] = []
        params: list[Any] = []
        if scenarios:
            where.append(f"v.scenario IN ({', '.join('?' for _ in scenarios)})")
            params.extend(scenarios)
        if cell_id:
            where.append("v.cell_id = ?")
            params.append(cell_id)
        if signature:
            where.append("v.signature = ?")
            params.append(signature)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._dicts(sql + " ORDER BY v.cell_id, v.scenario, v.run_id, v.repeat", params)

    def cell_records(self, cell_id: str) -> list[dict[str, Any]]:
        """Every run's record of one cell (JSON columns decoded), newest first."""
        rows = self._dicts("SELECT * FROM cells WHERE cell_id = ? ORDER BY built_at DESC, run_id DESC", [cell_id])
        for row in rows:
            for column in self._CELL_JSON:
                if isinstance(row.get(column), str):
                    row[column] = json.loads(row[column])
        return rows

    # -- transitions (attribution.py computes them; the dashboard reads them) ---------------
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

    def transitions(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Stored transitions (JSON columns decoded), optionally of one scope, in a stable order.

        A file opened read-only from before migration 0003 has no table yet: no transitions.
        """
        exists = self.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'transitions'").fetchone()
        if not exists or not exists[0]:
            return []
        sql = "SELECT * FROM transitions"
        params: list[Any] = []
        if scope is not None:
            sql += " WHERE scope = ?"
            params.append(scope)
        sql += " ORDER BY scope, scenario, seq"
        rows = self._dicts(sql, params)
        for row in rows:
            for column in self._TRANSITION_JSON:
                if isinstance(row.get(column), str):
                    row[column] = json.loads(row[column])
        return rows

    # -- dashboard queries ----------------------------------------------------------------
    # Read-only queries for dashboard/ (it has no SQL of its own). Filters are a mapping of
    # column or axis -> allowed values: run_id, cell_id, scenario, status, platform, gpu, any
    # axis (torch, transformers, ..., or another package recorded in a cell's versions). An
    # empty or missing list means "any". Heavy lifting (grouping, counting) stays in DuckDB so
    # a page over 100,000 outcomes moves thousands of rows into Python, not 100,000.
    _DASHBOARD_COLUMNS = frozenset({"run_id", "cell_id", "scenario", "status", "platform", "gpu", *AXIS_COLUMNS})
    _STATUSES = ("pass", "fail", "error", "crash", "timeout", "oom", "unresolvable", "install_failed", "not_applicable")

    def _dashboard_where(self, filters: dict[str, Sequence[str]] | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for name, values in sorted((filters or {}).items()):
            chosen = [str(v) for v in values]
            if not chosen:
                continue
            marks = ", ".join("?" for _ in chosen)
            if name in self._DASHBOARD_COLUMNS:
                clauses.append(f"{name} IN ({marks})")  # name is one of a fixed set, never user text
            else:
                clauses.append(f"COALESCE(installed->>?, versions->>?) IN ({marks})")
                params += [name, name]
            params += chosen
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def _has_table(self, name: str) -> bool:
        row = self.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()
        return bool(row and row[0])

    def dashboard_overview(self) -> dict[str, Any]:
        """What the file holds, for the 'which data is this' line: counts, time span, hosts."""
        row = self.con.execute(
            "SELECT count(*), count(DISTINCT run_id), count(DISTINCT cell_id), count(DISTINCT scenario), "
            "min(started_at), max(started_at) FROM outcomes"
        ).fetchone()
        assert row is not None
        hosts = self.con.execute("SELECT DISTINCT host->>'platform', host->>'gpu' FROM runs ORDER BY ALL").fetchall()
        transitions = self.con.execute("SELECT count(*) FROM transitions").fetchone() if self._has_table("transitions") else (0,)
        return {
            "outcomes": int(row[0]),
            "runs": int(row[1]),
            "cells": int(row[2]),
            "scenarios": int(row[3]),
            "first": row[4],
            "last": row[5],
            "platforms": sorted({h[0] for h in hosts if h[0]}),
            "gpus": sorted({h[1] for h in hosts if h[1]}),
            "transitions": int(transitions[0]) if transitions else 0,
        }

    def dashboard_runs(self) -> list[dict[str, Any]]:
        """One row per run: where it ran, when (its outcomes' span), how much it holds; newest first."""
        return self._dicts(
            """
            WITH o AS (
                SELECT run_id, min(started_at) AS first, max(started_at) AS last, count(*) AS outcomes,
                       count(DISTINCT cell_id) AS cells, count(DISTINCT scenario) AS scenarios
                FROM outcomes GROUP BY run_id
            )
            SELECT r.run_id, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu, r.harness_version,
                   o.first, o.last, COALESCE(o.outcomes, 0) AS outcomes, COALESCE(o.cells, 0) AS cells,
                   COALESCE(o.scenarios, 0) AS scenarios, starts_with(r.run_id, 'bisect-') AS bisection
            FROM runs r LEFT JOIN o USING (run_id) ORDER BY o.last DESC NULLS LAST, r.run_id
            """
        )

    def dashboard_facets(self) -> dict[str, list[str]]:
        """Every value a filter can take: scenario, platform, gpu, run_id, and each axis (unsorted versions)."""
        facets: dict[str, list[str]] = {
            "scenario": [r[0] for r in self.con.execute("SELECT DISTINCT scenario FROM outcomes ORDER BY 1").fetchall()],
            "run_id": [r[0] for r in self.con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()],
        }
        hosts = self.con.execute("SELECT DISTINCT host->>'platform', host->>'gpu' FROM runs").fetchall()
        facets["platform"] = sorted({h[0] for h in hosts if h[0]})
        facets["gpu"] = sorted({h[1] for h in hosts if h[1]})
        rows = self.con.execute(
            "SELECT axis, COALESCE(installed->>axis, versions->>axis) AS value "
            "FROM (SELECT installed, versions, unnest(json_keys(versions)) AS axis FROM cells) GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        for axis, value in rows:
            if value is not None:
                facets.setdefault(axis, []).append(value)
        return facets

    def dashboard_matrix(self, filters: dict[str, Sequence[str]] | None = None, *, by_gpu: bool = False) -> list[dict[str, Any]]:
        """One row per (cell, scenario[, gpu]) over the filtered outcomes: `outcomes`, a count per
        status (columns named after the statuses) and the most frequent failure signature."""
        where, params = self._dashboard_where(filters)
        counts = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in self._STATUSES)
        gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
        return self._dicts(
            f"SELECT cell_id, scenario{gpu}, count(*) AS outcomes, {counts}, "
            f"mode(signature) FILTER (WHERE signature <> '' AND status NOT IN ('pass', 'not_applicable')) AS signature "
            f"FROM outcomes_v{where} GROUP BY ALL ORDER BY ALL",
            params,
        )

    def dashboard_cells(self, filters: dict[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
        """One row per cell among the filtered outcomes: its axis versions (the five columns and
        `versions`, JSON decoded), runs, GPUs, outcome count and last outcome time."""
        where, params = self._dashboard_where(filters)
        axes = ", ".join(f"COALESCE(c.installed->>'{a}', c.versions->>'{a}') AS {a}" for a in AXIS_COLUMNS)
        # Group the outcomes first and look the versions up once per cell: extracting them from
        # JSON for every outcome row costs several times more.
        rows = self._dicts(
            f"""
            WITH o AS (
                SELECT cell_id, list(DISTINCT run_id ORDER BY run_id) AS runs,
                       list(DISTINCT COALESCE(gpu, '') ORDER BY COALESCE(gpu, '')) AS gpus,
                       count(*) AS outcomes, max(started_at) AS last
                FROM outcomes_v{where} GROUP BY cell_id
            ),
            c AS (
                SELECT cell_id, arg_max(installed, built_at) AS installed, arg_max(versions, built_at) AS versions
                FROM cells GROUP BY cell_id
            )
            SELECT o.cell_id, {axes}, c.versions, o.runs, o.gpus, o.outcomes, o.last
            FROM o LEFT JOIN c USING (cell_id) ORDER BY o.cell_id
            """,
            params,
        )
        for row in rows:
            row["versions"] = json.loads(row["versions"]) if isinstance(row["versions"], str) else (row["versions"] or {})
        return rows

    def dashboard_failures(self, filters: dict[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
        """One row per failure signature (any status but pass and not_applicable): the library it
        blames, how many outcomes, cells, scenarios and runs it hits, when first and last seen."""
        where, params = self._dashboard_where(filters)
        where = (where + " AND" if where else " WHERE") + " status NOT IN ('pass', 'not_applicable')"
        return self._dicts(
            f"""
            SELECT COALESCE(NULLIF(signature, ''), status) AS signature, any_value(signature_family) AS signature_family,
                   mode(NULLIF(blamed_library, '')) AS blamed_library, mode(NULLIF(exception_type, '')) AS exception_type,
                   list(DISTINCT status ORDER BY status) AS statuses, count(*) AS outcomes, count(DISTINCT cell_id) AS cells,
                   list(DISTINCT scenario ORDER BY scenario) AS scenarios, count(DISTINCT run_id) AS runs,
                   min(started_at) AS first_seen, max(started_at) AS last_seen, min(cell_id) AS example_cell
            FROM outcomes_v{where} GROUP BY 1 ORDER BY cells DESC, outcomes DESC, signature
            """,
            params,
        )

    def dashboard_transition_scopes(self) -> list[str]:
        if not self._has_table("transitions"):
            return []
        return [r[0] for r in self.con.execute("SELECT DISTINCT scope FROM transitions ORDER BY 1").fetchall()]

    def dashboard_transition_summary(self, scope: str = "") -> list[dict[str, Any]]:
        """Per signature, axis and kind (introduced, fixed, flaky): the transitions' count and the
        distinct `after` versions (the first version on the new side), for the failures table."""
        if not self._has_table("transitions"):
            return []
        return self._dicts(
            "SELECT signature, axis, kind, count(*) AS transitions, list(DISTINCT after ORDER BY after) AS versions "
            "FROM transitions WHERE scope = ? GROUP BY ALL ORDER BY ALL",
            [scope],
        )

    def dashboard_transitions(self, signature: str, scope: str = "") -> list[dict[str, Any]]:
        """The stored transitions of one signature (JSON columns decoded), in attribution's order."""
        if not self._has_table("transitions"):
            return []
        rows = self._dicts("SELECT * FROM transitions WHERE scope = ? AND signature = ? ORDER BY scenario, seq", [scope, signature])
        for row in rows:
            for column in self._TRANSITION_JSON:
                if isinstance(row.get(column), str):
                    row[column] = json.loads(row[column])
        return rows

    def dashboard_bisections(self) -> list[dict[str, Any]]:
        """Outcomes of `harness bisect` runs (run ids `bisect-<scenario>-<axis>`), without their long text."""
        rows = self._dicts(
            "SELECT run_id, cell_id, scenario, repeat, status, signature, blamed_library, versions, git_commits, "
            f"{', '.join(AXIS_COLUMNS)}, gpu, started_at FROM outcomes_v WHERE starts_with(run_id, 'bisect-') "
            "ORDER BY run_id, started_at, cell_id, repeat"
        )
        for row in rows:
            for column in ("versions", "git_commits"):
                row[column] = json.loads(row[column]) if isinstance(row[column], str) else (row[column] or {})
        return rows

    def dashboard_cell_records(self, cell_id: str) -> list[dict[str, Any]]:
        """Every run's environment record of one cell (JSON decoded), with that run's host; newest first."""
        rows = self._dicts(
            "SELECT c.*, r.host, r.harness_version, r.matrix_path FROM cells c LEFT JOIN runs r USING (run_id) "
            "WHERE c.cell_id = ? ORDER BY c.built_at DESC, c.run_id",
            [cell_id],
        )
        for row in rows:
            for column in ("versions", "requirements", "installed", "inherited", "git_commits", "host"):
                if isinstance(row.get(column), str):
                    row[column] = json.loads(row[column])
        return rows

    def dashboard_cell_outcomes(self, cell_id: str, runs: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every outcome of one cell with its traceback, output tail and metrics (decoded)."""
        sql = (
            "SELECT o.*, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu FROM outcomes o "
            "LEFT JOIN runs r USING (run_id) WHERE o.cell_id = ?"
        )
        params: list[Any] = [cell_id]
        if runs:
            sql += f" AND o.run_id IN ({', '.join('?' for _ in runs)})"
            params += list(runs)
        rows = self._dicts(sql + " ORDER BY o.scenario, o.started_at, o.run_id, o.repeat", params)
        for row in rows:
            row["metrics"] = json.loads(row["metrics"]) if isinstance(row.get("metrics"), str) else (row.get("metrics") or {})
        return rows

    def dashboard_pin_rows(self, scenarios: Sequence[str], filters: dict[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
        """Outcome rows of `scenarios` shaped for `harness.pin.choose`, slimmed for speed: `installed`
        and `inherited` hold only the cell's axes (fetch a full freeze with dashboard_cell_records),
        `message` only its first line."""
        if not scenarios:
            return []
        where, params = self._dashboard_where({**(filters or {}), "scenario": list(scenarios)})
        return self._dicts(
            f"""
            WITH c AS (
                SELECT run_id, cell_id, python, versions,
                       (SELECT json_group_object(k, installed->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                        WHERE installed->>k IS NOT NULL) AS installed,
                       (SELECT json_group_object(k, inherited->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                        WHERE inherited->>k IS NOT NULL) AS inherited
                FROM cells
            ),
            o AS (
                SELECT run_id, cell_id, scenario, repeat, status, signature, split_part(message, chr(10), 1) AS message,
                       gpu, platform, started_at
                FROM outcomes_v{where}
            )
            SELECT o.*, c.versions, c.installed, c.inherited, c.python FROM o LEFT JOIN c USING (run_id, cell_id)
            ORDER BY o.cell_id, o.scenario, o.run_id, o.repeat
            """,
            params,
        )
