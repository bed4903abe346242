"""Records as the rows of a results file: the rules by which a fold, a merge and a reader's view write them.

A record is one line of a writer's journal or of a JSON-lines shard (`shardfile.py`): a run, a
cell, an outcome, a run's list of releases or what a suite's run collected in a cell. `Rows.of` turns records into table rows by the
rules of each table, `apply` inserts them, and `merge_database` and `replace_transitions` are the
other bulk writes; each works on a connection `store.Store` hands it inside one of its writes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy

from harness.storage import cached, collections
from harness.storage.history import settle
from harness.storage.store_schema import CELL_COLUMNS, OUTCOME_COLUMNS, RELEASE_COLUMNS, RUN_COLUMNS, now


# -- records (a journal's lines, a shard's lines) as rows ------------------------------------
def _outcome_row(rec: dict[str, Any]) -> list[Any]:
    row = {**rec, "metrics": json.dumps(rec.get("metrics") or {}), "started_at": rec.get("started_at") or now()}
    row["test_id"] = rec.get("test_id") or None  # NULL: the node id is the identity
    return [row.get(c) for c in OUTCOME_COLUMNS]


def _cell_row(rec: dict[str, Any]) -> list[Any]:
    row = {
        **rec,
        **{
            k: json.dumps(rec.get(k) or ({} if k != "requirements" else []))
            for k in ("versions", "requirements", "inherited", "git_commits")
        },
        "installed": json.dumps(rec.get("freeze") or {}),
        "built_at": rec.get("built_at") or now(),
        "cuda_runtime": rec.get("cuda_runtime") or "",
        "python_version": rec.get("python_version") or "",
        "origin": rec.get("origin") or "matrix",
    }
    return [row.get(c) for c in CELL_COLUMNS]


def _run_row(rec: dict[str, Any]) -> list[Any]:
    row = {
        **rec,
        "started_at": rec.get("started_at") or now(),
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


def insert_many(
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
class Rows:
    """Records (a journal's, a shard's) as the rows a fold writes, by the rules of each table:
    an outcome or a run is never overwritten (the first stored wins: two sweeps of one run
    computing one key leave one row), a cell's latest env facts replace the earlier ones, and a
    run's latest list of releases of an axis replaces its earlier list."""

    outcomes: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    runs: dict[Any, list[Any]] = field(default_factory=dict)
    cells: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    releases: dict[tuple[Any, ...], list[list[Any]]] = field(default_factory=dict)
    collections: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]]) -> Rows:
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
            elif kind == "collection":
                rows.collections[(rec["run_id"], rec["cell_id"])] = rec
        return rows

    def __bool__(self) -> bool:
        return bool(self.outcomes or self.runs or self.cells or self.releases or self.collections)


def apply(con: duckdb.DuckDBPyConnection, records: Iterable[dict[str, Any]]) -> int:
    """Write records into the tables, as their writers meant them (`Rows`), and settle the
    current state of the tests they touched and of the cells whose collection they brought
    (`history.settle`); returns the outcomes added."""
    rows = Rows.of(records)
    insert_many(con, "runs", RUN_COLUMNS, rows.runs.values(), "nothing")
    insert_many(con, "cells", CELL_COLUMNS, rows.cells.values(), "replace")
    for (run_id, axis), listed in rows.releases.items():
        con.execute("DELETE FROM releases WHERE run_id = ? AND axis = ?", [run_id, axis])
        insert_many(con, "releases", RELEASE_COLUMNS, listed, "nothing")
    columns = _present(con, "outcomes", OUTCOME_COLUMNS)
    picked = [OUTCOME_COLUMNS.index(c) for c in columns]
    added = insert_many(con, "outcomes", columns, ([row[i] for i in picked] for row in rows.outcomes.values()), "nothing", counted=True)
    cells = collections.write(con, rows.collections.values()) if rows.collections and collections.has_collections(con) else set()
    if added or cells:
        settle(con, {(str(row[_CELL]), str(row[_TEST] or row[_NODE])) for row in rows.outcomes.values()}, cells)
    return added


_CELL, _NODE, _TEST = (OUTCOME_COLUMNS.index(c) for c in ("cell_id", "scenario", "test_id"))


def _present(con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str]) -> list[str]:
    """`columns` that `table` has (a connection held on a file a migration has not reached yet lacks the later ones)."""
    have = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    return [c for c in columns if c in have]


def merge_records(con: duckdb.DuckDBPyConnection, records: Iterable[dict[str, Any]]) -> int:
    """Bring a JSON-lines shard (or a journal) in, in one transaction; returns the outcomes added."""
    con.execute("BEGIN TRANSACTION")
    try:
        added = apply(con, records)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return added


def merge_database(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """Bring another DuckDB results file in, in one transaction, and settle the current state
    again (`history.settle`: the newest run of each test wins, whichever file it came from);
    returns the outcomes added (current or history)."""
    before = _count(con)
    con.execute("ATTACH ? AS other (READ_ONLY)", [str(path)])
    try:
        con.execute("BEGIN TRANSACTION")
        # BY NAME: a file written by another harness version may order its columns differently
        con.execute("INSERT INTO runs BY NAME SELECT * FROM other.runs ON CONFLICT DO NOTHING")
        con.execute("INSERT OR REPLACE INTO cells BY NAME SELECT * FROM other.cells")
        con.execute("INSERT INTO outcomes BY NAME SELECT * FROM other.outcomes ON CONFLICT DO NOTHING")
        if _attached_has(con, "history"):
            # a span the other file kept: new here unless this file holds its row already (either table)
            held = " AND ".join(f"t.{k} = h.{k}" for k in ("run_id", "cell_id", "scenario", "repeat"))
            con.execute(
                "INSERT INTO history BY NAME SELECT * FROM other.history h "
                f"WHERE NOT EXISTS (SELECT 1 FROM outcomes t WHERE {held}) AND NOT EXISTS (SELECT 1 FROM history t WHERE {held})"
            )
        if _attached_has(con, "releases"):
            con.execute("INSERT INTO releases BY NAME SELECT * FROM other.releases ON CONFLICT DO NOTHING")
        lists = 0
        if _attached_has(con, "collections"):
            lists = _count(con, "collections")
            con.execute("INSERT OR REPLACE INTO collections BY NAME SELECT * FROM other.collections")
            con.execute(
                "INSERT INTO collected SELECT * FROM other.collected o WHERE o.digest NOT IN (SELECT DISTINCT digest FROM collected)"
            )
            lists = _count(con, "collections") - lists
        added = _count(con) - before
        if added or lists:
            settle(con)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        con.execute("DETACH other")
    return added


# -- answers (analysis.attribution computes them; attributed.transitions reads them) -------------
_TRANSITION_COLUMNS = (
    "scope",  # first: `replace_transitions` sets it
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


class _Encoded:
    """A transition's JSON column as text, each distinct value encoded once: the transitions of
    tests whose rows say the same share their lists (`untested`, `held`, `runs`). A tuple or a
    dict met again as the same object (`attribution.to_columns` hands on the answers' own) is
    looked up by identity, without a key built from its items; the objects are held until this
    encoder goes, so that no identity is reused meanwhile."""

    def __init__(self) -> None:
        self._seen: dict[Any, str] = {}
        self._same: dict[int, tuple[Any, str]] = {}

    def __call__(self, value: Any) -> str:
        if value is None:
            return "null"
        if isinstance(value, tuple | dict):
            held = self._same.get(id(value))
            if held is not None and held[0] is value:
                return held[1]
            text = self._text(list(value) if isinstance(value, tuple) else value)
            self._same[id(value)] = (value, text)
            return text
        return self._text(value)

    def _text(self, value: Any) -> str:
        # only text is kept by value: 1, 1.0 and True are equal keys that encode apart
        if isinstance(value, list) and set(map(type, value)) <= _TEXT:
            key: tuple[Any, ...] = (list, *value)
        elif isinstance(value, dict) and set(map(type, value.values())) <= _TEXT:
            key = (dict, *value.items())
        else:
            return json.dumps(value)
        text = self._seen.get(key)
        if text is None:
            text = self._seen[key] = json.dumps(value)
        return text


_TEXT = {str}


def columns_of(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Transitions `rows` (`attribution.to_rows`' shape) by column: a key a row lacks is None."""
    listed = list(rows)
    return {name: [r.get(name) for r in listed] for name in _TRANSITION_COLUMNS[1:]}


def _column(values: list[Any], name: str, encoded: _Encoded) -> list[str | None]:
    """Column `name` of the transitions, as stored: a JSON column encoded, any other as text
    (NULL stays NULL), each value looked at once per column, not once per row, where all are text."""
    if name in _TRANSITION_JSON:
        return list(map(encoded, values))
    if set(map(type, values)) <= {str, type(None)}:
        return values
    return [v if v is None or isinstance(v, str) else str(v) for v in values]


def replace_transitions(
    con: duckdb.DuckDBPyConnection, columns: Mapping[str, Sequence[Any]], scope: str, scenarios: Sequence[str], stamp: datetime
) -> int:
    """Transitions (by column: `columns_of`, `attribution.to_columns`) in place of the old ones of
    `scope` (of `scenarios` only, if any), computed at `stamp`, in one transaction; returns the rows written."""
    delete = "DELETE FROM transitions WHERE scope = ?"
    params: list[Any] = [scope]
    if scenarios:
        delete += f" AND scenario IN ({', '.join('?' for _ in scenarios)})"
        params.extend(scenarios)
    count = len(columns["scenario"])
    encoded = _Encoded()
    # DuckDB scans the columns as NumPy arrays at once: an INSERT per row took 15 s for a suite's
    # 13,695 transitions, a JSON document per row 2 s for 2,000,000 outcomes' 78,000
    batch = {c: numpy.array(_column(list(columns.get(c) or [None] * count), c, encoded), dtype=object) for c in _TRANSITION_COLUMNS[1:]}
    values = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in batch)
    batch["seq"] = numpy.arange(count, dtype=numpy.int32)  # the order written, whatever order DuckDB scans in
    name = f"harness_transitions_{uuid.uuid4().hex[:12]}"
    insert = (
        f"INSERT INTO transitions ({', '.join(_TRANSITION_COLUMNS)}, seq, computed_at) SELECT ?, {values}, seq, ?::TIMESTAMP FROM {name}"
    )
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(delete, params)
        if count:
            con.register(name, batch)
            con.execute(insert, [scope, stamp.isoformat(sep=" ")])
        if not scenarios:  # every answer of the scope, none among them perhaps: said by a stamp, not by a row
            cached.stamp(con, scope, stamp, count)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    finally:
        if count:
            con.unregister(name)
    return count


def _count(con: duckdb.DuckDBPyConnection, table: str = "") -> int:
    """Rows stored, current and history: what a merge adds to (or the rows of `table`)."""
    sql = f"SELECT count(*) FROM {table}" if table else "SELECT (SELECT count(*) FROM outcomes) + (SELECT count(*) FROM history)"
    row = con.execute(sql).fetchone()
    return int(row[0]) if row else 0


def _attached_has(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_catalog = 'other' AND table_name = ?", [table]).fetchone()
    return bool(row and row[0])
