"""Each test's (or file's) outcomes run by run in each cell, where they changed, and why: the
History page's reads.

The runs are the columns, oldest first: every run of the file but a bisection's (its probes are
the Failures page's), numbered 1, 2, … (`ord`). A row of `outcomes` or `history` is a *span*
(`history.py`): one outcome of a (machine, cell, test, repeat) from its `first_run` to its
`run_id`; every run between them that built the cell on that machine saw it. A square (a run in
a cell) is its spans' status there, repeats folded to the worst; a `not_collected` mark is *not
collected* (its `reason` says why), never an outcome.

A *change* is a span whose outcome differs from the one before it (same machine, cell, test and
repeat), as `harness changes` classes them (`analysis.changes`): a pass that fails, or fails with
another signature (*regressed*), a failure that passes (*fixed*; a file's error whose file
collects again too), a test its run did not collect (*removed*, or *not_run* where its file
failed to collect). A span that says nothing (not applicable, inconclusive, xfail, an env that
did not build) is skipped over, and a test collected again is compared with how it last ran.
Which changes are flaky (nothing they depend on changed), what moved between the two runs and
the cause `harness explain` stored are read for one test at a time (`story`).

Decided in DuckDB, whatever the file's size: the changes of every key with a history (only such
a key can have changed), each test's state now and where each file ran are computed once per
connection, as temp tables (`_memo`); `listing` filters, counts, groups per file past
`GROUP_PAST` tests and pages from them; `strips` reads the squares of the rows on screen only.
At 20,000 tests × 23 cells × 30 nights (460,000 outcomes, 96,000 history rows) the temp tables
take ~0.5 s, a page of the list ~0.05 s and its strips ~0.15 s (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.analysis.explain import moves
from harness.analysis.status import NOT_COLLECTED, SEVERITY, Status
from harness.storage import causes, clauses, history
from harness.storage.clauses import MACHINE_SQL, TEST_SQL
from harness.storage.resultsfile import SqlResultsFile

#: Past this many matching tests (and no file chosen), the list has one row per file.
GROUP_PAST = 60
#: The kinds of change `harness explain` looks for a cause of.
EXPLAINED = ("regressed", "fixed")

_TIMELINE = (
    "tl AS (SELECT run_id, started_at, row_number() OVER (ORDER BY started_at, run_id) AS ord "
    "FROM runs WHERE NOT starts_with(run_id, 'bisect-'))"
)
_PAIRS = f"pairs AS MATERIALIZED (SELECT c.run_id, c.cell_id, {MACHINE_SQL} AS machine FROM cells c JOIN runs r USING (run_id))"
_RANKS = "[" + ", ".join(f"'{s}'" for s in (*SEVERITY, NOT_COLLECTED)) + "]"
#: One status for a square over its repeats: the worst, a not_applicable or a mark beside an outcome dropped.
_WORST = (
    f"{_RANKS}[COALESCE(min(list_position({_RANKS}, status)) FILTER (WHERE status NOT IN ('{Status.NOT_APPLICABLE}', '{NOT_COLLECTED}')), "
    f"min(list_position({_RANKS}, status)))]"
)
#: A span's key (machine, cell, test, repeat) as one 64-bit hash: the window partitions by it in
#: two thirds of the time the four strings take. Two of a file's ~50,000 keys with a history
#: share one with a probability of about 1e-10, and would then read as one key's spans.
_KEY = "hash(machine, cell_id, test, repeat)"
#: What a span says for the changes: `pass`, `fail:<signature>`, `out` (not collected), or NULL (nothing).
_STATE = f"""CASE WHEN status = '{Status.PASS}' OR (status = '{NOT_COLLECTED}' AND reason = 'collected') THEN 'pass'
    WHEN status IN ({clauses.FAILING}) THEN 'fail:' || COALESCE(NULLIF(signature, ''), status)
    WHEN status = '{NOT_COLLECTED}' THEN 'out' END"""


def _spans(keep: str) -> str:
    """CTE `spans`: every span (current and history, bisections left out) of the rows `keep`
    admits (a clause over `x`, after FROM: a `SEMI JOIN …` or `WHERE …`), with its machine and
    the numbers of its first and last runs."""
    test = TEST_SQL.format(a="x")
    columns = (
        "x.run_id, x.cell_id, x.scenario, x.repeat, x.status, COALESCE(x.signature, '') AS signature, "
        f"COALESCE(x.first_run, x.run_id) AS first_run, {test} AS test, "
        f"CASE WHEN x.status = '{NOT_COLLECTED}' THEN COALESCE(x.exception_type, '') ELSE '' END AS reason"
    )
    rows = " UNION ALL ".join(f"SELECT {columns} FROM {table} x {keep}" for table in ("outcomes", "history"))
    return f"""spans AS (
        SELECT COALESCE(p.machine, '') AS machine, x.cell_id, x.test, x.scenario AS node, x.repeat, x.status, x.signature,
               x.reason, x.first_run, x.run_id AS last_run, f.ord AS first_ord, l.ord AS last_ord
        FROM ({rows}) x JOIN tl l ON l.run_id = x.run_id JOIN tl f ON f.run_id = x.first_run
        LEFT JOIN pairs p ON p.run_id = x.run_id AND p.cell_id = x.cell_id
    )"""


def _changes(*, before: bool = False) -> str:
    """CTE `changes`: every span of CTE `spans` with its `kind` of change (NULL: none); with
    `before`, also the run before it that showed the test as it was (`before_run`) and how
    (`before_state`, `before_status`), which only a test's story needs (each lag costs)."""
    more = (
        """, lag(CASE WHEN state <> 'out' THEN status END IGNORE NULLS) OVER w AS before_status,
                   CASE WHEN state = 'out' THEN lag(CASE WHEN state IS NOT NULL THEN last_run END IGNORE NULLS) OVER w
                        ELSE lag(CASE WHEN state <> 'out' THEN last_run END IGNORE NULLS) OVER w END AS before_run"""
        if before
        else ""
    )
    return f"""changes AS (
        SELECT *, CASE
            WHEN state = 'out' AND prev_state IS NOT NULL AND prev_state <> 'out'
                THEN CASE WHEN reason = 'not_run' THEN 'not_run' ELSE 'removed' END
            WHEN state <> 'out' AND before_state IS NOT NULL AND state <> before_state
                THEN CASE WHEN state = 'pass' THEN 'fixed' ELSE 'regressed' END
            END AS kind
        FROM (
            SELECT *, lag(state IGNORE NULLS) OVER w AS prev_state,
                   lag(CASE WHEN state <> 'out' THEN state END IGNORE NULLS) OVER w AS before_state{more}
            FROM (SELECT *, {_STATE} AS state FROM spans)
            WINDOW w AS (PARTITION BY {_KEY} ORDER BY last_ord, first_ord)
        )
    )"""


#: Computed once per connection (`_memo`) and read by every list and strip of a page: the changes
#: of every key with a history (only such a key can have changed: most have none), each test's
#: state now, and where each file's tests ran (the runs from its first to its last, per cell).
_CHANGED, _TESTS, _FILES = "timeline_changes", "timeline_tests", "timeline_files"
#: How many runs the file holds (bisections aside): the newest one's number.
_TOP = "(SELECT count(*) FROM runs WHERE NOT starts_with(run_id, 'bisect-'))"


def _memo(store: SqlResultsFile, *, files: bool = False) -> None:
    """Temp tables `timeline_changes` (cell_id, test, file, ord, kind: every change, by the run that
    brought it), `timeline_tests` (test, file, failing_cells now, gone: out of the current state)
    and, with `files`, `timeline_files` (file, cell_id, first_ord, last_ord), each made once per
    connection, inside the caller's `store.reading()`.

    The dashboard's held connection is a snapshot of the file, opened again when the file changes:
    these are computed once per version of the file, not on every change of a filter."""
    test_h, test_o = TEST_SQL.format(a="h"), TEST_SQL.format(a="o")
    # by a hash of the key: half the time of comparing the strings, and a collision only reads one more span
    keep = f"WHERE hash(x.cell_id, {TEST_SQL.format(a='x')}) IN (SELECT key FROM keys)"
    store.fetch(
        f"""
        CREATE TEMP TABLE IF NOT EXISTS {_CHANGED} AS
        WITH {_TIMELINE}, {_PAIRS},
        keys AS (SELECT DISTINCT hash(h.cell_id, {test_h}) AS key FROM history h WHERE NOT starts_with(h.run_id, 'bisect-')),
        {_spans(keep)}, {_changes()}
        SELECT cell_id, test, split_part(test, '::', 1) AS file, first_ord AS ord, kind FROM changes WHERE kind IS NOT NULL
        """
    )
    store.fetch(
        f"""
        CREATE TEMP TABLE IF NOT EXISTS {_TESTS} AS
        WITH now AS (
            SELECT {test_o} AS test, count(DISTINCT CASE WHEN status IN ({clauses.FAILING}) THEN cell_id END) AS failing_cells
            FROM outcomes o WHERE NOT starts_with(o.run_id, 'bisect-') GROUP BY ALL
        )
        SELECT t.test, split_part(t.test, '::', 1) AS file, COALESCE(now.failing_cells, 0) AS failing_cells, now.test IS NULL AS gone
        FROM (SELECT test FROM now UNION SELECT {test_h} FROM history h WHERE NOT starts_with(h.run_id, 'bisect-')) t
        LEFT JOIN now USING (test)
        """
    )
    if files:
        # the file of a node id is its identity's: grouped by run first, then numbered (556,000 rows → a few thousand)
        rows = " UNION ALL ".join(
            f"SELECT split_part(scenario, '::', 1) AS file, cell_id, COALESCE(first_run, run_id) AS first_run, run_id FROM {table}"
            for table in ("outcomes", "history")
        )
        store.fetch(
            f"""
            CREATE TEMP TABLE IF NOT EXISTS {_FILES} AS
            WITH {_TIMELINE}, g AS (SELECT DISTINCT * FROM ({rows}))
            SELECT g.file, g.cell_id, min(f.ord) AS first_ord, max(l.ord) AS last_ord
            FROM g JOIN tl f ON f.run_id = g.first_run JOIN tl l ON l.run_id = g.run_id GROUP BY ALL
            """
        )


def _matching(test: str, search: str, changed_within: int, flaky: bool, flagged: bool) -> tuple[list[str], list[Any]]:
    """The filters of the list as conditions on the test id `test` (SQL), and their parameters."""
    conditions: list[str] = []
    params: list[Any] = []
    if search:
        conditions.append(f"strpos(lower({test}), lower(?)) > 0")  # a substring, never a pattern
        params.append(search)
    if changed_within > 0:
        conditions.append(f"{test} IN (SELECT test FROM {_CHANGED} WHERE ord > {_TOP} - ?)")
        params.append(changed_within)
    if flaky:
        conditions.append(f"{test} IN (SELECT test FROM flaky)" if flagged else "false")
    return conditions, params


def runs(store: SqlResultsFile) -> list[dict[str, Any]]:
    """The columns: every run but a bisection's, oldest first, each with its number (`ord`, from 1)."""
    return store.fetch(f"WITH {_TIMELINE} SELECT run_id, started_at, ord FROM tl ORDER BY ord")


def listing(
    store: SqlResultsFile,
    *,
    search: str = "",
    file: str = "",
    changed_within: int = 0,
    flaky: bool = False,
    window: int = 0,
    offset: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of the list: the tests (or, past GROUP_PAST of them and no `file` chosen, the files)
    whose test id holds `search` (case-insensitive), in `file`, that changed in the newest
    `changed_within` runs (0: any), flagged flaky across runs (`flaky`: table `flaky`).

    `{"level": "test"|"file", "matched": tests matched, "total": rows, "rows": [...]}`; a row:
    `name`, `tests`, `failing` (tests failing now somewhere), `failing_cells` (cells where one
    does), `changed` (tests with a change in the newest `window` runs; 0: all), `changes` (cells
    × runs where one changed, in that window), `flaky` (tests flaky across runs), `last_change`
    (the newest run that changed one, by number), `gone` (tests out of the current state).
    Newest change first, then most changes, most failing, by name."""
    flagged = store.has_table("flaky")
    conditions, params = _matching("t.test", search, changed_within, flaky, flagged)
    if file:
        conditions.append("t.file = ?")
        params.append(file)
    where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
    with store.reading():  # the temp tables and the read in one connection
        _memo(store)
        rows = store.fetch(
            f"""
            WITH per AS (
                SELECT test, count(DISTINCT (cell_id, ord)) FILTER (WHERE ord > {_TOP} - ?) AS changes, max(ord) AS last_change
                FROM {_CHANGED} GROUP BY test
            ),
            fl AS ({"SELECT DISTINCT test FROM flaky" if flagged else "SELECT NULL::VARCHAR AS test LIMIT 0"}),
            tests AS MATERIALIZED (
                SELECT t.test, t.file, t.failing_cells, COALESCE(per.changes, 0) AS changes, per.last_change,
                       fl.test IS NOT NULL AS flaky, t.gone
                FROM {_TESTS} t LEFT JOIN per USING (test) LEFT JOIN fl USING (test){where}
            ),
            counted AS (SELECT count(*) AS matched, bool_or(contains(test, '::')) AS suite FROM tests),
            grouped AS (SELECT matched > ? AND suite AND ? AS yes, matched FROM counted),
            listed AS (
                SELECT 'test' AS level, test AS name, 1 AS tests, (failing_cells > 0)::INT AS failing, failing_cells,
                       (changes > 0)::INT AS changed, changes, flaky::INT AS flaky, last_change, gone::INT AS gone
                FROM tests WHERE NOT (SELECT yes FROM grouped)
                UNION ALL
                SELECT 'file', file, count(*), count(*) FILTER (WHERE failing_cells > 0), sum(failing_cells),
                       count(*) FILTER (WHERE changes > 0), sum(changes), count(*) FILTER (WHERE flaky), max(last_change),
                       count(*) FILTER (WHERE gone)
                FROM tests WHERE (SELECT yes FROM grouped) GROUP BY file
            )
            SELECT *, count(*) OVER () AS total, (SELECT matched FROM grouped) AS matched FROM listed
            ORDER BY last_change DESC NULLS LAST, changes DESC, failing_cells DESC, name LIMIT ? OFFSET ?
            """,
            [window if window > 0 else 1 << 30, *params, GROUP_PAST, not file, limit, offset],
        )
    if rows:
        level, matched, total = str(rows[0]["level"]), int(rows[0]["matched"]), int(rows[0]["total"])
    else:
        level, matched, total = "test", 0, 0
    for row in rows:
        for key in ("level", "matched", "total"):
            row.pop(key)
        for key in ("tests", "failing", "failing_cells", "changed", "changes", "flaky", "gone"):
            row[key] = int(row[key] or 0)
    return {"level": level, "matched": matched, "total": total, "rows": rows}


def strips(
    store: SqlResultsFile,
    names: Sequence[str],
    *,
    level: str = "test",
    window: int = 0,
    search: str = "",
    changed_within: int = 0,
    flaky: bool = False,
) -> list[dict[str, Any]]:
    """The strips of `names` (tests, or files with `level="file"`) in the newest `window` runs (0:
    all): one row per name and cell, `{"name", "cell_id", "squares": [...]}`, a square per run
    the cell ran the test (or the file's tests) in, oldest first, each with its `ord` and `run_id`.

    A test's square: `status` (its repeats' worst; `not_collected` for a mark), `signature`,
    `reason` (a mark's why), `repeats` and `change` (the kind of change that run brought there,
    "" for none). A file's, over its tests that `listing`'s filters admit (`search`,
    `changed_within`, `flaky`): how many of them failed there (`failing`), were not collected
    (`out`) or said nothing (`other`: not applicable, skipped, xfail, …), its worst failing
    status (`status`, "" for none) and how many changed there (`changed`); the rest passed. Only a
    file's spans that did not pass are read, and only the runs where it had tests get a square."""
    wanted = sorted(set(names))
    if not wanted:
        return []
    marks = ", ".join("?" for _ in wanted)
    test = TEST_SQL.format(a="x")
    with store.reading():  # the temp tables and the read in one connection
        _memo(store, files=level == "file")
        window_param = window if window > 0 else 1 << 30
        head = f"""WITH {_TIMELINE}, {_PAIRS}, win AS (SELECT * FROM tl WHERE ord > (SELECT max(ord) FROM tl) - ?)"""
        if level == "test":
            return store.fetch(
                f"""
                {head}, {_spans(f"WHERE {test} IN ({marks})")},
                flips AS (SELECT test, cell_id, ord, min(kind) AS kind FROM {_CHANGED} WHERE test IN ({marks}) GROUP BY ALL),
                seen AS (
                    SELECT s.test, s.cell_id, w.ord, w.run_id, s.status, s.signature, s.reason
                    FROM spans s JOIN win w ON w.ord BETWEEN s.first_ord AND s.last_ord
                    JOIN pairs p ON p.run_id = w.run_id AND p.cell_id = s.cell_id AND p.machine = s.machine
                ),
                squares AS (
                    SELECT test AS name, cell_id, ord, run_id, {_WORST} AS status,
                           COALESCE(max(signature) FILTER (WHERE status IN ({clauses.FAILING})), max(signature)) AS signature,
                           max(reason) AS reason, count(*) AS repeats, COALESCE(any_value(f.kind), '') AS change
                    FROM seen LEFT JOIN flips f USING (test, cell_id, ord) GROUP BY test, cell_id, ord, run_id
                )
                SELECT name, cell_id, list(struct_pack(ord, run_id, status, signature, reason, repeats, change) ORDER BY ord) AS squares
                FROM squares GROUP BY name, cell_id ORDER BY name, cell_id
                """,
                [window_param, *wanted, *wanted, *wanted],
            )
        conditions, params = _matching(test, search, changed_within, flaky, store.has_table("flaky"))
        keep = " AND ".join([f"x.status <> '{Status.PASS}'", f"split_part({test}, '::', 1) IN ({marks})", *conditions])
        changed_conditions, changed_params = _matching("c.test", search, changed_within, flaky, store.has_table("flaky"))
        changed_where = " AND ".join([f"c.file IN ({marks})", *changed_conditions])
        return store.fetch(
            f"""
            {head}, {_spans("WHERE " + keep)},
            present AS (
                SELECT f.file AS name, f.cell_id, w.ord, w.run_id FROM {_FILES} f
                JOIN win w ON w.ord BETWEEN f.first_ord AND f.last_ord JOIN pairs p ON p.run_id = w.run_id AND p.cell_id = f.cell_id
                WHERE f.file IN ({marks})
            ),
            odd AS (
                SELECT split_part(test, '::', 1) AS name, cell_id, machine, greatest(first_ord, (SELECT min(ord) FROM win)) AS a,
                       last_ord AS b, status IN ({clauses.FAILING}) AS failing, status = '{NOT_COLLECTED}' AS out,
                       min(list_position({_RANKS}, status)) AS rank, count(*) AS n
                FROM spans WHERE last_ord >= (SELECT min(ord) FROM win) GROUP BY ALL
            ),
            seen AS (
                SELECT o.name, o.cell_id, w.ord, sum(o.n) FILTER (WHERE o.failing) AS failing, sum(o.n) FILTER (WHERE o.out) AS out,
                       sum(o.n) FILTER (WHERE NOT o.failing AND NOT o.out) AS other, min(o.rank) FILTER (WHERE o.failing) AS rank
                FROM odd o JOIN win w ON w.ord BETWEEN o.a AND o.b
                JOIN pairs p ON p.run_id = w.run_id AND p.cell_id = o.cell_id AND p.machine = o.machine
                GROUP BY ALL
            ),
            flips AS (
                SELECT c.file AS name, c.cell_id, c.ord, count(DISTINCT c.test) AS changed FROM {_CHANGED} c
                WHERE {changed_where} GROUP BY ALL
            ),
            squares AS (
                SELECT p.name, p.cell_id, p.ord, p.run_id, COALESCE(s.failing, 0)::INT AS failing, COALESCE(s.out, 0)::INT AS out,
                       COALESCE(s.other, 0)::INT AS other, COALESCE({_RANKS}[s.rank], '') AS status, COALESCE(f.changed, 0)::INT AS changed
                FROM present p LEFT JOIN seen s USING (name, cell_id, ord) LEFT JOIN flips f USING (name, cell_id, ord)
            )
            SELECT name, cell_id, list(struct_pack(ord, run_id, failing, out, other, status, changed) ORDER BY ord) AS squares
            FROM squares GROUP BY name, cell_id ORDER BY name, cell_id
            """,
            [window_param, *wanted, *params, *wanted, *params, *wanted, *wanted, *changed_params],
        )


def story(store: SqlResultsFile, test: str, *, window: int = 0) -> list[dict[str, Any]]:
    """Every change of one test in the newest `window` runs (0: all), newest first: `cell_id`,
    `machine`, `node`, `kind` (regressed, fixed, flaky where nothing it depends on changed between
    the two runs, removed, not_run), `before`/`after` (statuses), `signature` (the failure now for
    a regression, then for a fix), `before_run`/`after_run`, `moved` (what the file recorded moving
    between them: packages, commits, the test's file), and `cause`/`verdict` (what `harness
    explain` stored for it; "" where it did not)."""
    with store.reading():  # one view for every read
        rows = store.fetch(
            f"""
            WITH {_TIMELINE}, {_PAIRS},
            win AS (SELECT * FROM tl WHERE ord > (SELECT max(ord) FROM tl) - ?),
            {_spans(f"WHERE {TEST_SQL.format(a='x')} = ?")}, {_changes(before=True)}
            SELECT machine, cell_id, node, kind, before_status, status, before_state, state, signature, reason,
                   before_run, first_run AS after_run, first_ord AS ord
            FROM changes WHERE kind IS NOT NULL AND first_ord IN (SELECT ord FROM win)
            ORDER BY first_ord DESC, cell_id, repeat
            """,
            [window if window > 0 else 1 << 30, test, test],
        )
        found = _unique(rows)
        explained = [c for c in found if c["kind"] in EXPLAINED]
        if not explained:
            return found
        depends = history.depends(store.fetch)
        pairs = {(c["before_run"], c["cell_id"]) for c in explained} | {(c["after_run"], c["cell_id"]) for c in explained}
        recorded = causes.facts(store, pairs)
        stored = causes.read(store, {c["after_run"] for c in explained})
    for change in explained:
        cell, before_run, after_run = change["cell_id"], change["before_run"], change["after_run"]
        old, new = depends(before_run, cell, change["node"]), depends(after_run, cell, change["node"])
        cause = stored.get((after_run, cell, change["kind"], change["signature"]))
        if cause is not None:
            change["cause"], change["verdict"] = cause.text, cause.verdict
        if (before_run, cell) in recorded and (after_run, cell) in recorded:
            moved = moves(recorded[(before_run, cell)], recorded[(after_run, cell)], [change["node"].split("::")[0]])
            change["moved"] = [m.describe() for m in moved]
        if old is not None and new is not None and old.same_as(new):
            change["kind"] = "flaky"
    return found


def _unique(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One change per cell, run and kind (its repeats' rows folded), with its signature."""
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for row in rows:
        failing = str((row["state"] if row["kind"] == "regressed" else row["before_state"]) or "")
        signature = failing.removeprefix("fail:") if failing.startswith("fail:") else ""
        if row["kind"] == "not_run":
            signature = str(row["signature"] or "")  # its file's collection error
        key = (str(row["cell_id"]), str(row["after_run"]), str(row["kind"]), signature)
        if key in found:
            continue
        found[key] = {
            "cell_id": key[0], "machine": str(row["machine"]), "node": str(row["node"]), "kind": key[2],
            "before": str(row["before_status"] or ""), "after": str(row["status"]), "signature": signature,
            "before_run": str(row["before_run"] or ""), "after_run": key[1], "ord": int(row["ord"]),
            "moved": [], "cause": "", "verdict": "", "reason": str(row["reason"] or ""),
        }  # fmt: skip
    return list(found.values())
