"""A results file's current state and its history: the one place that says which outcomes are current.

A results file is kept for months, and a nightly sweep adds a run to it. What every answer reads
is the *current state*: per machine, cell and test (or scenario), the outcomes of the newest run
that ran it, its repeats included. That is the table `outcomes` itself, so every reader (every
query in `queries`, the dashboard, a user's SQL over `outcomes_v`) reads the current state and
costs what one run costs, however many nights the file holds.

Everything older is *history*, table `history`, kept as *spans*: consecutive observations of one
(machine, cell, test, repeat) with the same outcome (status, signature and node id) are one row
(a bisection's probe stays a row of its own, for the bisection's record),
the newest of them (its `run_id`, its message, seconds and traceback), with `first_run`, the run
the span began in. So a night that changes nothing adds nothing to the history: the current row
moves on to the new run and keeps its `first_run`. A file grows with what changes, not with the
nights. `seconds_before` keeps the seconds of the observation before a row's own, so that a
sweep resumed in its own run still balances its shards by the seconds of the run before.

Writers keep this so (`settle`): a fold, a merge and the migration that split an older file all
end by settling the keys they touched. Readers lay a writer's journal records that are not folded
yet over the file the same way (`lay_over`), so a reader never sees two runs of one key as current.

Which run is newer is decided by the runs' start times (then their ids). The machine is what the
answers compare within (`analysis.rows.Machine` and the GPU count of `rows.machine_class`): the
same cell on an H100 and on an H200 has a current state on each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from harness.analysis.changes import Depends, DependsOn, Span, flaky_flips
from harness.analysis.rows import json_map
from harness.analysis.status import NOT_COLLECTED
from harness.errors import BadInput
from harness.storage import collections
from harness.storage.clauses import EPOCH as _EPOCH
from harness.storage.clauses import MACHINE_SQL, TEST_SQL
from harness.storage.resultsfile import SqlResultsFile

_KEY = ("run_id", "cell_id", "scenario", "repeat")


def _match(a: str, b: str) -> str:
    return " AND ".join(f"{a}.{k} = {b}.{k}" for k in _KEY)


def _has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    return any(row[0] == column for row in con.execute(f"DESCRIBE {table}").fetchall())


# -- which rows are current: one selection for writers and readers ---------------------------
def _select(
    con: duckdb.DuckDBPyConnection, sources: dict[str, str], cells: str, runs: str, *, touched: bool, candidates: bool = True
) -> None:
    """Fill temp tables `_settle_cand` (every candidate row's key and where it is: `src`; not with
    `candidates` False) and `_settle_keep` (the rows that stay, each with its `first_run`,
    `seconds_before` and whether it is `current`). `sources`: src letter -> a relation of outcome
    rows ('o' the file's current rows, 'h' its history, 'j' a journal's rows not folded yet);
    `touched`: only the keys in temp table `_touched` (cell_id, test). Consecutive equal outcomes
    of one key and repeat are one span: its newest row stays, with the span's first run."""
    parts = []
    for src, relation in sources.items():
        first = "x.first_run" if _has_column(con, relation, "first_run") else "NULL::VARCHAR"
        before = "x.seconds_before" if _has_column(con, relation, "seconds_before") else "NULL::DOUBLE"
        test = TEST_SQL.format(a="x") if _has_column(con, relation, "test_id") else "x.scenario"
        where = f" SEMI JOIN _touched t ON x.cell_id = t.cell_id AND {test} = t.test" if touched else ""
        parts.append(
            f"SELECT '{src}' AS src, x.run_id, x.cell_id, x.scenario, x.repeat, x.status, x.signature, x.seconds, "
            f"{first} AS first_run, {before} AS seconds_before, {test} AS test FROM {relation} x{where}"
        )
    con.execute(f"CREATE OR REPLACE TEMP TABLE _settle_raw AS {' UNION ALL '.join(parts)}")
    if candidates:
        con.execute("CREATE OR REPLACE TEMP TABLE _settle_cand AS SELECT src, run_id, cell_id, scenario, repeat FROM _settle_raw")
    # Each (run, cell)'s machine and start, once: per row, the sort below carried each row's cell
    # and run records (the freeze's JSON) through its spill (12,660,000 rows: 51 s against 11 s).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _settle_where AS
        SELECT k.run_id, k.cell_id, {MACHINE_SQL} AS machine, COALESCE(r.started_at, {_EPOCH}) AS t
        FROM (SELECT DISTINCT run_id, cell_id FROM _settle_raw) k
        LEFT JOIN {cells} c USING (run_id, cell_id) LEFT JOIN {runs} r USING (run_id)
        """
    )
    # One row per stored key: the file's row wins over a journal's (a fold would keep it), and a
    # key held twice (a merged copy of a span) counts once, as its earliest-begun copy.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _settle_rows AS
        SELECT s.*, w.machine, w.t, COALESCE(f.started_at, w.t) AS ft
        FROM _settle_raw s LEFT JOIN _settle_where w ON s.run_id IS NOT DISTINCT FROM w.run_id AND s.cell_id IS NOT DISTINCT FROM w.cell_id
        LEFT JOIN {runs} f ON f.run_id = COALESCE(s.first_run, s.run_id)
        QUALIFY row_number() OVER (PARTITION BY s.run_id, s.cell_id, s.scenario, s.repeat ORDER BY s.src = 'j', ft, s.src) = 1
        """
    )
    islands = """
            WITH ordered AS (
                SELECT *, CASE WHEN lag(status) OVER w IS NOT DISTINCT FROM status AND lag(signature) OVER w IS NOT DISTINCT FROM signature
                                    AND lag(scenario) OVER w IS NOT DISTINCT FROM scenario
                                    AND starts_with(lag(run_id) OVER w, 'bisect-') = starts_with(run_id, 'bisect-')
                               THEN 0 ELSE 1 END AS starts,
                       lag(seconds) OVER w AS seconds_prior
                FROM _settle_rows WINDOW w AS (PARTITION BY machine, cell_id, test, repeat ORDER BY t, run_id)
            ), numbered AS (
                SELECT *, sum(starts) OVER (
                    PARTITION BY machine, cell_id, test, repeat ORDER BY t, run_id ROWS UNBOUNDED PRECEDING
                ) AS island
                FROM ordered
            )
            SELECT machine, cell_id, test, repeat,
                   arg_max_null(run_id, (t, run_id)) AS run_id, arg_max_null(scenario, (t, run_id)) AS scenario,
                   arg_max_null(status, (t, run_id)) AS status,
                   arg_max_null(src, (t, run_id)) AS src, max(t) AS t,
                   arg_min(COALESCE(first_run, run_id), (ft, run_id)) AS first_run,
                   arg_max_null(COALESCE(seconds_before, seconds_prior), (t, run_id)) AS seconds_before
            FROM numbered GROUP BY machine, cell_id, test, repeat, island"""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _settle_keep AS
        WITH kept AS ({islands})
        SELECT k.* EXCLUDE (status), k.run_id = n.newest AND k.status <> '{NOT_COLLECTED}' AS current
        FROM kept k JOIN (SELECT machine, cell_id, test, arg_max(run_id, (t, run_id)) AS newest FROM kept GROUP BY ALL) n
        USING (machine, cell_id, test)
        """
    )
    con.execute("DROP TABLE _settle_raw")
    con.execute("DROP TABLE _settle_where")


def _touch(con: duckdb.DuckDBPyConnection, keys: Iterable[tuple[str, str]], cells: Iterable[str] = ()) -> int:
    """Temp table `_touched` (cell_id, test): `keys`, and every key of `cells` (whose collection a
    write brought: each of their tests may have left)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _touched (cell_id TEXT, test TEXT)")
    rows = sorted(set(keys))
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        con.execute(f"INSERT INTO _touched VALUES {', '.join('(?, ?)' for _ in chunk)}", [v for row in chunk for v in row])
    whole = sorted(set(cells))
    if whole:
        marks, test = ", ".join("?" for _ in whole), TEST_SQL.format(a="x")
        for table in ("outcomes", "history"):
            con.execute(
                f"INSERT INTO _touched SELECT DISTINCT x.cell_id, {test} FROM main.{table} x WHERE x.cell_id IN ({marks}) "
                "EXCEPT SELECT cell_id, test FROM _touched",
                whole,
            )
    found = con.execute("SELECT count(*) FROM _touched").fetchone()
    return int(found[0]) if found else 0


# -- writers -----------------------------------------------------------------------------------
def settle(
    con: duckdb.DuckDBPyConnection, keys: Iterable[tuple[str, str]] | None = None, cells: Iterable[str] = (), *, rewrite: bool = False
) -> None:
    """Keep `outcomes` the current state and `history` its spans, for the (cell, test) `keys` a
    write touched and every key of `cells` (whose collection it brought); `keys` None: every key
    of the file. Runs inside the caller's transaction.

    A test a newer collection of its cell left out gets its `not_collected` mark first
    (`collections.leave`): it is then no longer current. Rows no longer current move to
    `history`; a row whose outcome equals the one just before it (same machine, cell, test and
    repeat) is merged into it: the newer row stays and takes the span's `first_run`.
    Idempotent: settling settled keys changes nothing.

    `rewrite` (every key only): both tables are written afresh from what stays, rather than the
    rows that leave deleted one by one: the split of an older file (migration 0010), whose
    `outcomes` holds every night and keeps a night of it. Deleting 95 % of 12,660,000 rows from
    a table with a primary key held the index's changes in memory (20 GB for 30 nights of
    20,000 tests x 20 cells); written afresh, every step spills past DuckDB's memory limit."""
    touched = keys is not None
    if touched and not _touch(con, keys or (), cells):
        return
    collections.leave(con, touched)
    rewrite = rewrite and not touched
    _select(con, {"o": "main.outcomes", "h": "main.history"}, "main.cells", "main.runs", touched=touched, candidates=not rewrite)
    on = _match("x", "s")
    updated = "x.* REPLACE (s.first_run AS first_run, s.seconds_before AS seconds_before)"
    if rewrite:
        _rewrite(con, updated, on)
        _flag_flaky(con, touched)
        for name in ("_settle_cand", "_settle_rows", "_settle_keep"):
            con.execute(f"DROP TABLE IF EXISTS {name}")
        return
    changed = "(x.first_run IS DISTINCT FROM s.first_run OR x.seconds_before IS DISTINCT FROM s.seconds_before)"
    # rows leaving `outcomes` for `history`, and the rare row coming back (a merged file's history that is newer here)
    moving = "SELECT {updated} FROM main.{table} x JOIN _settle_keep s ON {on} WHERE s.src = '{src}' AND {which}"
    con.execute(
        "INSERT INTO main.history BY NAME " + moving.format(updated=updated, table="outcomes", on=on, src="o", which="NOT s.current")
    )
    con.execute("INSERT INTO main.outcomes BY NAME " + moving.format(updated=updated, table="history", on=on, src="h", which="s.current"))
    for table, src in (("outcomes", "o"), ("history", "h")):
        stays = "s.current" if src == "o" else "NOT s.current"
        # what leaves the table: merged into a newer row of its span, or moved to the other table
        con.execute(
            f"""DELETE FROM main.{table} x WHERE EXISTS (SELECT 1 FROM _settle_cand s WHERE s.src = '{src}' AND {on})
                AND NOT EXISTS (SELECT 1 FROM _settle_keep s WHERE s.src = '{src}' AND {stays} AND {on})"""
        )
        con.execute(
            f"""UPDATE main.{table} x SET first_run = s.first_run, seconds_before = s.seconds_before
                FROM _settle_keep s WHERE s.src = '{src}' AND {stays} AND {on} AND {changed}"""
        )
    _flag_flaky(con, touched)
    for name in ("_settle_cand", "_settle_rows", "_settle_keep", "_touched"):
        con.execute(f"DROP TABLE IF EXISTS {name}")


def _rewrite(con: duckdb.DuckDBPyConnection, updated: str, on: str) -> None:
    """`settle` of every key, written afresh: each row that `_settle_keep` keeps (by its key and
    the table it came from, as the deletes and moves of `settle` keep it, a key held twice in one
    table included) into a temp table, then the table dropped, made again from its own
    definition (its primary key, its columns' order) and filled from it. The temp tables spill
    past the memory limit; nothing is deleted row by row."""
    sources = (("outcomes", "o"), ("history", "h"))
    for name, current in (("outcomes", "s.current"), ("history", "NOT s.current")):
        kept = " UNION ALL BY NAME ".join(
            f"SELECT {updated} FROM main.{table} x JOIN _settle_keep s ON {on} AND s.src = '{src}' WHERE {current}"
            for table, src in sources
        )
        con.execute(f"CREATE OR REPLACE TEMP TABLE _settled_{name} AS {kept}")
    for name, _ in sources:
        found = con.execute(
            "SELECT sql FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' AND table_name = ?", [name]
        ).fetchone()
        if found is None:
            raise RuntimeError(f"no table {name!r} to settle")  # the migrations made both
        con.execute(f"DROP TABLE main.{name}")
        con.execute(str(found[0]))
        con.execute(f"INSERT INTO main.{name} BY NAME SELECT * FROM _settled_{name}")
        con.execute(f"DROP TABLE _settled_{name}")


def _flag_flaky(con: duckdb.DuckDBPyConnection, touched: bool) -> None:
    """Table `flaky`, for the settled keys: each (cell, test) on a machine whose spans flip from a
    pass to a failure, or back, where nothing it depends on changed (`analysis.changes.flaky_flips`),
    named by the run of its current state (what a reader's rows carry). Kept at write time: a
    reader marks its rows from a few flagged keys instead of reading every span."""
    test = TEST_SQL.format(a="h")
    mine = f" SEMI JOIN _touched t ON h.cell_id = t.cell_id AND {test} = t.test" if touched else ""
    keys = f"SELECT DISTINCT h.cell_id, {test} AS test FROM history h{mine}"
    fetch = _fetch_of(con)
    spans = _spans(fetch, keys, [])
    flips = flaky_flips(spans, depends(fetch))
    current: dict[tuple[str, str, str], Span] = {}
    for span in spans:
        if span.key not in current or (span.last_at, span.last_run) > (current[span.key].last_at, current[span.key].last_run):
            current[span.key] = span
    if touched:
        con.execute("DELETE FROM main.flaky f WHERE EXISTS (SELECT 1 FROM _touched t WHERE t.cell_id = f.cell_id AND t.test = f.test)")
    else:
        con.execute("DELETE FROM main.flaky")
    rows = [[current[key].last_run, key[1], key[2], signature, reason] for key, (signature, reason) in sorted(flips.items())]
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        marks = ", ".join("(?, ?, ?, ?, ?)" for _ in chunk)
        con.execute(f"INSERT INTO main.flaky (run_id, cell_id, test, signature, reason) VALUES {marks}", [v for row in chunk for v in row])


# -- readers -----------------------------------------------------------------------------------
def lay_over(con: duckdb.DuckDBPyConnection, catalog: str, journal: str | None, keys: Iterable[tuple[str, str]]) -> None:
    """In a reader's connection: temporary views `outcomes` and `history` that show the file's
    current state and history with a writer's unfolded journal rows (temp table `journal`, whose
    (cell, test) are `keys`) settled in, as the fold will settle them.

    A file from before the split (no `history` table: `is_split`) is read as that harness read
    it, every run's rows in `outcomes` and an empty history: choosing its current state here, on
    every open, cost minutes for a month of nights. The first writer splits it (migration 0010)."""
    tables = {r[0] for r in con.execute(f"SELECT table_name FROM duckdb_tables() WHERE database_name = {_quote(catalog)}").fetchall()}
    stored, past = f'"{catalog}".main.outcomes', f'"{catalog}".main.history'
    if "history" not in tables:
        _lay_over_unsplit(con, stored, journal)
        return
    cells, runs = _shadowed(con, catalog, "cells"), _shadowed(con, catalog, "runs")
    if journal is None or not _touch(con, keys):
        return
    sources = {"o": stored, "h": past, "j": journal}
    _select(con, sources, cells, runs, touched=True)
    rows = " UNION ALL BY NAME ".join(f"SELECT '{src}' AS src, x.* FROM {relation} x" for src, relation in sources.items())
    settled = "x.* EXCLUDE (src) REPLACE (s.first_run AS first_run, s.seconds_before AS seconds_before)"
    picked = f"SELECT {settled} FROM ({rows}) x JOIN _settle_keep s ON {_match('x', 's')} AND x.src = s.src"
    # the stored rows of the keys no journal row touched stay as they are; the touched keys' rows come settled
    kept = "SELECT x.* FROM {relation} x WHERE NOT EXISTS (SELECT 1 FROM _settle_cand s WHERE s.src = '{src}' AND " + _match("x", "s") + ")"
    current = kept.format(relation=stored, src="o") + f" UNION ALL BY NAME {picked} WHERE s.current"
    older = kept.format(relation=past, src="h") + f" UNION ALL BY NAME {picked} WHERE NOT s.current"
    con.execute(f"CREATE OR REPLACE TEMP VIEW outcomes AS {current}")
    con.execute(f"CREATE OR REPLACE TEMP VIEW history AS {older}")


def _lay_over_unsplit(con: duckdb.DuckDBPyConnection, stored: str, journal: str | None) -> None:
    """A file from before the split, as its harness read it: every row (and the journal's rows of
    keys the file lacks, as a fold would add them), with the columns of the split, and no history."""
    first = "" if _has_column(con, stored, "first_run") else ", NULL::VARCHAR AS first_run, NULL::DOUBLE AS seconds_before"
    rows = f"SELECT x.*{first} FROM {stored} x"
    if journal is not None:
        on = _match("j", "x")
        rows += f" UNION ALL BY NAME SELECT j.*{first} FROM {journal} j WHERE NOT EXISTS (SELECT 1 FROM {stored} x WHERE {on})"
    con.execute(f"CREATE OR REPLACE TEMP VIEW outcomes AS {rows}")
    con.execute("CREATE OR REPLACE TEMP VIEW history AS SELECT * FROM outcomes LIMIT 0")


def is_split(store: SqlResultsFile) -> bool:
    """Whether the file keeps its current state apart from its history (migration 0010): a file an
    older harness wrote, not opened by a writer since, holds every run's rows in `outcomes`."""
    rows = store.fetch("SELECT count(*) AS n FROM schema_migrations WHERE name = '0010_history'")
    return bool(rows and rows[0]["n"])


def _shadowed(con: duckdb.DuckDBPyConnection, catalog: str, table: str) -> str:
    """The reader's `table`: its temp view with the journal's records where the overlay made one, else the file's."""
    found = con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?", [table]).fetchone()
    return f"temp.main.{table}" if found and found[0] else f'"{catalog}".main.{table}'


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- reads of the history ------------------------------------------------------------------------
#: Runs that do not sweep the matrix: what a watch, a refinement or a bisection built beside a sweep.
_SIDE_RUNS = ("watch-", "refine-", "bisect-")


@dataclass(frozen=True)
class Run:
    run_id: str
    started_at: datetime
    inputs: Mapping[str, Any]

    @property
    def sweep(self) -> bool:
        return not self.run_id.startswith(_SIDE_RUNS)


#: A read of the file: SQL and its parameters -> rows as dicts (`Store.fetch`, or a writer's connection: `_fetch_of`).
Fetch = Callable[[str, Sequence[Any]], list[dict[str, Any]]]


def _fetch_of(con: duckdb.DuckDBPyConnection) -> Fetch:
    def fetch(sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = con.execute(sql, list(params))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    return fetch


def runs(fetch: Fetch) -> list[Run]:
    """Every run of the file, oldest first, with the inputs it recorded (`running.plan.run_inputs`)."""
    rows = fetch("SELECT run_id, started_at, json_extract(settings, '$.inputs') AS inputs FROM runs ORDER BY started_at, run_id", [])
    return [Run(str(r["run_id"]), r["started_at"], json_map(r["inputs"])) for r in rows]


@dataclass(frozen=True)
class Depth:
    """How deep the history is: `5 runs, 2026-11-22 to 2026-11-26`."""

    runs: int
    first: datetime | None
    last: datetime | None
    kept: int  # history rows (spans no longer current)

    def describe(self) -> str:
        if not self.runs or self.first is None or self.last is None:
            return "no runs"
        span = (
            f"{self.first:%Y-%m-%d}"
            if f"{self.first:%Y-%m-%d}" == f"{self.last:%Y-%m-%d}"
            else f"{self.first:%Y-%m-%d} to {self.last:%Y-%m-%d}"
        )
        return f"{self.runs} run{'s' if self.runs != 1 else ''}, {span}"


def depth(store: SqlResultsFile) -> Depth:
    """The file's runs and the history rows it keeps."""
    row = store.fetch("SELECT count(*) AS n, min(started_at) AS first, max(started_at) AS last FROM runs")[0]
    kept = store.fetch("SELECT count(*) AS n FROM history")[0]["n"]
    return Depth(int(row["n"]), row["first"], row["last"], int(kept))


@dataclass(frozen=True)
class Baseline:
    """What `harness changes` compares: the state after `run` (at `moment`) against the current one."""

    run: Run
    newest: Run


def baseline(store: SqlResultsFile, since: str = "") -> Baseline | None:
    """The run to compare the current state with: by default the newest run before the newest
    sweep (watch, refinement and bisection runs belong to the sweep before them); `since` a run
    id (its state), or a date (the newest run started before it). None: one run, nothing before.
    BadInput names the runs for a `since` the file does not hold."""
    found = runs(store.fetch)
    if not found:
        return None
    newest = next((r for r in reversed(found) if r.sweep), found[-1])
    if not since:
        before = [r for r in found if (r.started_at, r.run_id) < (newest.started_at, newest.run_id)]
        return Baseline(before[-1], newest) if before else None
    named = next((r for r in found if r.run_id == since), None)
    if named is not None:
        return Baseline(named, newest)
    moment = _date(since, found)
    before = [r for r in found if r.started_at < moment]
    if not before:
        oldest = f"{found[0].run_id}, started {found[0].started_at:%Y-%m-%d %H:%M}"
        raise BadInput(f"--since {since!r}: no run started before it (the oldest: {oldest}); give a later date")
    return Baseline(before[-1], newest)


def _date(text: str, found: list[Run]) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        names = ", ".join(r.run_id for r in found[-5:])
        raise BadInput(
            f"--since {text!r} is neither a run of this file nor a date; give a run id (the newest: {names}) or a date like 2026-11-25"
        ) from None


def spans_since(store: SqlResultsFile, moment: datetime) -> list[Span]:
    """Every span, current and history, of the (machine, cell, test) keys whose current state
    began after `moment`, or that left the suite after it (a `not_collected` mark): all that can
    differ from the state then (`analysis.changes.compare`)."""
    test, marked = TEST_SQL.format(a="o"), TEST_SQL.format(a="h")
    moved = (
        f"SELECT DISTINCT o.cell_id, {test} AS test FROM outcomes o "
        "JOIN runs f ON f.run_id = COALESCE(o.first_run, o.run_id) WHERE f.started_at > ?"
        f" UNION SELECT DISTINCT h.cell_id, {marked} AS test FROM history h JOIN runs f ON f.run_id = COALESCE(h.first_run, h.run_id) "
        f"WHERE h.status = '{NOT_COLLECTED}' AND f.started_at > ?"
    )
    return _spans(store.fetch, moved, [moment, moment])


def cells_by(store: SqlResultsFile, moment: datetime) -> set[tuple[str, str]]:
    """The (machine, cell) that a run started by `moment` built: a cell is new only where none did
    (its rows may all have moved on since, and `spans_since` reads only the keys that changed)."""
    rows = store.fetch(
        f"SELECT DISTINCT {MACHINE_SQL} AS machine, c.cell_id FROM cells c JOIN runs r USING (run_id) WHERE r.started_at <= ?", [moment]
    )
    return {(str(r["machine"]), str(r["cell_id"])) for r in rows}


def _spans(fetch: Fetch, keys: str, params: list[Any]) -> list[Span]:
    test = TEST_SQL.format(a="x")
    rows = fetch(
        f"""
        WITH k AS ({keys}),
        x AS (
            SELECT run_id, cell_id, scenario, repeat, status, signature, first_run, test_id, '' AS reason FROM outcomes
            UNION ALL SELECT run_id, cell_id, scenario, repeat, status, signature, first_run, test_id,
                             CASE WHEN status = '{NOT_COLLECTED}' THEN COALESCE(exception_type, '') ELSE '' END FROM history
        )
        SELECT {MACHINE_SQL} AS machine, x.cell_id, {test} AS test, x.scenario AS node, x.repeat, x.status, x.reason,
               COALESCE(x.signature, '') AS signature, COALESCE(x.first_run, x.run_id) AS first_run, x.run_id AS last_run,
               COALESCE(f.started_at, r.started_at) AS first_at, r.started_at AS last_at
        FROM x SEMI JOIN k ON x.cell_id = k.cell_id AND {test} = k.test
        LEFT JOIN cells c USING (run_id, cell_id) LEFT JOIN runs r USING (run_id)
        LEFT JOIN runs f ON f.run_id = COALESCE(x.first_run, x.run_id)
        """,
        params,
    )
    return [Span(**row) for row in rows]


def depends(fetch: Fetch) -> DependsOn:
    """What each run's outcome in each cell depended on (`analysis.changes.Depends`): the cell's
    resolved environment from its record in that run, the scenario's or the test file's
    content and the code under test from the inputs the run recorded ("" where it recorded none)."""
    envs = {
        (r["run_id"], r["cell_id"]): str(r["env"] or "")
        for r in fetch(
            "SELECT run_id, cell_id, md5(concat_ws('|', CAST(installed AS VARCHAR), CAST(inherited AS VARCHAR), "
            "CAST(git_commits AS VARCHAR), COALESCE(env_status, ''))) AS env FROM cells",
            [],
        )
    }
    inputs = {r.run_id: r.inputs for r in runs(fetch)}

    def depends_on(run: str, cell: str, node: str) -> Depends | None:
        env, recorded = envs.get((run, cell), ""), inputs.get(run)
        if not recorded:
            return None
        tests = json_map(recorded.get("tests"))
        paths = json.dumps(recorded.get("paths") or {}, sort_keys=True)
        if tests and ("::" in node or node in json_map(tests.get("files"))):
            file = str(json_map(tests.get("files")).get(node.split("::")[0]) or "")
            return Depends(env, f"{file}/{tests.get('config', '')}" if file else "", f"{tests.get('code', '')} {paths}")
        return Depends(env, str(json_map(recorded.get("scenarios")).get(node) or ""), f"pinned {paths}")

    return depends_on
