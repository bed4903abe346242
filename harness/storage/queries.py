"""Reads of a results file, each named by what it returns. The CLI, the dashboard and the analysis
drivers call these same functions, typed, with a `Store` (opened read-only where nothing is written).

Filters (dashboard pages) are a mapping of column or axis -> allowed values: run_id, cell_id,
scenario, status, platform, gpu, any axis (torch, transformers, …, or another package recorded
in a cell's versions). An empty or missing list means "any". Heavy lifting (grouping,
counting) stays in DuckDB, so a page over 100,000 outcomes moves thousands of rows into
Python, not 100,000.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from harness.analysis.rows import AXIS_ORDER, as_tests
from harness.analysis.status import FAILURES, SEVERITY, Status
from harness.storage.resultsfile import SqlResultsFile

Filters = Mapping[str, Sequence[str]]

_FILTER_COLUMNS = frozenset({"run_id", "cell_id", "scenario", "status", "platform", "gpu", *AXIS_ORDER})
_CELL_JSON = ("versions", "requirements", "installed", "inherited", "git_commits", "host")
_TRANSITION_JSON = ("untested", "inconclusive", "held", "runs")
_FAILING = ", ".join(f"'{s}'" for s in sorted(FAILURES))
_NOT_A_FAILURE = f"status NOT IN ('{Status.PASS}', '{Status.NOT_APPLICABLE}', '{Status.INCONCLUSIVE}', '{Status.XFAIL}', '{Status.XPASS}')"


#: Every stored outcome row, the current state's and the history's (columns both have).
_EVERY_ROW = (
    "SELECT run_id, cell_id, scenario, repeat, status, started_at FROM outcomes UNION ALL "
    "SELECT run_id, cell_id, scenario, repeat, status, started_at FROM history"
)


def _decode(rows: list[dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    for row in rows:
        for column in columns:
            if isinstance(row.get(column), str):
                row[column] = json.loads(row[column]) if row[column] else {}
    return rows


def _where(filters: Filters | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for name, values in sorted((filters or {}).items()):
        chosen = [str(v) for v in values]
        if not chosen:
            continue
        marks = ", ".join("?" for _ in chosen)
        if name in _FILTER_COLUMNS:
            clauses.append(f"{name} IN ({marks})")  # name is one of a fixed set, never user text
        else:
            clauses.append(f"COALESCE(installed->>?, versions->>?) IN ({marks})")
            params += [name, name]
        params += chosen
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


# -- outcomes --------------------------------------------------------------------------------
#: The columns of `outcomes_v` that vary by outcome; every other column is its cell's or its run's.
_OUTCOME_LEVEL = (
    "run_id", "cell_id", "scenario", "test_id", "repeat", "status", "signature", "signature_family",
    "blamed_library", "exception_type", "message", "seconds", "metrics", "started_at",
)  # fmt: skip


def outcome_rows(store: SqlResultsFile, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every row of `outcomes_v` (of one run, or all), by cell, scenario and repeat, as the answers
    read them (`rows.as_tests`: `scenario` a test's identity across releases, `node_id` its node id).

    The cell's and the run's columns (a whole freeze among them) are read once per cell and
    shared by its rows: at 20,000 tests x 20 cells, reading them with every outcome took most
    of the time and 2 GB, and every analysis compared them again row by row.
    """
    columns = [r["column_name"] for r in store.fetch("DESCRIBE SELECT * FROM outcomes_v") if r["column_name"] != "first_run"]
    own = [c for c in columns if c in _OUTCOME_LEVEL]
    shared = [c for c in columns if c not in _OUTCOME_LEVEL]
    # one run: the file's state as of that run, for the cells it ran (`_RUN_STATE`); all: the current state
    view, table, params = (f"({_RUN_STATE})", f"({_RUN_STATE})", [run_id] * 4) if run_id else ("outcomes_v", "outcomes", [])
    listed = ", ".join(f'"{c}"' for c in own)
    tuples = store.fetch_tuples(f"SELECT {listed} FROM {view} ORDER BY cell_id, scenario, repeat, run_id", params)
    templates: dict[tuple[Any, Any], dict[str, Any]] = {}
    if shared:
        # one outcome per cell, picked from the table first: the view's JSON reads then run 20 times, not 400,000
        picked = f"SELECT run_id, cell_id, min(scenario) AS scenario FROM {table} GROUP BY ALL"
        on = "v.run_id = one.run_id AND v.cell_id = one.cell_id AND v.scenario = one.scenario"
        shared_v = ", ".join(f'v."{c}"' for c in shared)
        sql = f"SELECT v.run_id AS _run, v.cell_id AS _cell, {shared_v} FROM {view} v JOIN ({picked}) one ON {on}"
        for cell in store.fetch(sql, params * 2 if run_id else params):
            key = (cell.pop("_run"), cell.pop("_cell"))
            templates[key] = {**dict.fromkeys(own), **cell}  # the outcome's columns first, as the view lists them
    return mark_flaky(store, _rows_from(tuples, own, templates))


def flaky_across_runs(store: SqlResultsFile) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(run, cell, test) of a current outcome -> (the failure's signature, why it is flaky across
    runs): its history flips from a pass to a failure, or back, with nothing it depends on
    changed (table `flaky`, kept by `history.settle`)."""
    if not store.has_table("flaky"):
        return {}
    rows = store.fetch("SELECT run_id, cell_id, test, signature, reason FROM flaky")
    return {(r["run_id"], r["cell_id"], r["test"]): (r["signature"], r["reason"]) for r in rows}


def mark_flaky(store: SqlResultsFile, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` (as the answers read them) with `flaky_across` (why) and `flaky_signature` on each
    outcome of a test that is flaky across runs (`flaky_across_runs`): the known-good set and pins
    count it as a failing repeat, attribution as a flaky cell of that failure."""
    flaky = flaky_across_runs(store)
    if flaky:
        for row in rows:
            found = flaky.get((row["run_id"], row["cell_id"], row["scenario"]))
            if found:
                row["flaky_signature"], row["flaky_across"] = found
    return rows


#: The rows of one run (`?`, four times) as the file knows them now: its outcomes still current or
#: kept in the history, and the spans its outcome was merged into (the same outcome, seen again by a
#: later run), for the cells it ran on its machine; each with the run's id.
_RUN_STATE = """
    WITH r AS (SELECT started_at AS at, host->>'gpu' AS gpu, host->>'platform' AS platform FROM runs WHERE run_id = ?),
    v AS (SELECT * FROM outcomes_v UNION ALL BY NAME SELECT * FROM history_v)
    SELECT v.* REPLACE (?::VARCHAR AS run_id) FROM v
    LEFT JOIN runs f ON f.run_id = v.first_run LEFT JOIN runs l ON l.run_id = v.run_id LEFT JOIN r ON true
    WHERE v.run_id = ? OR (
        f.started_at <= r.at AND r.at < l.started_at AND COALESCE(v.gpu, '') = COALESCE(r.gpu, '')
        AND COALESCE(v.platform, '') = COALESCE(r.platform, '') AND v.cell_id IN (SELECT cell_id FROM cells WHERE run_id = ?)
    )
"""


def _rows_from(
    tuples: Sequence[tuple[Any, ...]], own: Sequence[str], templates: Mapping[tuple[Any, Any], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each outcome as a dict: a copy of its cell's template (the cell's columns, shared) filled
    with its own columns, as `as_tests` reads them. Copying a template costs less than building a dict and
    then adding 20 columns to it, 400,000 times."""
    run, cell = own.index("run_id"), own.index("cell_id")
    empty = dict.fromkeys(own)
    rows = []
    with _no_cycle_collection():
        for values in tuples:
            row = templates.get((values[run], values[cell]), empty).copy()
            row.update(zip(own, values))
            node = row["node_id"] = row["scenario"]  # `as_tests`, here in the same pass
            row["scenario"] = row.get("test_id") or node
            rows.append(row)
    return rows


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused while 400,000 dicts are made: they hold no cycles, and each
    full collection it would start on the way walks every one made so far (a second at 20,000
    tests x 20 cells). Reference counting still frees what it must; the collector's state is restored."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def identity_column(store: SqlResultsFile, alias: str = "") -> str:
    """The column that says which test a row is (`test_id`), or `scenario` in a file read
    without it (written before 0009 and older than the view this harness lays over it)."""
    return alias + ("test_id" if "test_id" in _columns(store, "outcomes_v") else "scenario")


def outcome_rows_with_traces(
    store: SqlResultsFile, scenarios: Sequence[str] = (), cell_id: str = "", signature: str = ""
) -> list[dict[str, Any]]:
    """`outcomes_v` rows plus each outcome's `traceback` and `output_tail` (the view leaves them out).

    scenarios: only these tests (identities or node ids; empty: all). cell_id: only this cell.
    signature: only outcomes with it. Rows as `outcome_rows` gives them (`rows.as_tests`).
    """
    sql = "SELECT v.*, o.traceback, o.output_tail FROM outcomes_v v JOIN outcomes o USING (run_id, cell_id, scenario, repeat)"
    where: list[str] = []
    params: list[Any] = []
    if scenarios:
        marks = ", ".join("?" for _ in scenarios)
        where.append(f"(v.scenario IN ({marks}) OR {identity_column(store, 'v.')} IN ({marks}))")
        params.extend(scenarios)
        params.extend(scenarios)
    if cell_id:
        where.append("v.cell_id = ?")
        params.append(cell_id)
    if signature:
        where.append("v.signature = ?")
        params.append(signature)
    if where:
        sql += " WHERE " + " AND ".join(where)
    return as_tests(store.fetch(sql + " ORDER BY v.cell_id, v.scenario, v.run_id, v.repeat", params))


def statuses(store: SqlResultsFile, cell_id: str, scenario: str) -> list[str]:
    """Every stored status of one scenario in one cell, its history's spans and its current state, oldest
    first (bisection reuses them)."""
    rows = store.fetch(f"SELECT status FROM ({_EVERY_ROW}) WHERE cell_id = ? AND scenario = ? ORDER BY started_at", [cell_id, scenario])
    return [r["status"] for r in rows]


def test_markers(store: SqlResultsFile) -> dict[str, set[str]]:
    """Test (its identity, as the answers' rows name it) -> the pytest markers its outcomes recorded
    (tests swept before markers were stored have none)."""
    found: dict[str, set[str]] = {}
    sql = (
        f"SELECT DISTINCT {identity_column(store)} AS scenario, metrics FROM outcomes_v "
        "WHERE metrics IS NOT NULL AND strpos(CAST(metrics AS VARCHAR), 'markers') > 0"
    )
    for row in store.fetch(sql, []):
        metrics = json.loads(row["metrics"]) if isinstance(row["metrics"], str) else row["metrics"]
        found.setdefault(str(row["scenario"]), set()).update(map(str, (metrics or {}).get("markers") or []))
    return found


def cell_outcomes(store: SqlResultsFile, cell_id: str, runs: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every outcome of one cell with its traceback, output tail and metrics (decoded), and where it ran."""
    sql = (
        "SELECT o.*, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu FROM outcomes o "
        "LEFT JOIN runs r USING (run_id) WHERE o.cell_id = ?"
    )
    params: list[Any] = [cell_id]
    if runs:
        sql += f" AND o.run_id IN ({', '.join('?' for _ in runs)})"
        params += list(runs)
    return _decode(store.fetch(sql + " ORDER BY o.scenario, o.started_at, o.run_id, o.repeat", params), ["metrics"])


def outcome_count(store: SqlResultsFile, run_id: str) -> int:
    """Outcomes stored for one run, current or since superseded (a live sweep's "done")."""
    return int(store.fetch(f"SELECT count(*) AS n FROM ({_EVERY_ROW}) WHERE run_id = ?", [run_id])[0]["n"])


def row_count(store: SqlResultsFile, table: str = "outcomes") -> int:
    """Rows in one of the tables outcomes (the current state), history, cells, runs."""
    if table not in ("outcomes", "history", "cells", "runs"):
        raise ValueError(table)
    if table == "history" and not store.has_table("history"):
        return 0
    return int(store.fetch(f"SELECT count(*) AS n FROM {table}")[0]["n"])


def duplicate_key_count(store: SqlResultsFile) -> int:
    """Outcome keys stored more than once, current or history (0 in a healthy file: outcomes are append-only)."""
    sql = f"SELECT count(*) AS n FROM (SELECT run_id, cell_id, scenario, repeat FROM ({_EVERY_ROW}) GROUP BY ALL HAVING count(*) > 1)"
    return int(store.fetch(sql)[0]["n"])


# -- runs, cells, releases -------------------------------------------------------------------
def runs(store: SqlResultsFile) -> dict[str, dict[str, Any]]:
    """run id -> its `runs` row, `settings` and `host` decoded: index settings, matrix path, GPU; oldest first."""
    found = {}
    for row in store.fetch("SELECT * FROM runs ORDER BY started_at, run_id"):
        for column in ("settings", "host"):
            value = json.loads(row[column]) if isinstance(row.get(column), str) else row.get(column)
            row[column] = value if isinstance(value, dict) else {}
        found[row["run_id"]] = row
    return found


def durations(store: SqlResultsFile, exclude_run: str = "", *, suites: bool = True) -> dict[str, dict[str, float]]:
    """cell id -> node id (or scenario) -> its seconds in the newest run before `exclude_run` that
    ran it (mean over its repeats): what shards are balanced by (`running.shards`), as
    pytest-split keeps each test's latest duration. The current state holds them: a row of
    `exclude_run` (a sweep resumed in its own run) gives the seconds of the observation before
    it (`seconds_before`), so a rerun cuts its cells where the first start did. `suites`: only
    the runs that ran a pytest suite (their settings name `tests`), else only those that did not."""
    has = "json_extract(r.settings, '$.tests') IS NOT NULL"
    before = "o.seconds_before" if "seconds_before" in _columns(store, "outcomes") else "NULL"
    seconds = f"CASE WHEN o.run_id = ? THEN {before} ELSE coalesce(o.seconds, 0) END"
    sql = (
        f"SELECT o.cell_id, o.scenario, avg({seconds}) AS seconds FROM outcomes o JOIN runs r ON r.run_id = o.run_id "
        f"WHERE {has if suites else 'NOT ' + has} GROUP BY o.cell_id, o.scenario HAVING count({seconds}) > 0"
    )
    found: dict[str, dict[str, float]] = {}
    for row in store.fetch(sql, [exclude_run, exclude_run]):
        found.setdefault(row["cell_id"], {})[row["scenario"]] = float(row["seconds"])
    return found


def cell_record(store: SqlResultsFile, run_id: str, cell_id: str) -> dict[str, Any] | None:
    """One run's record of one cell (JSON columns decoded)."""
    rows = _decode(store.fetch("SELECT * FROM cells WHERE run_id = ? AND cell_id = ?", [run_id, cell_id]), _CELL_JSON)
    return rows[0] if rows else None


def cell_records(store: SqlResultsFile, cell_id: str) -> list[dict[str, Any]]:
    """Every run's record of one cell (JSON decoded), with that run's host; newest first."""
    rows = store.fetch(
        "SELECT c.*, r.host, r.harness_version, r.matrix_path FROM cells c LEFT JOIN runs r USING (run_id) "
        "WHERE c.cell_id = ? ORDER BY c.built_at DESC, c.run_id DESC",
        [cell_id],
    )
    return _decode(rows, _CELL_JSON)


def all_cell_records(store: SqlResultsFile) -> list[dict[str, Any]]:
    """Every stored cell record (JSON decoded), newest first: a cell rebuilt in a later run comes first."""
    return _decode(store.fetch("SELECT * FROM cells ORDER BY built_at DESC, run_id DESC"), _CELL_JSON)


def known_releases(store: SqlResultsFile) -> dict[str, list[str]]:
    """axis -> every release the index listed for it, in any run (or a list `harness attribute` fetched)."""
    if not store.has_table("releases"):
        return {}
    found: dict[str, list[str]] = {}
    for row in store.fetch("SELECT DISTINCT axis, version FROM releases ORDER BY axis, version"):
        found.setdefault(row["axis"], []).append(row["version"])
    return found


# -- answers ---------------------------------------------------------------------------------
def transitions(store: SqlResultsFile, scope: str | None = None, signature: str | None = None) -> list[dict[str, Any]]:
    """Stored answers (JSON columns decoded), of one scope and one signature if given, in attribution's order.

    A file opened read-only from before migration 0003 has no table yet: no transitions.
    """
    if not store.has_table("transitions"):
        return []
    where, params = [], []
    if scope is not None:
        where.append("scope = ?")
        params.append(scope)
    if signature is not None:
        where.append("signature = ?")
        params.append(signature)
    sql = "SELECT * FROM transitions" + (" WHERE " + " AND ".join(where) if where else "")
    return _decode(store.fetch(sql + " ORDER BY scope, scenario, seq", params), _TRANSITION_JSON)


def transition_scopes(store: SqlResultsFile) -> list[str]:
    if not store.has_table("transitions"):
        return []
    return [r["scope"] for r in store.fetch("SELECT DISTINCT scope FROM transitions ORDER BY 1")]


def transition_summary(store: SqlResultsFile, scope: str = "") -> list[dict[str, Any]]:
    """Per signature, one row per distinct answer (kind, axis, both ends, what lies between, machine),
    with how many lines of the matrix gave it: the failures table's words."""
    if not store.has_table("transitions"):
        return []
    machine = "COALESCE(machine, '')" if "machine" in _columns(store, "transitions") else "''"
    rows = store.fetch(
        f"SELECT signature, kind, axis, before, after, untested, inconclusive, {machine} AS machine, "
        "any_value(description) AS description, count(*) AS lines "
        "FROM transitions WHERE scope = ? GROUP BY ALL ORDER BY signature, kind, axis, before, after",
        [scope],
    )
    return _decode(rows, ("untested", "inconclusive"))


def _columns(store: SqlResultsFile, table: str) -> set[str]:
    return {r["column_name"] for r in store.fetch("SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table])}


def _column_or_null(store: SqlResultsFile, table: str, column: str) -> str:
    """`column`, or `NULL AS column` in a file written before the migration that added it."""
    return column if column in _columns(store, table) else f"NULL AS {column}"


# -- the dashboard's pages -------------------------------------------------------------------
def overview(store: SqlResultsFile) -> dict[str, Any]:
    """What the file holds, for the 'which data is this' line: counts, time span, hosts."""
    row = store.fetch(
        "SELECT count(*) AS outcomes, count(DISTINCT run_id) AS runs, count(DISTINCT cell_id) AS cells, "
        "count(DISTINCT scenario) AS scenarios, min(started_at) AS first, max(started_at) AS last FROM outcomes"
    )[0]
    hosts = store.fetch("SELECT DISTINCT host->>'platform' AS platform, host->>'gpu' AS gpu FROM runs ORDER BY ALL")
    answers = store.fetch("SELECT count(*) AS n FROM transitions")[0]["n"] if store.has_table("transitions") else 0
    return {
        "outcomes": int(row["outcomes"]),
        "runs": int(row["runs"]),
        "cells": int(row["cells"]),
        "scenarios": int(row["scenarios"]),
        "first": row["first"],
        "last": row["last"],
        "platforms": sorted({h["platform"] for h in hosts if h["platform"]}),
        "gpus": sorted({h["gpu"] for h in hosts if h["gpu"]}),
        "transitions": int(answers),
    }


def run_summaries(store: SqlResultsFile) -> list[dict[str, Any]]:
    """One row per run: where it ran, when (its outcomes' span), how much it holds (current and
    history rows whose newest observation it is); newest first."""
    return store.fetch(
        """
        WITH o AS (
            SELECT run_id, min(started_at) AS first, max(started_at) AS last, count(*) AS outcomes,
                   count(DISTINCT cell_id) AS cells, count(DISTINCT scenario) AS scenarios
            FROM (
                SELECT run_id, cell_id, scenario, started_at FROM outcomes
                UNION ALL SELECT run_id, cell_id, scenario, started_at FROM history
            ) GROUP BY run_id
        )
        SELECT r.run_id, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu, r.harness_version,
               o.first, o.last, COALESCE(o.outcomes, 0) AS outcomes, COALESCE(o.cells, 0) AS cells,
               COALESCE(o.scenarios, 0) AS scenarios, starts_with(r.run_id, 'bisect-') AS bisection
        FROM runs r LEFT JOIN o USING (run_id) ORDER BY o.last DESC NULLS LAST, r.run_id
        """
    )


def facets(store: SqlResultsFile) -> dict[str, list[str]]:
    """Every value a filter can take: scenario, platform, gpu, run_id, and each axis (unsorted versions)."""
    scenarios = [r["scenario"] for r in store.fetch("SELECT DISTINCT scenario FROM outcomes ORDER BY 1")]
    return {"scenario": scenarios, **facets_without_scenarios(store)}


def matrix_counts(store: SqlResultsFile, filters: Filters | None = None, *, by_gpu: bool = False) -> list[dict[str, Any]]:
    """One row per (cell, scenario[, gpu]) over the filtered outcomes: `outcomes`, a count per
    status (columns named after the statuses) and the most frequent failure signature."""
    where, params = _where(filters)
    counts = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in Status)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    return store.fetch(
        f"SELECT cell_id, scenario{gpu}, count(*) AS outcomes, {counts}, "
        f"mode(signature) FILTER (WHERE signature <> '' AND status IN ({_FAILING})) AS signature "
        f"FROM outcomes_v{where} GROUP BY ALL ORDER BY ALL",
        params,
    )


def cell_summaries(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per cell among the filtered outcomes: its axis versions (the five columns and
    `versions`, JSON decoded), runs, GPUs, outcome count and last outcome time."""
    where, params = _where(filters)
    # Group the outcomes first and look the versions up once per cell: extracting them from
    # JSON for every outcome row costs several times more.
    per_cell = f"""o AS (
            SELECT cell_id, list(DISTINCT run_id ORDER BY run_id) AS runs,
                   list(DISTINCT COALESCE(gpu, '') ORDER BY COALESCE(gpu, '')) AS gpus,
                   count(*) AS outcomes, max(started_at) AS last
            FROM outcomes_v{where} GROUP BY cell_id
        )"""
    return _with_cell_versions(store, per_cell, params)


def _with_cell_versions(store: SqlResultsFile, ctes: str, params: list[Any]) -> list[dict[str, Any]]:
    """The per-cell rows of CTE `o` (cell_id, runs, gpus, outcomes, last) with each cell's axis
    versions (newest build of the cell) as columns and as `versions`, JSON decoded."""
    axes = ", ".join(f"COALESCE(c.installed->>'{a}', c.versions->>'{a}') AS {a}" for a in AXIS_ORDER)
    rows = store.fetch(
        f"""
        WITH {ctes},
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


def failure_summaries(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per failure signature (failures only: not pass, not_applicable or inconclusive): the library it
    blames, how many outcomes, cells, scenarios and runs it hits, when first and last seen."""
    where, params = _where(filters)
    where = (where + " AND" if where else " WHERE") + f" {_NOT_A_FAILURE}"
    return store.fetch(
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


#: Every probe a bisection stored, current or since superseded by a later run of the same cell
#: (a bisection's rows are never merged into another run's span: `history._select`).
_BISECTIONS = (
    "SELECT * FROM outcomes_v WHERE starts_with(run_id, 'bisect-') "
    "UNION ALL BY NAME SELECT * EXCLUDE (first_run) FROM history_v WHERE starts_with(run_id, 'bisect-')"
)


def bisection_probes(store: SqlResultsFile) -> list[dict[str, Any]]:
    """Outcomes of `harness bisect` runs (run ids `bisect-<scenario>-<axis>`), without their long text."""
    rows = store.fetch(
        "SELECT run_id, cell_id, scenario, repeat, status, signature, blamed_library, versions, git_commits, "
        f"{', '.join(AXIS_ORDER)}, gpu, started_at FROM ({_BISECTIONS}) "
        "ORDER BY run_id, started_at, cell_id, repeat"
    )
    return _decode(rows, ("versions", "git_commits"))


def pin_rows(store: SqlResultsFile, scenarios: Sequence[str], filters: Filters | None = None) -> list[dict[str, Any]]:
    """Outcome rows of `scenarios` shaped for `analysis.pin.choose`, slimmed for speed: `installed`
    and `inherited` hold only the cell's axes (`cell_records` has the full freeze), `message`
    only its first line; with the machine columns the pin compares within."""
    if not scenarios:
        return []
    where, params = _where({k: v for k, v in (filters or {}).items() if k != "scenario"})
    marks = ", ".join("?" for _ in scenarios)
    where += (" AND " if where else " WHERE ") + f"{identity_column(store)} IN ({marks})"  # a test across releases: its identity
    params += list(scenarios)
    # A file an older harness wrote, opened read-only (not migrated), lacks the newer columns.
    cuda, version = (_column_or_null(store, "cells", c) for c in ("cuda_runtime", "python_version"))
    host_python = _column_or_null(store, "outcomes_v", "host_python")
    rows = store.fetch(
        f"""
        WITH c AS (
            SELECT run_id, cell_id, python, versions, {cuda}, {version},
                   (SELECT json_group_object(k, installed->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                    WHERE installed->>k IS NOT NULL) AS installed,
                   (SELECT json_group_object(k, inherited->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                    WHERE inherited->>k IS NOT NULL) AS inherited
            FROM cells
        ),
        o AS (
            SELECT run_id, cell_id, {identity_column(store)} AS scenario, scenario AS node_id, repeat, status, signature,
                   split_part(message, chr(10), 1) AS message, gpu, platform, {host_python}, started_at
            FROM outcomes_v{where}
        )
        SELECT o.*, c.versions, c.installed, c.inherited, c.python, c.cuda_runtime, c.python_version
        FROM o LEFT JOIN c USING (run_id, cell_id)
        ORDER BY o.cell_id, o.scenario, o.run_id, o.repeat
        """,
        params,
    )
    return mark_flaky(store, rows)


# -- test suites: node ids grouped by file and class -------------------------------------------
# A test suite stores one outcome per node id (`tests/test_x.py::TestA::test_b[param]`), 20,000
# of them per cell for a large suite: these reads group, search and cap in DuckDB so that a
# page moves a few thousand rows into Python, whatever the suite's size. Levels: `file` (the
# node id's path) and `group` (`file::Class`, or the file for its module-level functions:
# `analysis.rows.group_of`, the summary's groups); a node id without `::` (a scenario, or a file
# that failed to collect) is its own file and group.
_BASE = r"regexp_replace(scenario, '\[.*$', '')"  # parameters may hold '::'; paths never hold '['
_LEVELS = {
    "file": "split_part(scenario, '::', 1)",
    "group": f"CASE WHEN len(string_split({_BASE}, '::')) > 2 THEN array_to_string(string_split({_BASE}, '::')[1:2], '::') "
    "ELSE split_part(scenario, '::', 1) END",
    "test": "scenario",
}
_SEVERITY = "[" + ", ".join(f"'{s}'" for s in SEVERITY) + "]"
_NA_RANK = SEVERITY.index(Status.NOT_APPLICABLE) + 1
#: One status per test and cell over its repeats and runs: the worst, a not_applicable beside others dropped (`status.fold`).
_WORST = f"{_SEVERITY}[COALESCE(min(list_position({_SEVERITY}, status)) FILTER (WHERE status <> '{Status.NOT_APPLICABLE}'), {_NA_RANK})]"


def _test_where(
    filters: Filters | None, search: str = "", within: Mapping[str, str] | None = None, failing_only: bool = False
) -> tuple[str, list[Any]]:
    """`_where(filters)` narrowed further: node ids containing `search` (case-insensitive substring),
    inside `within` ({"file": path} or {"group": "file::Class"}), and with `failing_only` tests that fail somewhere."""
    where, params = _where(filters)
    clauses = [where.removeprefix(" WHERE ")] if where else []
    if search:
        clauses.append("strpos(lower(scenario), lower(?)) > 0")  # a substring, never a pattern: `[`, `%` and `_` are literal
        params.append(search)
    for level, value in sorted((within or {}).items()):
        clauses.append(f"{_LEVELS[level]} = ?")  # level is one of a fixed set, never user text
        params.append(value)
    if failing_only:
        inner, inner_params = _where(filters)
        more = (inner + " AND") if inner else " WHERE"
        clauses.append(f"scenario IN (SELECT scenario FROM outcomes_v{more} status IN ({_FAILING}))")
        params += inner_params
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def test_group_counts(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    level: str = "file",
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
) -> list[dict[str, Any]]:
    """One row per (group at `level`, cell[, gpu]): `tests`, then how many tests had each status
    there (columns named after the statuses: a test's repeats and runs count once, by their worst
    status) and the most frequent failure signature. `level` is `file` or `group`."""
    if level not in ("file", "group"):
        raise ValueError(level)
    where, params = _test_where(filters, search, within, failing_only)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE worst = '{s}') AS {s}" for s in Status)
    failing = f"signature <> '' AND status IN ({_FAILING})"
    with store.reading():  # one snapshot for both reads
        shape = store.fetch(f"SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeat), 0) AS repeats FROM outcomes_v{where}", params)[0]
        if shape["runs"] <= 1 and shape["repeats"] == 0:
            # One outcome per test and cell: its status is the test's, and no per-test grouping
            # (20,000 tests × 20 cells: 400,000 groups, the bulk of the time) is needed.
            worst, signature, grouped = "status", f"CASE WHEN {failing} THEN signature END", ""
        else:
            worst, signature, grouped = _WORST, f"mode(signature) FILTER (WHERE {failing})", " GROUP BY ALL"
        name = f"{_LEVELS[level]} AS name, cell_id{gpu}" + (", scenario" if grouped else "")
        per_test = f"SELECT {name}, {worst} AS worst, {signature} AS signature FROM outcomes_v{where}{grouped}"
        return store.fetch(
            f"WITH t AS ({per_test}) SELECT name, cell_id{', gpu' if by_gpu else ''}, count(*) AS tests, {counts}, "
            "mode(signature) AS signature FROM t GROUP BY ALL ORDER BY ALL",
            params,
        )


def test_counts(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
    limit: int = 500,
) -> dict[str, Any]:
    """The first `limit` matching node ids (in order), shaped as `matrix_counts` rows (a count per
    status over repeats and runs), with `tests`: how many matched in all."""
    where, params = _test_where(filters, search, within, failing_only)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in Status)
    total = store.fetch(f"SELECT count(DISTINCT scenario) AS n FROM outcomes_v{where}", params)[0]["n"]
    shown = (where + " AND" if where else " WHERE") + " scenario IN (SELECT scenario FROM shown)"
    rows = store.fetch(
        f"""
        WITH shown AS (SELECT DISTINCT scenario FROM outcomes_v{where} ORDER BY scenario LIMIT {int(limit)})
        SELECT cell_id, scenario{gpu}, count(*) AS outcomes, {counts},
               mode(signature) FILTER (WHERE signature <> '' AND status IN ({_FAILING})) AS signature
        FROM outcomes_v{shown} GROUP BY ALL ORDER BY ALL
        """,
        params + params,
    )
    return {"tests": int(total), "rows": rows}


def test_failure_summaries(
    store: SqlResultsFile, filters: Filters | None = None, search: str = "", *, top: int = 3
) -> list[dict[str, Any]]:
    """`failure_summaries` for a test suite: per signature, how many tests, groups and files it hits,
    and (as `scenarios`) its `top` groups with their test counts, never the whole list of node ids."""
    where, params = _test_where(filters, search)
    where = (where + " AND" if where else " WHERE") + f" {_NOT_A_FAILURE}"
    return store.fetch(
        f"""
        WITH f AS (
            SELECT *, COALESCE(NULLIF(signature, ''), status) AS sig, {_LEVELS["group"]} AS grp, {_LEVELS["file"]} AS file
            FROM outcomes_v{where}
        ),
        g AS (SELECT sig, grp, count(DISTINCT scenario) AS tests FROM f GROUP BY ALL),
        top AS (
            SELECT sig, list(grp || ' (' || tests || ')' ORDER BY tests DESC, grp)[1:{int(top)}] AS scenarios FROM g GROUP BY sig
        )
        SELECT f.sig AS signature, any_value(signature_family) AS signature_family,
               mode(NULLIF(blamed_library, '')) AS blamed_library, mode(NULLIF(exception_type, '')) AS exception_type,
               list(DISTINCT status ORDER BY status) AS statuses, count(*) AS outcomes, count(DISTINCT cell_id) AS cells,
               count(DISTINCT scenario) AS tests, count(DISTINCT grp) AS groups, count(DISTINCT file) AS files,
               any_value(top.scenarios) AS scenarios, count(DISTINCT run_id) AS runs,
               min(started_at) AS first_seen, max(started_at) AS last_seen, min(cell_id) AS example_cell,
               min(scenario) AS example_scenario
        FROM f JOIN top USING (sig) GROUP BY f.sig ORDER BY cells DESC, tests DESC, outcomes DESC, signature
        """,
        params,
    )


def test_signature_groups(store: SqlResultsFile, signature: str, filters: Filters | None = None, search: str = "") -> list[dict[str, Any]]:
    """Where one failure signature (or a bare status, as `test_failure_summaries` names it) lands: per
    group, how many tests and cells, and one test and cell to open."""
    where, params = _test_where(filters, search)
    where = (where + " AND" if where else " WHERE") + f" {_NOT_A_FAILURE} AND COALESCE(NULLIF(signature, ''), status) = ?"
    return store.fetch(
        f"""
        SELECT {_LEVELS["group"]} AS "group", count(DISTINCT scenario) AS tests, count(DISTINCT cell_id) AS cells,
               count(*) AS outcomes, min(scenario) AS example_test, min(cell_id) AS example_cell
        FROM outcomes_v{where} GROUP BY 1 ORDER BY tests DESC, 1
        """,
        [*params, signature],
    )


def test_signature_tests(
    store: SqlResultsFile, signature: str, group: str, filters: Filters | None = None, search: str = "", limit: int = 500
) -> list[dict[str, Any]]:
    """The node ids of one group that fail with one signature: cells and outcomes each, the first `limit`."""
    where, params = _test_where(filters, search, {"group": group})
    where = (where + " AND" if where else " WHERE") + f" {_NOT_A_FAILURE} AND COALESCE(NULLIF(signature, ''), status) = ?"
    return store.fetch(
        f"""
        SELECT scenario AS test, count(DISTINCT cell_id) AS cells, count(*) AS outcomes, min(cell_id) AS example_cell
        FROM outcomes_v{where} GROUP BY 1 ORDER BY 1 LIMIT {int(limit)}
        """,
        [*params, signature],
    )


def test_outcomes(
    store: SqlResultsFile,
    cell_id: str,
    search: str = "",
    *,
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    limit: int = 500,
) -> dict[str, Any]:
    """One cell's outcomes of the matching node ids, without their long text (failures first, then by
    node id; the first `limit`), and `tests`: how many node ids matched in all."""
    where, params = _test_where({"cell_id": [cell_id]}, search, within, failing_only)
    total = store.fetch(f"SELECT count(DISTINCT scenario) AS n FROM outcomes_v{where}", params)[0]["n"]
    rows = store.fetch(
        f"""
        SELECT scenario, status, run_id, repeat, gpu, platform, started_at, seconds, signature, blamed_library
        FROM outcomes_v{where}
        ORDER BY status IN ({_FAILING}) DESC, status = '{Status.PASS}', scenario, run_id, repeat LIMIT {int(limit)}
        """,
        params,
    )
    return {"tests": int(total), "rows": rows}


def test_diff(store: SqlResultsFile, a: str, b: str, search: str = "", *, limit: int = 500) -> dict[str, Any]:
    """Tests whose status (worst over repeats and runs) or signature differs between cells `a` and `b`:
    `tests` (compared: run in either), `differ` (how many differ), `groups` (per group: tests that
    differ) and `rows` (the first `limit` that differ: each side's status and signature).

    A test is matched by its identity across the suite's releases (`test_id`), so two releases
    of a package's own suite compare the same tests; `scenario` shows cell A's node id (else B's)."""
    where, params = _test_where({"cell_id": [a, b]}, search)
    differs = '"A" <> "B" OR "A signature" <> "B signature"'
    identity = identity_column(store)
    base = f"""
        WITH t AS (
            SELECT {identity} AS test, scenario AS node, {_LEVELS["group"]} AS grp, cell_id, {_WORST} AS worst,
                   COALESCE(mode(signature) FILTER (WHERE signature <> '' AND status IN ({_FAILING})), '') AS signature
            FROM outcomes_v{where} GROUP BY ALL
        ),
        d AS (
            SELECT COALESCE(any_value(node) FILTER (WHERE cell_id = ?), any_value(node)) AS scenario, grp,
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "A",
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "B",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "A signature",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "B signature"
            FROM t GROUP BY test, grp
        )
    """
    both = [*params, a, a, b, a, b]
    with store.reading():  # one snapshot for the three reads
        tests = store.fetch(base + f"SELECT count(*) AS n, count(*) FILTER ({differs}) AS differ FROM d", both)[0]
        groups = store.fetch(base + f'SELECT grp AS "group", count(*) AS tests FROM d WHERE {differs} GROUP BY 1 ORDER BY 2 DESC, 1', both)
        shown = 'scenario, "A", "B", "A signature", "B signature"'
        rows = store.fetch(base + f"SELECT {shown} FROM d WHERE {differs} ORDER BY scenario LIMIT {int(limit)}", both)
    return {"tests": int(tests["n"]), "differ": int(tests["differ"] or 0), "groups": groups, "rows": rows}


def holds_tests(store: SqlResultsFile) -> bool:
    """Whether the file holds pytest node ids (`harness sweep --tests`): a scenario's name never holds `::`."""
    return bool(store.fetch("SELECT EXISTS (SELECT 1 FROM outcomes WHERE contains(scenario, '::')) AS found")[0]["found"])


# -- reads for large test suites (added after the functions above; same conventions) -------------
def facets_without_scenarios(store: SqlResultsFile) -> dict[str, list[str]]:
    """`facets` without its `scenario` list: run_id, platform, gpu and each axis. For a test suite
    that list is every node id (20,000 strings read and cached on every page) for a filter its
    pages never draw: they search node ids instead."""
    found: dict[str, list[str]] = {"run_id": [r["run_id"] for r in store.fetch("SELECT run_id FROM runs ORDER BY 1")]}
    hosts = store.fetch("SELECT DISTINCT host->>'platform' AS platform, host->>'gpu' AS gpu FROM runs")
    found["platform"] = sorted({h["platform"] for h in hosts if h["platform"]})
    found["gpu"] = sorted({h["gpu"] for h in hosts if h["gpu"]})
    rows = store.fetch(
        "SELECT axis, COALESCE(installed->>axis, versions->>axis) AS value "
        "FROM (SELECT installed, versions, unnest(json_keys(versions)) AS axis FROM cells) GROUP BY ALL ORDER BY ALL"
    )
    for row in rows:
        if row["value"] is not None:
            found.setdefault(row["axis"], []).append(row["value"])
    return found


#: Filters that are columns of `outcomes` itself; every other filter (platform, gpu, an axis) is a
#: property of an outcome's run and cell, decided once per (run, cell) pair instead of per outcome.
_OUTCOME_FILTERS = frozenset({"run_id", "cell_id", "scenario", "status"})
_PAIR_AXES = ", ".join(f"COALESCE(c.installed->>'{a}', c.versions->>'{a}') AS {a}" for a in AXIS_ORDER)


def _admitted(filters: Filters | None) -> tuple[str, list[Any], str, list[Any]]:
    """Two CTEs, `per` (outcomes, last outcome and highest repeat per run and cell) and `admitted`
    (the (run, cell) pairs the filters admit, with the run's `gpu`), and the WHERE over `outcomes`
    for the outcome-level filters: (ctes, their params, where, its params).

    The same rows as `_where(filters)` over `outcomes_v`, whose run- and cell-level columns are
    the view's (platform, gpu, the five axes, any other axis in `installed`/`versions`), without
    joining cells and runs to every one of a suite's 400,000 outcomes."""
    outcome = {k: v for k, v in (filters or {}).items() if k in _OUTCOME_FILTERS}
    pair = {k: v for k, v in (filters or {}).items() if k not in _OUTCOME_FILTERS}
    where, params = _where(outcome)
    pair_where, pair_params = _where(pair)
    ctes = f"""
        per AS (
            SELECT run_id, cell_id, count(*) AS outcomes, max(started_at) AS last, max(repeat) AS repeats
            FROM outcomes{where} GROUP BY run_id, cell_id
        ),
        admitted AS (
            SELECT * FROM (
                SELECT per.*, {_PAIR_AXES}, c.versions, c.installed, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu
                FROM per LEFT JOIN cells c USING (run_id, cell_id) LEFT JOIN runs r USING (run_id)
            ){pair_where}
        )"""
    return ctes, [*params, *pair_params], where, params


def grid_cells(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """`cell_summaries`' rows (one per cell among the filtered outcomes: axis versions, `versions`
    decoded, runs, GPUs, outcome count, last outcome time), counted per run and cell first: over a
    suite's 400,000 outcomes a tenth of the work."""
    ctes, params, _, _ = _admitted(filters)
    per_cell = f"""{ctes},
        o AS (
            SELECT cell_id, list(DISTINCT run_id ORDER BY run_id) AS runs,
                   list(DISTINCT COALESCE(gpu, '') ORDER BY COALESCE(gpu, '')) AS gpus,
                   sum(outcomes)::BIGINT AS outcomes, max(last) AS last
            FROM admitted GROUP BY cell_id
        )"""
    return _with_cell_versions(store, per_cell, params)


def test_group_tallies(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    level: str = "file",
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
) -> list[dict[str, Any]]:
    """`test_group_counts`' rows without their `signature`: one row per (group at `level`, cell[, gpu]),
    `tests`, and how many tests had each status there (a test's repeats and runs count once, by
    their worst status). Read from `outcomes` and the (run, cell) pairs the filters admit, not
    through `outcomes_v`: the grid of a suite's first page costs half as much."""
    if level not in ("file", "group"):
        raise ValueError(level)
    ctes, params, where, outcome_params = _admitted(filters)
    clauses = [where.removeprefix(" WHERE ")] if where else []
    found = [*outcome_params]
    if search:
        clauses.append("strpos(lower(scenario), lower(?)) > 0")  # a substring, never a pattern
        found.append(search)
    for name, value in sorted((within or {}).items()):
        clauses.append(f"{_LEVELS[name]} = ?")  # name is one of a fixed set, never user text
        found.append(value)
    if failing_only:
        inner = " AND ".join([*([where.removeprefix(" WHERE ")] if where else []), f"status IN ({_FAILING})"])
        clauses.append(f"scenario IN (SELECT scenario FROM outcomes SEMI JOIN admitted USING (run_id, cell_id) WHERE {inner})")
        found += outcome_params
    narrowed = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    gpu = ", COALESCE(a.gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE worst = '{s}') AS {s}" for s in Status)
    with store.reading():  # one snapshot for both reads
        shape = store.fetch(f"WITH {ctes} SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeats), 0) AS r FROM admitted", params)[0]
        one_each = shape["runs"] <= 1 and shape["r"] == 0
        # One outcome per test and cell: its status is the test's, with no grouping per test (400,000 groups).
        worst, grouped = ("status", "") if one_each else (_WORST, " GROUP BY ALL")
        name = f"{_LEVELS[level]} AS name, cell_id{gpu}" + ("" if one_each else ", scenario")
        per_test = f"SELECT {name}, {worst} AS worst FROM outcomes JOIN admitted a USING (run_id, cell_id){narrowed}{grouped}"
        return store.fetch(
            f"WITH {ctes}, t AS ({per_test}) SELECT name, cell_id{', gpu' if by_gpu else ''}, count(*) AS tests, {counts} "
            "FROM t GROUP BY ALL ORDER BY ALL",
            [*params, *found],
        )


def bisection_probes_by_axis(store: SqlResultsFile) -> list[dict[str, Any]]:
    """`bisection_probes`' rows, each with its run's `axis` (the one axis whose requested version
    differs between the run's probe cells, from their stored `versions`; "" when they differ in
    none, a bisection stopped at its first probe, or in several), the probe's `value` on it
    (installed, else requested) and its `commit` there (a git or path candidate's), so that no
    reader takes them apart from the run id or a URL."""
    rows = store.fetch(
        f"""
        WITH p AS (
            SELECT run_id, cell_id, scenario, repeat, status, signature, blamed_library, versions, installed, git_commits,
                   {", ".join(AXIS_ORDER)}, gpu, started_at
            FROM ({_BISECTIONS})
        ),
        keyed AS (SELECT DISTINCT run_id, cell_id, versions, unnest(json_keys(versions)) AS axis FROM p),
        varying AS (SELECT run_id, axis FROM keyed GROUP BY run_id, axis HAVING count(DISTINCT versions->>axis) > 1),
        axes AS (SELECT run_id, CASE WHEN count(*) = 1 THEN min(axis) ELSE '' END AS axis FROM varying GROUP BY run_id)
        SELECT p.* EXCLUDE (installed), COALESCE(a.axis, '') AS axis,
               COALESCE(p.installed->>a.axis, p.versions->>a.axis, '') AS value, COALESCE(p.git_commits->>a.axis, '') AS commit
        FROM p LEFT JOIN axes a USING (run_id)
        ORDER BY p.run_id, p.started_at, p.cell_id, p.repeat
        """
    )
    return _decode(rows, ("versions", "git_commits"))


def transition_answer_groups(store: SqlResultsFile, scope: str = "") -> list[dict[str, Any]]:
    """`transition_summary`'s rows with each one's `other_machine` too (where a machine difference
    passes): every field an answer's words are made of, so that no reader takes the stored
    description apart."""
    if not store.has_table("transitions"):
        return []
    found = _columns(store, "transitions")
    machine = "COALESCE(machine, '')" if "machine" in found else "''"
    other = "COALESCE(other_machine, '')" if "other_machine" in found else "''"
    rows = store.fetch(
        f"SELECT signature, kind, axis, before, after, untested, inconclusive, {machine} AS machine, {other} AS other_machine, "
        "any_value(description) AS description, count(*) AS lines "
        "FROM transitions WHERE scope = ? GROUP BY ALL ORDER BY signature, kind, axis, before, after",
        [scope],
    )
    return _decode(rows, ("untested", "inconclusive"))


def test_pass_counts(store: SqlResultsFile) -> list[dict[str, Any]]:
    """One row per node id (or scenario) and kind of host (`gpu`, `gpu_count`, `platform`: what
    `analysis.rows.machine_class` reads): `passing`, the cells where it passed (every outcome there
    passed, a not_applicable beside them dropped, as `status.fold` words it), and `tested`, the
    cells where it passed or failed. The Pin page's list of a suite's every test, in one grouped read."""
    evidence = f"'{Status.PASS}', {_FAILING}"
    return store.fetch(
        f"""
        WITH per AS (
            SELECT scenario, cell_id, gpu, gpu_count, platform,
                   bool_or(status = '{Status.PASS}') AND bool_and(status IN ('{Status.PASS}', '{Status.NOT_APPLICABLE}')) AS passed,
                   bool_or(status IN ({evidence})) AS judged
            FROM outcomes_v GROUP BY ALL
        )
        SELECT scenario, gpu, gpu_count, platform, count(*) FILTER (WHERE passed) AS passing, count(*) FILTER (WHERE judged) AS tested
        FROM per GROUP BY ALL ORDER BY ALL
        """
    )


def answers_current(store: SqlResultsFile) -> bool:
    """Whether the answers `harness attribute` stored for all runs describe every outcome: each
    was computed after the newest outcome started (a merge that adds outcomes drops them)."""
    if not store.has_table("transitions"):
        return False
    rows = store.fetch(
        "SELECT (SELECT min(computed_at) FROM transitions WHERE scope = '') AS computed, "
        "(SELECT count(*) FROM transitions WHERE scope = '') AS stored, (SELECT max(started_at) FROM outcomes) AS newest"
    )
    computed, stored, newest = rows[0]["computed"], rows[0]["stored"], rows[0]["newest"]
    return bool(stored) and computed is not None and (newest is None or computed >= newest)
