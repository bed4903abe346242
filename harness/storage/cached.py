"""Answers kept in the results file beside the outcomes they were computed from (table `cached`).

Some answers read every current outcome and cost seconds on a team's file: the Support page's
tables (each machine's known-good set, every library's line) took 4.8 s at 20,000 tests × 20
cells on every first render. The commands that write outcomes into the file (`sweep`, `merge`,
`compact`) compute them once and keep them here, under the **state key** of what they were
computed from; a reader uses them only while the key is the file's key now, and computes them
itself otherwise (a file a harness before this one wrote, a sweep's journal laid over, a merge
that changed nothing it recomputed). The key hashes, in DuckDB, every current outcome as
readers see it (`outcomes_v`), with the flaky marks, the stored answers, the release lists and
the runs: anything those answers read.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from harness.storage.resultsfile import SqlResultsFile

TABLE = "cached"
_SCHEMA = f"CREATE TABLE IF NOT EXISTS {TABLE} (name VARCHAR PRIMARY KEY, key VARCHAR, payload VARCHAR, computed_at TIMESTAMP)"
# Each part: a table readers' answers depend on, and what of it changes when its rows do.
_PARTS = {
    "outcomes_v": "count(*), bit_xor(hash(run_id, cell_id, scenario, repeat, status, signature, started_at))",
    "flaky": "count(*), bit_xor(hash(run_id, cell_id, test, signature))",
    "transitions": "count(*), min(computed_at), max(computed_at)",
    "releases": "count(*), bit_xor(hash(run_id, axis, version))",
    "runs": "count(*), bit_xor(hash(run_id))",
}


def state_key(store: SqlResultsFile) -> str:
    """What the file's answers are computed from, as one string: equal keys, equal answers."""
    with store.reading():  # one view of the file for all its tables (a writer's store opened one per read: 0.3 s)
        parts = {
            table: ",".join(str(v) for v in store.fetch(f"SELECT {summary} FROM {table}")[0].values())
            for table, summary in _PARTS.items()
            if table == "outcomes_v" or store.has_table(table)
        }
    return ";".join(f"{table}:{summary}" for table, summary in parts.items())


def holds(store: SqlResultsFile, name: str) -> bool:
    """Whether the file keeps anything under `name`, whatever its key: asked before hashing every outcome for one (0.2 s)."""
    with store.reading():
        return store.has_table(TABLE) and bool(store.fetch(f"SELECT 1 AS kept FROM {TABLE} WHERE name = ? LIMIT 1", [name]))


def stamped(store: SqlResultsFile, scope: str) -> datetime | None:
    """When every answer of `scope` was last computed (`stamp`), or None."""
    with store.reading():
        if not store.has_table(TABLE):
            return None
        rows = store.fetch(f"SELECT computed_at FROM {TABLE} WHERE name = ?", [ATTRIBUTED + scope])
    return rows[0]["computed_at"] if rows else None


def read(store: SqlResultsFile, name: str, key: str) -> str | None:
    """The payload kept under `name` if it was computed from the state `key` names; else None."""
    with store.reading():
        if not store.has_table(TABLE):
            return None
        rows = store.fetch(f"SELECT payload FROM {TABLE} WHERE name = ? AND key = ?", [name, key])
    return str(rows[0]["payload"]) if rows else None


def write(store: SqlResultsFile, name: str, key: str, payload: str) -> None:
    """Keep `payload` under `name`, computed from the state `key` names (a writing Store)."""
    with store.writing() as con:  # type: ignore[attr-defined]
        _write_on(con, name, key, payload)


#: The name of the stamp `harness attribute` leaves for the answers of a scope (`stamp`): `attributed:` + the scope.
ATTRIBUTED = "attributed:"


def stamp(con: duckdb.DuckDBPyConnection, scope: str, computed_at: datetime, answers: int) -> None:
    """Note (in a writer's transaction) that every answer of `scope` was computed at `computed_at`:
    `attributed.answers_current` reads it where no answer was stored (every failure the same in
    every cell), which the answers' own `computed_at` cannot say."""
    _write_on(con, ATTRIBUTED + scope, computed_at.isoformat(sep=" "), str(answers), computed_at)


def drop_stamps(con: duckdb.DuckDBPyConnection) -> None:
    """Forget every scope's stamp: the answers went with outcomes added (`Store.merge`)."""
    kept = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [TABLE]).fetchone()
    if kept and kept[0]:
        con.execute(f"DELETE FROM {TABLE} WHERE starts_with(name, ?)", [ATTRIBUTED])


def _write_on(con: duckdb.DuckDBPyConnection, name: str, key: str, payload: str, at: datetime | None = None) -> None:
    con.execute(_SCHEMA)
    con.execute(f"DELETE FROM {TABLE} WHERE name = ?", [name])
    con.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?)", [name, key, payload, at or datetime.now(UTC).replace(tzinfo=None)])
