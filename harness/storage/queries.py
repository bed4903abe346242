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
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet
from harness.analysis.rows import as_tests
from harness.analysis.status import NOT_COLLECTED, Status
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
    return _outcome_rows(store, run_id, quiet_as_one=False)[0]


def each_outcome_row(store: SqlResultsFile, run_id: str | None = None, chunk: int = 10_000) -> Iterator[dict[str, Any]]:
    """`outcome_rows`, in its order, a chunk of rows at a time: what `harness summary --json` prints,
    without every row in memory at once (3.6 GB at 2,000,000 outcomes; DuckDB sorts within its limit)."""
    own, shared, view, params = _source(store, run_id)
    sql, templates = _rows_sql(store, own, shared, view, params, run_id)
    flaky = flaky_across_runs(store)  # read before the chunks: another query on the connection would end their result
    for tuples in store.fetch_chunks(sql, params, chunk):
        yield from _marked(_rows_from(tuples, own, templates), flaky)


def loud_rows(store: SqlResultsFile, run_id: str | None = None) -> tuple[list[dict[str, Any]], Quiet]:
    """The current state's rows (of one run: the file's state as of it) as `outcome_rows` reads them,
    the quiet tests' (`analysis.quiet`: passed in every repeat of every (run, cell), never flaky) as
    one stand-in test: one row per (run, cell, repeat), `stands_for` the outcomes each stands for,
    `first_started_at` the earliest of them (`started_at` the latest). Over a suite whose tests
    mostly pass, Python reads the tests that say something: 255,000 rows of 2,000,000, not every one."""
    with store.reading():  # the quiet tests' temporary tables live on one connection
        return _outcome_rows(store, run_id, quiet_as_one=True)


_T = TypeVar("_T")


def done_with(value: _T) -> Future[_T]:
    """A future that already holds `value`: a read made at once, where it could not be made aside
    (here, not in `store_reading`: a runner's sweep imports this module, and has no DuckDB)."""
    found: Future[_T] = Future()
    found.set_result(value)
    return found


def heat_counts_aside(store: SqlResultsFile, *, by_file: bool) -> Future[list[tuple[Any, ...]]]:
    """The heatmap's counts of the current state, read in a thread while the caller goes on
    (`Store.fetch_aside`): (cell, row, status, outcomes), a row being a test's identity (with
    `by_file`, its test file: the part before its first `::`), every run and repeat pooled;
    `heatmap.from_counts` words them as `heatmap.from_rows` words the rows the answers read."""
    identity = _identity(store)
    row = f"split_part({identity}, '::', 1)" if by_file else identity
    sql = f"SELECT cell_id, {row} AS row, status, count(*) AS outcomes FROM outcomes GROUP BY ALL"
    aside = getattr(store, "fetch_aside", None)
    if aside is None:  # a results file without a thread of its own to read in: at once
        return done_with(list(store.fetch_tuples(sql)))
    return cast("Future[list[tuple[Any, ...]]]", aside(sql))


#: The quiet tests (`analysis.quiet.quiet_of` in SQL): every outcome passed, one outcome in each
#: (run, cell, repeat) of the current state, and no history marks it flaky across runs. A test of
#: one node id has at most one outcome in each (the table's key), so its count says it; only a test
#: whose outcomes carry several node ids (one identity across renames) counts its distinct triples.
_QUIET = """
    CREATE TEMP TABLE {table} AS
    WITH o AS (SELECT run_id, cell_id, repeat, status, scenario, {identity} AS test FROM {source}),
    every AS (SELECT count(*) AS n FROM (SELECT DISTINCT run_id, cell_id, repeat FROM o)),
    g AS (
        SELECT test, min(scenario) AS node, max(scenario) AS last FROM o GROUP BY test
        HAVING count(*) FILTER (status <> 'pass') = 0 AND count(*) = (SELECT n FROM every) {strict}
    ),
    quiet AS (
        SELECT test, node FROM g WHERE node = last
        {renamed}
    )
    SELECT test, node FROM quiet
    WHERE test NOT IN (SELECT test FROM {flaky} WHERE test IS NOT NULL)  -- per test, not per outcome
"""

#: `_QUIET`'s tests of several node ids, where the file has any: a hash of the (run, cell, repeat),
#: leaner than the triple; two that collide count as one, and the test stays loud, which costs
#: time, never an answer.
_RENAMED = """
        UNION ALL
        SELECT test, min(scenario) FROM o WHERE test IN (SELECT test FROM g WHERE node <> last) GROUP BY test
        HAVING count(DISTINCT hash(run_id, cell_id, repeat)) = (SELECT n FROM every)
"""


#: `_QUIET` over the rows of one run's state, which no key holds to one outcome per (run, cell, repeat)
#: of a node id: each test counts its distinct triples too.
_STRICT = "AND count(DISTINCT hash(run_id, cell_id, repeat)) = (SELECT n FROM every)"


def _quiet(store: SqlResultsFile, table: str, source: str = "outcomes") -> Quiet:
    """The quiet tests of `source` (the table `outcomes`, or one run's state), kept in the temporary
    `table` for the reads that follow."""
    flaky = "flaky" if store.has_table("flaky") else "(SELECT NULL::VARCHAR AS test WHERE false)"
    renamed = _RENAMED if _has_renamed(store, source) else ""
    strict = "" if source == "outcomes" else _STRICT
    store.fetch(_QUIET.format(table=table, identity=_identity(store), flaky=flaky, renamed=renamed, source=source, strict=strict))
    found = list(store.fetch_tuples(f"SELECT test, node FROM {table} ORDER BY test"))
    return Quiet(tuple(t for t, _ in found), tuple(n for _, n in found))


def _has_renamed(store: SqlResultsFile, source: str = "outcomes") -> bool:
    """Whether a test's outcomes may carry several node ids: some outcome's identity is not its node id."""
    if "test_id" not in clauses.columns(store, "outcomes"):
        return False
    found = store.fetch_tuples(f"SELECT 1 FROM {source} WHERE test_id IS NOT NULL AND test_id <> '' AND test_id <> scenario LIMIT 1")
    return next(found, None) is not None


def _identity(store: SqlResultsFile, alias: str = "") -> str:
    """A test's identity across the suite's releases in table `outcomes` (`rows.as_tests`)."""
    if "test_id" in clauses.columns(store, "outcomes"):
        return f"COALESCE(nullif({alias}test_id, ''), {alias}scenario)"  # as `outcomes_v` reads it
    return f"{alias}scenario"


def _source(store: SqlResultsFile, run_id: str | None) -> tuple[list[str], list[str], str, list[Any]]:
    """(the view's columns of an outcome's own, those of its cell and run, the view, its parameters)."""
    columns = [r["column_name"] for r in store.fetch("DESCRIBE SELECT * FROM outcomes_v") if r["column_name"] != "first_run"]
    own = [c for c in columns if c in _OUTCOME_LEVEL]
    shared = [c for c in columns if c not in _OUTCOME_LEVEL]
    # one run: the file's state as of that run, for the cells it ran (`_RUN_STATE`); all: the current state
    view, params = (f"({_RUN_STATE})", [run_id] * 4) if run_id else ("outcomes_v", [])
    return own, shared, view, params


def _outcome_rows(store: SqlResultsFile, run_id: str | None, *, quiet_as_one: bool) -> tuple[list[dict[str, Any]], Quiet]:
    own, shared, view, params = _source(store, run_id)
    if not quiet_as_one:
        return _read_rows(store, own, shared, view, params, run_id), NO_QUIET
    table = f"harness_quiet_{uuid.uuid4().hex[:12]}"  # one a read: the dashboard's threads share a connection
    state = f"harness_state_{uuid.uuid4().hex[:12]}"
    stand_in = f"harness_stand_in_{uuid.uuid4().hex[:12]}"
    source = "outcomes"
    try:
        if run_id:  # the run's state, worked out once: the quiet tests, the loud rows and the stand-in's read it
            store.fetch(f"CREATE TEMP TABLE {state} AS {_RUN_STATE}", params)
            view, params, source = state, [], state
        quiet = _quiet(store, table, source)
        if quiet:  # the stand-in's rows and their earliest outcome, in one pass over the quiet tests' outcomes
            store.fetch(_STAND_IN_ROWS.format(stand_in=stand_in, source=source, identity=_identity(store), table=table))
        return _read_rows(store, own, shared, view, params, run_id, (table, quiet, stand_in) if quiet else None), quiet
    finally:
        for temporary in (table, state, stand_in):
            store.fetch(f"DROP TABLE IF EXISTS {temporary}")


#: The stand-in's rows (`loud_rows`): one per (run, cell, repeat) of the quiet tests' outcomes, with
#: their seconds, the latest start and the earliest (`first_started_at`).
_STAND_IN_ROWS = """
    CREATE TEMP TABLE {stand_in} AS
    SELECT run_id, cell_id, repeat, sum(seconds) AS seconds, max(started_at) AS started_at, min(started_at) AS first_started_at
    FROM {source} WHERE {identity} IN (SELECT test FROM {table}) GROUP BY run_id, cell_id, repeat
"""


def _read_rows(
    store: SqlResultsFile,
    own: list[str],
    shared: list[str],
    view: str,
    params: list[Any],
    run_id: str | None,
    quiet: tuple[str, Quiet, str] | None = None,
) -> list[dict[str, Any]]:
    """The rows of `view`; with `quiet` (its temporary table, its tests, the stand-in's rows), theirs as the stand-in's."""
    sql, templates = _rows_sql(store, own, shared, view, params, run_id, quiet)
    rows = mark_flaky(store, _rows_from(store.fetch_tuples(sql, params), own, templates))
    if quiet:
        _stand_ins(store, rows, *quiet)
    return rows


def _rows_sql(
    store: SqlResultsFile,
    own: list[str],
    shared: list[str],
    view: str,
    params: list[Any],
    run_id: str | None,
    quiet: tuple[str, Quiet, str] | None = None,
) -> tuple[str, dict[tuple[Any, Any], dict[str, Any]]]:
    """(the query of the rows' own columns, each (run, cell)'s template of the rest) for `_rows_from`."""
    listed = ", ".join(f'"{c}"' for c in own)
    # the outcomes' own columns from the table (the view's test_id, as it writes it): the view joins
    # each outcome to its cell and run for columns read once per cell below (0.4 s at 2,000,000)
    own_view = view if run_id or "test_id" not in clauses.columns(store, "outcomes") else _OWN
    sql = f"SELECT {listed} FROM {own_view}"
    if quiet:
        stand_in = ", ".join(_STAND_IN.get(c, f'NULL AS "{c}"') for c in own)
        identity, table, rows = _identity(store), quiet[0], quiet[2]
        sql = f"SELECT {listed} FROM {own_view} WHERE {identity} NOT IN (SELECT test FROM {table}) UNION ALL SELECT {stand_in} FROM {rows}"
    sql = f"{sql} ORDER BY cell_id, scenario, repeat, run_id"
    templates: dict[tuple[Any, Any], dict[str, Any]] = {}
    if shared:
        # one outcome per cell, picked from the table first: the view's JSON reads then run 20 times, not 400,000
        table = view if run_id else "outcomes"
        picked = f"SELECT run_id, cell_id, min(scenario) AS scenario FROM {table} GROUP BY ALL"
        on = "v.run_id = one.run_id AND v.cell_id = one.cell_id AND v.scenario = one.scenario"
        shared_v = ", ".join(f'v."{c}"' for c in shared)
        cells = f"SELECT v.run_id AS _run, v.cell_id AS _cell, {shared_v} FROM {view} v JOIN ({picked}) one ON {on}"
        for cell in store.fetch(cells, params * 2 if run_id else params):
            key = (cell.pop("_run"), cell.pop("_cell"))
            templates[key] = {**dict.fromkeys(own), **cell}  # the outcome's columns first, as the view lists them
    return sql, templates


#: `outcomes_v`'s columns of an outcome's own (`_OUTCOME_LEVEL`), from table `outcomes` alone.
_OWN = "(SELECT * REPLACE (COALESCE(nullif(test_id, ''), scenario) AS test_id) FROM outcomes)"


#: The stand-in's own columns (`loud_rows`), from its rows (`_STAND_IN_ROWS`): one per (run, cell, repeat) of the quiet tests' outcomes.
_STAND_IN = {
    "run_id": "run_id",
    "cell_id": "cell_id",
    "scenario": f"'{STAND_IN}' AS scenario",
    "repeat": "repeat",
    "status": f"'{Status.PASS.value}' AS status",
    "seconds": "seconds",
    "started_at": "started_at",
}


def _stand_ins(store: SqlResultsFile, rows: list[dict[str, Any]], table: str, quiet: Quiet, stand_in: str) -> None:
    """The stand-in rows' `stands_for` and `first_started_at` (the earliest quiet outcome of their (run, cell, repeat))."""
    sql = f"SELECT run_id, cell_id, repeat, first_started_at FROM {stand_in}"
    first = {(r, c, k): at for r, c, k, at in store.fetch_tuples(sql)}
    for row in rows:
        if row["scenario"] == STAND_IN:
            row["stands_for"] = len(quiet)
            row["first_started_at"] = first.get((row["run_id"], row["cell_id"], row["repeat"]))


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
    return _marked(rows, flaky_across_runs(store))


def _marked(rows: list[dict[str, Any]], flaky: Mapping[tuple[str, str, str], tuple[str, str]]) -> list[dict[str, Any]]:
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


def node_ids(store: SqlResultsFile) -> dict[str, str]:
    """Test (its identity, as the answers' rows name it) -> a node id it ran under: that of its last
    row in `outcome_rows`' order (what refinement hands pytest), without reading every row."""
    identity = _identity(store)
    sql = f"SELECT {identity}, arg_max(scenario, (cell_id, scenario, repeat, run_id)) FROM outcomes GROUP BY 1"
    return dict(store.fetch_tuples(sql))


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
    with store.reading():  # the temporary table of the tests asked for lives on one connection
        return _pin_rows(store, scenarios, filters, quiet_as_one=False)[0]


def loud_pin_rows(store: SqlResultsFile, scenarios: Sequence[str], filters: Filters | None = None) -> tuple[list[dict[str, Any]], Quiet]:
    """`pin_rows`, the quiet tests among `scenarios` (`analysis.quiet`) as one stand-in: a pin over a
    suite's every test reads the few that say something (`analysis.pin.choose` takes the `Quiet`)."""
    with store.reading():  # the temporary tables live on one connection
        return _pin_rows(store, scenarios, filters, quiet_as_one=True)


def _pin_rows(
    store: SqlResultsFile, scenarios: Sequence[str], filters: Filters | None, *, quiet_as_one: bool
) -> tuple[list[dict[str, Any]], Quiet]:
    if not scenarios:
        return [], NO_QUIET
    admitted = {k: v for k, v in (filters or {}).items() if k != "scenario"}
    identity = _identity(store, "o.")
    chosen = f"harness_chosen_{uuid.uuid4().hex[:12]}"  # the tests asked for: thousands, a table rather than as many `?`
    quiet_table = f"harness_quiet_{uuid.uuid4().hex[:12]}"
    store.fetch(f"CREATE TEMP TABLE {chosen} AS SELECT DISTINCT unnest(?::VARCHAR[]) AS test", [list(scenarios)])
    try:
        quiet = NO_QUIET
        if quiet_as_one:
            found = _quiet(store, quiet_table)
            asked = set(scenarios)
            mine = [(t, n) for t, n in zip(found.tests, found.nodes) if t in asked]
            quiet = Quiet(tuple(t for t, _ in mine), tuple(n for _, n in mine))
        loud = f"{identity} IN (SELECT test FROM {chosen})" + (f" AND {identity} NOT IN (SELECT test FROM {quiet_table})" if quiet else "")
        rows = _pin_select(store, admitted, loud)
        if quiet:  # one row per (run, cell, repeat), as the quiet tests' rows would be each
            held = f"{identity} IN (SELECT test FROM {chosen}) AND {identity} IN (SELECT test FROM {quiet_table})"
            stand_ins = _pin_select(store, admitted, held, stand_in=True)
            for row in stand_ins:
                row["stands_for"] = len(quiet)
            rows = sorted([*rows, *stand_ins], key=lambda r: (r["cell_id"], r["scenario"], r["run_id"], r["repeat"]))
        return mark_flaky(store, rows), quiet
    finally:
        store.fetch(f"DROP TABLE IF EXISTS {chosen}")
        store.fetch(f"DROP TABLE IF EXISTS {quiet_table}")


def _pin_select(store: SqlResultsFile, filters: Filters, condition: str, *, stand_in: bool = False) -> list[dict[str, Any]]:
    """`pin_rows`' select: the outcomes (`o`) that `condition` and `filters` admit; `stand_in`: one
    row per (run, cell, repeat) of them, as the stand-in's. The filters are decided once per (run,
    cell) (`clauses.admitted_pairs`), not through `outcomes_v`'s join of every outcome to its cell
    and run (2.7 s of a pin over a suite's 25,000 tests at 2,000,000 outcomes)."""
    # A file an older harness wrote, opened read-only (not migrated), lacks the newer columns.
    host = "h.host_python" if clauses.column_or_null(store, "outcomes_v", "host_python") == "host_python" else "NULL"
    pairs, params, outcome_where, outcome_params = clauses.admitted_pairs(filters)
    where = " WHERE " + " AND ".join([*([outcome_where.removeprefix(" WHERE ")] if outcome_where else []), condition])
    joined = f"FROM outcomes o JOIN admitted a USING (run_id, cell_id) LEFT JOIN h USING (run_id){where}"
    outcome = (
        f"SELECT o.run_id, o.cell_id, '{STAND_IN}' AS scenario, '{STAND_IN}' AS node_id, o.repeat, '{Status.PASS.value}' AS status, "
        f"NULL AS signature, NULL AS message, any_value(a.gpu) AS gpu, any_value(a.platform) AS platform, "
        f"any_value({host}) AS host_python, max(o.started_at) AS started_at, min(o.started_at) AS first_started_at "
        f"{joined} GROUP BY o.run_id, o.cell_id, o.repeat"
        if stand_in
        else f"SELECT o.run_id, o.cell_id, {_identity(store, 'o.')} AS scenario, o.scenario AS node_id, o.repeat, o.status, o.signature, "
        f"split_part(o.message, chr(10), 1) AS message, a.gpu, a.platform, {host} AS host_python, o.started_at {joined}"
    )
    return store.fetch(
        f"""
        WITH {pairs.strip()},
        h AS (SELECT run_id, host->>'python' AS host_python FROM runs),
        c AS ({clauses.cell_columns(store)}),
        o AS ({outcome})
        SELECT o.*, c.versions, c.installed, c.inherited, c.python, c.cuda_runtime, c.python_version
        FROM o LEFT JOIN c USING (run_id, cell_id)
        ORDER BY o.cell_id, o.scenario, o.run_id, o.repeat
        """,
        [*params, *outcome_params],  # the CTEs', then the outcomes' own filters
    )


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
    row = store.fetch("SELECT count(*) AS outcomes, count(DISTINCT cell_id) AS cells, count(DISTINCT scenario) AS scenarios FROM outcomes")[
        0
    ]
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
