"""The outcome rows every answer starts from, and the other reads of outcomes, each named by what
it returns. The CLI, the dashboard and the analysis drivers call them, typed, with a `Store`
(opened read-only where nothing is written).

Every answer (attribution, pins, the known-good set, watch, reports) reads the current state,
table `outcomes` (`history.py` keeps which outcomes are current, and the spans of the past):
`outcome_rows` (through the view `outcomes_v`; with a run id, the file's state as of that run),
tests flaky across runs marked, beside the releases the index listed (`known_releases`) and how
much the file holds (`overview`, the counts). The others read particular outcomes: with their
tracebacks (reports), one cell's (its page), one test's statuses (bisection), the tests' markers
and a pin's slimmed rows (`harness pin`), the stored seconds (shards).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from harness.analysis.rows import as_tests
from harness.analysis.status import NOT_COLLECTED
from harness.storage import clauses
from harness.storage.clauses import Filters
from harness.storage.resultsfile import SqlResultsFile

#: Every stored outcome row, the current state's and the history's (columns both have); not the
#: history's marks of tests a run did not collect (`status.NOT_COLLECTED`), which are no outcome.
_EVERY_ROW = (
    "SELECT run_id, cell_id, scenario, repeat, status, started_at FROM outcomes UNION ALL "
    f"SELECT run_id, cell_id, scenario, repeat, status, started_at FROM history WHERE status <> '{NOT_COLLECTED}'"
)


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
    v AS (SELECT * FROM outcomes_v UNION ALL BY NAME SELECT * FROM history_v WHERE status <> 'not_collected')
    SELECT v.* REPLACE (?::VARCHAR AS run_id) FROM v
    LEFT JOIN runs f ON f.run_id = v.first_run LEFT JOIN runs l ON l.run_id = v.run_id LEFT JOIN r ON true
    WHERE v.run_id = ? OR (
        f.started_at <= r.at AND r.at < l.started_at AND COALESCE(v.gpu, '') = COALESCE(r.gpu, '')
        AND COALESCE(v.platform, '') = COALESCE(r.platform, '') AND v.cell_id IN (SELECT cell_id FROM cells WHERE run_id = ?)
    )
"""


def _rows_from(
    tuples: Iterable[tuple[Any, ...]], own: Sequence[str], templates: Mapping[tuple[Any, Any], dict[str, Any]]
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


def outcome_rows_with_traces(
    store: SqlResultsFile, scenarios: Sequence[str] = (), cell_id: str = "", signature: str = ""
) -> list[dict[str, Any]]:
    """`outcomes_v` rows plus each outcome's `traceback` and `output_tail` (the view leaves them out).

    scenarios: only these tests (identities or node ids; empty: all). cell_id: only this cell.
    signature: only outcomes with it. Rows as `outcome_rows` gives them (`rows.as_tests`, `mark_flaky`).
    """
    sql = "SELECT v.*, o.traceback, o.output_tail FROM outcomes_v v JOIN outcomes o USING (run_id, cell_id, scenario, repeat)"
    where: list[str] = []
    params: list[Any] = []
    if scenarios:
        marks = ", ".join("?" for _ in scenarios)
        where.append(f"(v.scenario IN ({marks}) OR {clauses.identity_column(store, 'v.')} IN ({marks}))")
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
    # marked as the answers' rows are: a report's attribution and contrast table see a test flaky across runs as its summary does
    return mark_flaky(store, as_tests(store.fetch(sql + " ORDER BY v.cell_id, v.scenario, v.run_id, v.repeat", params)))


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
        f"SELECT DISTINCT {clauses.identity_column(store)} AS scenario, metrics FROM outcomes_v "
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
    return clauses.decode(store.fetch(sql + " ORDER BY o.scenario, o.started_at, o.run_id, o.repeat", params), ["metrics"])


def pin_rows(store: SqlResultsFile, scenarios: Sequence[str], filters: Filters | None = None) -> list[dict[str, Any]]:
    """Outcome rows of `scenarios` shaped for `analysis.pin.choose`, slimmed for speed: `installed`
    and `inherited` hold only the cell's axes (`cell_records` has the full freeze), `message`
    only its first line; with the machine columns the pin compares within."""
    if not scenarios:
        return []
    where, params = clauses.where({k: v for k, v in (filters or {}).items() if k != "scenario"})
    marks = ", ".join("?" for _ in scenarios)
    where += (" AND " if where else " WHERE ") + f"{clauses.identity_column(store)} IN ({marks})"  # a test across releases: its identity
    params += list(scenarios)
    # A file an older harness wrote, opened read-only (not migrated), lacks the newer columns.
    cuda, version = (clauses.column_or_null(store, "cells", c) for c in ("cuda_runtime", "python_version"))
    host_python = clauses.column_or_null(store, "outcomes_v", "host_python")
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
            SELECT run_id, cell_id, {clauses.identity_column(store)} AS scenario, scenario AS node_id, repeat, status, signature,
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


def durations(store: SqlResultsFile, exclude_run: str = "", *, suites: bool = True) -> dict[str, dict[str, float]]:
    """cell id -> node id (or scenario) -> its seconds in the newest run before `exclude_run` that
    ran it (mean over its repeats): what shards are balanced by (`running.shards`), as
    pytest-split keeps each test's latest duration. The current state holds them: a row of
    `exclude_run` (a sweep resumed in its own run) gives the seconds of the observation before
    it (`seconds_before`), so a rerun cuts its cells where the first start did. `suites`: only
    the runs that ran a pytest suite (their settings name `tests`), else only those that did not."""
    has = "json_extract(r.settings, '$.tests') IS NOT NULL"
    before = "o.seconds_before" if "seconds_before" in clauses.columns(store, "outcomes") else "NULL"
    seconds = f"CASE WHEN o.run_id = ? THEN {before} ELSE coalesce(o.seconds, 0) END"
    sql = (
        f"SELECT o.cell_id, o.scenario, avg({seconds}) AS seconds FROM outcomes o JOIN runs r ON r.run_id = o.run_id "
        f"WHERE {has if suites else 'NOT ' + has} GROUP BY o.cell_id, o.scenario HAVING count({seconds}) > 0"
    )
    found: dict[str, dict[str, float]] = {}
    for row in store.fetch(sql, [exclude_run, exclude_run]):
        found.setdefault(row["cell_id"], {})[row["scenario"]] = float(row["seconds"])
    return found


def known_releases(store: SqlResultsFile) -> dict[str, list[str]]:
    """axis -> every release the index listed for it, in any run (or a list `harness attribute` fetched)."""
    if not store.has_table("releases"):
        return {}
    found: dict[str, list[str]] = {}
    for row in store.fetch("SELECT DISTINCT axis, version FROM releases ORDER BY axis, version"):
        found.setdefault(row["axis"], []).append(row["version"])
    return found


def overview(store: SqlResultsFile) -> dict[str, Any]:
    """What the file holds, for the 'which data is this' line: counts, time span, hosts."""
    row = store.fetch(
        "SELECT count(*) AS outcomes, count(DISTINCT cell_id) AS cells, count(DISTINCT scenario) AS scenarios FROM outcomes"
    )[0]
    # the runs are every stored run (the history's too), not the runs the current rows came
    # from: a file of five identical nights held "1 run(s)" before
    stored = store.fetch("SELECT count(*) AS runs, min(started_at) AS first, max(started_at) AS last FROM runs")[0]
    hosts = store.fetch("SELECT DISTINCT host->>'platform' AS platform, host->>'gpu' AS gpu FROM runs ORDER BY ALL")
    answers = store.fetch("SELECT count(*) AS n FROM transitions")[0]["n"] if store.has_table("transitions") else 0
    return {
        "outcomes": int(row["outcomes"]),
        "runs": int(stored["runs"]),
        "cells": int(row["cells"]),
        "scenarios": int(row["scenarios"]),
        "first": stored["first"],
        "last": stored["last"],
        "platforms": sorted({h["platform"] for h in hosts if h["platform"]}),
        "gpus": sorted({h["gpu"] for h in hosts if h["gpu"]}),
        "transitions": int(answers),
    }


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
