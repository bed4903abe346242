"""What each sweep of a suite collected in each cell, and the tests that left the current state with it.

A suite's current state in a cell is what its newest run there collected (docs/store.md,
"History"). A sweep records, per cell, the selection its worker was given and the tests that
selection collected, the files that failed to collect among them (`analysis.outcome.Collection`;
table `collections`, the list itself once per distinct list in `collected`). When a fold or a
merge settles the current state (`history.settle`), `leave` looks at every test of the cells it
settles: one that an earlier run of the cell collected, within a selection the newer run's
covers (`analysis.selection.covers`: a sweep of `-k lora` says nothing of the other tests), and
that the newer run did not collect, gets a `not_collected` row in `history` at the newer run
(`status.NOT_COLLECTED`), and settling keeps it out of `outcomes`: no answer reads it. Its
`exception_type` says why:

- `not_run`: its file (a conftest above it, the folder it lies in, or the whole suite: a worker
  that died before it collected) failed to collect; the row carries that failure's signature,
  so `harness changes` counts it under the file's regression ("500 tests not run");
- `collected`: it was a file's collection error (or a suite's env failure, or a worker's crash)
  and the newer run collected there without it: the file imports again;
- `removed`: anything else: deleted, renamed, or deselected by a marker it gained.

A test that a later run collects again is current again. Cells and scenarios a run did not
sweep keep their last outcome, and so does a cell whose env did not build (no collection).

A file written before the collections were recorded (migration `0011_collections`) is read once
by `read_older_runs`: each of its sweeps of a suite is taken to have collected the tests it has a
row of (a test absent from a sweep that built its cell, later than its last row, left there).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import duckdb

from harness.analysis.selection import Selection, covers
from harness.analysis.status import FAILURES, NOT_COLLECTED
from harness.storage.clauses import EPOCH, MACHINE_SQL, TEST_SQL

#: The name every suite's outcomes share where it has no node id: its env's failure in a cell.
SUITE_KEY = "pytest"
#: Runs that do not sweep the matrix: a watch, a refinement or a bisection probes a few tests.
SIDE_RUNS = ("watch-", "refine-", "bisect-")
_FAILING = ", ".join(f"'{s}'" for s in sorted(FAILURES))
_MESSAGES = {
    "removed": "not collected by this run: deleted, renamed or deselected",
    "collected": "collected without it by this run",
}


def digest_of(tests: Iterable[str]) -> str:
    """The content address of a list of tests (order and repeats aside)."""
    return hashlib.sha256("\n".join(sorted(set(tests))).encode()).hexdigest()[:20]


def selection_text(selection: Mapping[str, Any] | None) -> str:
    """A selection as canonical JSON: what two collections of one selection store alike."""
    found = selection or {}
    paths = [str(p) for p in found.get("paths") or ()]
    return json.dumps({"paths": paths, "k": str(found.get("k") or ""), "m": str(found.get("m") or "")}, sort_keys=True)


# -- writing ------------------------------------------------------------------------------------
def write(con: duckdb.DuckDBPyConnection, records: Iterable[Mapping[str, Any]]) -> set[str]:
    """Store collection records (the latest of a run and cell replaces the earlier); returns their cells."""
    cells: set[str] = set()
    for rec in records:
        tests = [str(t) for t in rec.get("tests") or ()]
        digest = digest_of(tests)
        held = con.execute("SELECT 1 FROM main.collected WHERE digest = ? LIMIT 1", [digest]).fetchone()
        if held is None:
            con.execute("INSERT INTO main.collected SELECT ?, unnest(?::VARCHAR[])", [digest, sorted(set(tests))])
        con.execute(
            "INSERT OR REPLACE INTO main.collections (run_id, cell_id, selection, digest, tests, errors) VALUES (?, ?, ?, ?, ?, ?)",
            [
                rec["run_id"],
                rec["cell_id"],
                selection_text(rec.get("selection")),
                digest,
                len(set(tests)),
                json.dumps(rec.get("errors") or {}),
            ],
        )
        cells.add(str(rec["cell_id"]))
    return cells


def has_collections(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND table_name = 'collections'"
    ).fetchone()
    return bool(row and row[0])


def _coverage(con: duckdb.DuckDBPyConnection) -> None:
    """Temp table `_covers (new, old)`: the pairs of stored selections where the first covers the second."""
    texts = [str(r[0]) for r in con.execute("SELECT DISTINCT selection FROM main.collections WHERE selection IS NOT NULL").fetchall()]
    parsed = {t: Selection.of(json.loads(t)) for t in texts}
    pairs = [(a, b) for a in texts for b in texts if covers(parsed[a], parsed[b])]
    con.execute("CREATE OR REPLACE TEMP TABLE _covers (new TEXT, old TEXT)")
    for start in range(0, len(pairs), 500):
        chunk = pairs[start : start + 500]
        con.execute(f"INSERT INTO _covers VALUES {', '.join('(?, ?)' for _ in chunk)}", [v for pair in chunk for v in pair])


def _keys(con: duckdb.DuckDBPyConnection, touched: bool) -> None:
    """Temp table `_cl_keys`: per (machine, cell, test) of the settled keys, its newest
    observation (a `not_collected` mark included) and its newest real one: node id, run, selection."""
    test = TEST_SQL.format(a="x")
    scope = f" SEMI JOIN _touched t ON x.cell_id = t.cell_id AND {test} = t.test" if touched else ""
    rows = " UNION ALL ".join(
        f"SELECT x.run_id, x.cell_id, x.scenario, x.status, x.signature, x.exception_type, NULLIF(x.test_id, '') AS test_id, "
        f"{test} AS test FROM main.{table} x{scope}"
        for table in ("outcomes", "history")
    )
    real = f"FILTER (WHERE x.status <> '{NOT_COLLECTED}')"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_keys AS
        SELECT {MACHINE_SQL} AS machine, x.cell_id, x.test,
               max(COALESCE(r.started_at, {EPOCH})) AS last_t,
               arg_max(x.run_id, (COALESCE(r.started_at, {EPOCH}), x.run_id)) AS last_run,
               arg_max(x.status, (COALESCE(r.started_at, {EPOCH}), x.run_id)) AS last_status,
               arg_max(COALESCE(x.exception_type, ''), (COALESCE(r.started_at, {EPOCH}), x.run_id)) AS last_reason,
               arg_max(COALESCE(x.signature, ''), (COALESCE(r.started_at, {EPOCH}), x.run_id)) AS last_signature,
               arg_max(x.run_id, (COALESCE(r.started_at, {EPOCH}), x.run_id)) {real} AS real_run,
               arg_max(x.scenario, (COALESCE(r.started_at, {EPOCH}), x.run_id)) {real} AS node,
               arg_max_null(x.test_id, (COALESCE(r.started_at, {EPOCH}), x.run_id)) {real} AS test_id
        FROM ({rows}) x LEFT JOIN main.cells c USING (run_id, cell_id) LEFT JOIN main.runs r USING (run_id)
        GROUP BY ALL
        """
    )


def leave(con: duckdb.DuckDBPyConnection, touched: bool) -> int:
    """The `not_collected` rows of the settled keys (temp table `_touched`, or every key): each
    test a newer collection of its cell left out, as the module docstring says. Runs inside the
    writer's transaction, before the settle chooses what is current. Returns the rows written."""
    if not has_collections(con):
        return 0
    _coverage(con)
    _keys(con, touched)
    cells = " AND co.cell_id IN (SELECT DISTINCT cell_id FROM _touched)" if touched else ""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_new AS
        SELECT co.run_id, co.cell_id, co.selection, co.digest, co.errors, {MACHINE_SQL} AS machine, COALESCE(r.started_at, {EPOCH}) AS t
        FROM main.collections co LEFT JOIN main.cells c USING (run_id, cell_id) LEFT JOIN main.runs r USING (run_id)
        WHERE co.digest IS NOT NULL{cells}
        """
    )
    # a test left a newer collection of its cell: it was in the collection of its own newest run
    # (or, for a run before the lists were kept, it looks like a test), that selection is covered
    # by the newer one's, and the newer list does not hold it; a suite's env failure leaves with
    # any collection of its cell
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_left AS
        SELECT k.machine, k.cell_id, k.test, k.node, k.test_id, k.last_status, k.last_reason, k.last_signature,
               n.run_id AS at_run, n.t AS at_t, n.digest
        FROM _cl_keys k
        JOIN _cl_new n ON n.machine = k.machine AND n.cell_id = k.cell_id
             AND (n.t > k.last_t OR (n.t = k.last_t AND n.run_id > k.last_run))
        LEFT JOIN main.collections o ON o.run_id = k.real_run AND o.cell_id = k.cell_id
        WHERE k.node IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM main.collected m WHERE m.digest = n.digest AND m.test = k.test)
          AND (k.node = '{SUITE_KEY}' OR (
               EXISTS (SELECT 1 FROM _covers v WHERE v.new = n.selection AND v.old = o.selection)
               AND (EXISTS (SELECT 1 FROM main.collected m WHERE m.digest = o.digest AND m.test = k.test)
                    OR (o.digest IS NULL AND (contains(k.node, '::') OR ends_with(k.node, '.py'))))))
        """
    )
    _errors(con, "SELECT run_id AS at_run, cell_id, errors FROM _cl_new WHERE errors IS NOT NULL AND errors <> '{}'")
    inside = f"EXISTS (SELECT 1 FROM main.collected m WHERE m.digest = l.digest AND {_under('m.test', 'l.node')})"
    reason = f"CASE WHEN e.node IS NOT NULL THEN 'not_run' WHEN l.node = '{SUITE_KEY}' OR {inside} THEN 'collected' ELSE 'removed' END"
    return _mark(con, reason)


def _errors(con: duckdb.DuckDBPyConnection, source: str) -> None:
    """Temp table `_cl_err`: each left test with the collection failure it lies under in the run it
    left (the deepest, where several do), from `source`'s (at_run, cell_id, errors JSON)."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_err AS
        WITH e AS (
            SELECT at_run, cell_id, unnest(map_entries(json_transform(errors::JSON, '"MAP(VARCHAR, VARCHAR)"'))) AS entry FROM ({source})
        ), f AS (SELECT at_run, cell_id, entry.key AS node, entry.value AS signature FROM e)
        SELECT l.cell_id, l.test, l.at_run, e.node, e.signature
        FROM _cl_left l JOIN f e ON e.at_run = l.at_run AND e.cell_id = l.cell_id
        WHERE contains(l.node, '::') AND {_lies_under("split_part(l.node, '::', 1)", "e.node")}
        QUALIFY row_number() OVER (PARTITION BY l.cell_id, l.test, l.at_run ORDER BY length(e.node) DESC, e.node) = 1
        """
    )


def _lies_under(file: str, failed: str) -> str:
    """SQL: the test file `file` is what the collection failure `failed` kept from collecting: the
    file itself, a folder above it, the folder of a conftest.py above it, or the whole suite."""
    folder = f"regexp_replace({failed}, '[^/]*$', '')"
    return (
        f"({failed} = {file} OR {failed} IN ('.', '') OR starts_with({file}, {failed} || '/') "
        f"OR (ends_with({failed}, 'conftest.py') AND starts_with({file}, {folder})))"
    )


def _under(test: str, node: str) -> str:
    """SQL: the test `test` lies in the file or folder `node` (a file's collection error, a worker's crash over its paths)."""
    return f"({node} = '.' OR starts_with({test}, {node} || '::') OR starts_with({test}, {node} || '/'))"


def _mark(con: duckdb.DuckDBPyConnection, reason: str) -> int:
    """Write the `not_collected` rows of `_cl_left` (with `_cl_err`) into `history`, each with the
    reason `reason` (SQL over `l` and `e`), but none where the key's newest row already says the
    same (a test removed a month ago is not marked again every night). Returns the rows written."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_marks AS
        SELECT l.*, {reason} AS reason, e.node AS failed, COALESCE(e.signature, '') AS failure
        FROM _cl_left l LEFT JOIN _cl_err e ON e.cell_id = l.cell_id AND e.test = l.test AND e.at_run = l.at_run
        """
    )
    same = "x.run_id = m.at_run AND x.cell_id = m.cell_id AND x.scenario = m.node AND x.repeat = 0"
    message = f"""CASE m.reason WHEN 'not_run' THEN 'not run: ' || m.failed || ' failed to collect'
                                WHEN 'collected' THEN '{_MESSAGES["collected"]}' ELSE '{_MESSAGES["removed"]}' END"""
    found = con.execute(
        f"""
        INSERT INTO main.history BY NAME
        SELECT m.at_run AS run_id, m.cell_id, m.node AS scenario, 0 AS repeat, '{NOT_COLLECTED}' AS status,
               {message} AS message, NULLIF(m.failure, '') AS signature, m.reason AS exception_type,
               m.at_t AS started_at, m.test_id, '{{}}' AS metrics
        FROM _cl_marks m
        WHERE NOT (m.last_status = '{NOT_COLLECTED}' AND m.last_reason = m.reason AND m.last_signature = m.failure)
          AND NOT EXISTS (SELECT 1 FROM main.outcomes x WHERE {same})
          AND NOT EXISTS (SELECT 1 FROM main.history x WHERE {same})
        RETURNING 1
        """
    ).fetchall()
    for name in ("_cl_keys", "_cl_new", "_cl_left", "_cl_err", "_cl_marks", "_covers"):
        con.execute(f"DROP TABLE IF EXISTS {name}")
    return len(found)


# -- a file from before the lists were kept ----------------------------------------------------------
def read_older_runs(con: duckdb.DuckDBPyConnection) -> int:
    """Migration 0011's reading of an older file, whose runs recorded no collection: each sweep of
    a suite gets a collection of its selection (from the run's settings) with no list, and each
    test a later sweep of its cell did not run, where the sweep built the cell and its selection
    covers the test's, is marked where it left (`not_collected`), from the rows alone: a row of a
    test spans the runs from its first to its last, so a test with no row past a run did not run
    there. Returns the rows marked."""
    side = " AND ".join(f"NOT starts_with(r.run_id, '{p}')" for p in SIDE_RUNS)
    con.execute(
        f"""
        INSERT OR IGNORE INTO main.collections (run_id, cell_id, selection, digest, tests, errors)
        SELECT c.run_id, c.cell_id, CAST(r.settings->'$.tests' AS VARCHAR) AS selection, NULL, NULL, NULL
        FROM main.cells c JOIN main.runs r USING (run_id)
        WHERE json_type(r.settings->'$.tests') = 'OBJECT' AND {side}
        """
    )
    # canonical selections, so that equal ones compare equal
    for run_id, cell_id, text in con.execute("SELECT run_id, cell_id, selection FROM main.collections WHERE digest IS NULL").fetchall():
        con.execute(
            "UPDATE main.collections SET selection = ? WHERE run_id = ? AND cell_id = ?",
            [selection_text(json.loads(text) if text else {}), run_id, cell_id],
        )
    _coverage(con)
    _keys(con, touched=False)
    test = TEST_SQL.format(a="x")
    # the spans of every row (first and last run's start), for what ran in a run
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_spans AS
        SELECT x.cell_id, x.scenario AS node, {test} AS test, x.status, COALESCE(x.signature, '') AS signature,
               COALESCE(f.started_at, r.started_at, {EPOCH}) AS first_t, COALESCE(r.started_at, {EPOCH}) AS last_t
        FROM (SELECT * FROM main.outcomes UNION ALL BY NAME SELECT * FROM main.history) x
        LEFT JOIN main.runs r USING (run_id) LEFT JOIN main.runs f ON f.run_id = COALESCE(x.first_run, x.run_id)
        WHERE x.status <> '{NOT_COLLECTED}'
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_new AS
        SELECT co.run_id, co.cell_id, co.selection, {MACHINE_SQL} AS machine, COALESCE(r.started_at, {EPOCH}) AS t
        FROM main.collections co JOIN main.cells c USING (run_id, cell_id) LEFT JOIN main.runs r USING (run_id)
        WHERE co.digest IS NULL AND c.env_status = 'ready'
        """
    )
    # every later sweep of the cell whose selection covers the test's (the settle merges the marks
    # of one reason into a span): where it left, and why each night
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _cl_left AS
        SELECT k.machine, k.cell_id, k.test, k.node, k.test_id, k.last_status, k.last_reason, k.last_signature,
               n.run_id AS at_run, n.t AS at_t, NULL::TEXT AS digest
        FROM _cl_keys k
        JOIN main.collections o ON o.run_id = k.real_run AND o.cell_id = k.cell_id
        JOIN _cl_new n ON n.machine = k.machine AND n.cell_id = k.cell_id
             AND (n.t > k.last_t OR (n.t = k.last_t AND n.run_id > k.last_run))
        JOIN _covers v ON v.new = n.selection AND v.old = o.selection
        WHERE k.node IS NOT NULL AND k.last_status <> '{NOT_COLLECTED}' AND (contains(k.node, '::') OR ends_with(k.node, '.py'))
        """
    )
    # the files that failed to collect in that run: a file-level failure whose span holds it
    errors = f"""
        SELECT l.at_run, l.cell_id, json_group_object(s.node, s.signature) AS errors
        FROM (SELECT DISTINCT at_run, at_t, cell_id FROM _cl_left) l
        JOIN _cl_spans s ON s.cell_id = l.cell_id AND s.first_t <= l.at_t AND l.at_t <= s.last_t
        WHERE NOT contains(s.node, '::') AND s.status IN ({_FAILING})
        GROUP BY ALL"""
    _errors(con, errors)
    held = "s.cell_id = l.cell_id AND s.first_t <= l.at_t AND l.at_t <= s.last_t"
    ran = f"EXISTS (SELECT 1 FROM _cl_spans s WHERE {held} AND {_under('s.test', 'l.node')})"
    reason = f"CASE WHEN e.node IS NOT NULL THEN 'not_run' WHEN {ran} THEN 'collected' ELSE 'removed' END"
    marked = _mark(con, reason)
    con.execute("DROP TABLE IF EXISTS _cl_spans")
    return marked
