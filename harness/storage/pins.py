"""A pin's decisions over every outcome, stated in SQL (issue 48: decide in SQL, print in Python).

`harness.analysis.pin.choose` decides a pin over rows: every outcome of every chosen test in every
candidate cell, 437,000 Python dicts for a suite's `-m 'not slow'` at 2,000,000 outcomes. The
decisions that need every row are asked here instead, over table `outcomes`, and return one row
per (run, cell) pair, per candidate, or per failure to name:

- `pairs`: the admitted (run, cell) pairs that hold a chosen test, with the cell columns the pin's
  rows carry (`queries.loud_pin_rows`) and when their chosen outcomes ran; Python makes them
  candidates (`analysis.pin.standings`), as `analysis.pin.candidates_of` makes them of rows;
- `loud_table`: a temporary table of each (candidate, test) where a chosen test does not pass
  (`Candidate.passes`: a test passes where each of its outcomes passed and no history marks it
  flaky across runs, or where it has no outcome and is a node id, not collected by that cell's
  release of the suite), which the reads below share;
- `failing_counts`: per candidate, how many chosen tests do not pass there (0: it qualifies);
- `failing_tests`: per chosen test, in how many candidates it does not pass (when nothing qualifies);
- `evidence`: per chosen test, its outcomes and runs in the winner; `first_at`: which of its
  (run, cell) pairs holds the outcome `choose` takes as the latest, when they tie;
- `failures`: why a test does not pass in the few candidates a result names (its blockers): one
  row per (test, status, signature, message) for the failures of one outcome, and the rows of the
  few others (repeats, runs that disagree, flaky across runs) for `Candidate.result` to word;
- `never_passed`: the chosen tests without a pass in some runs (the page's "never passed on").

Each takes the chosen tests as a temporary table (`chosen`, made in `store.reading()`) and the
candidates as their (run, cell) pairs (`Members`). The chosen tests' outcomes are read from
`outcomes` once, into a narrow temporary table (`_read`: numbers for the pair and the test, the
repeat, whether it passed, when it started, and the words of those that did not pass), which
`pairs`, `loud_table`, `evidence`, `first_at` and `never_passed` ask instead of `outcomes`: each
read of `outcomes` decodes and hashes every node id (0.1-0.25 s at 2,000,000 outcomes), and a pin
that finds nothing asked three. tests/unit/test_pin_sql_*.py
hold them to the Python rule on tables of cases, and `pin_from_store` to the result `choose` gives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from harness.analysis.status import Status
from harness.storage import clauses
from harness.storage.clauses import Filters
from harness.storage.resultsfile import SqlResultsFile

#: One failure of one outcome, as `failures` groups it: (test, status, signature, message's first line).
Single = tuple[str, str, str, str]
Row = dict[str, Any]


@dataclass(frozen=True)
class Members:
    """Candidates as the (run, cell) pairs each pools: `pairs[i]` belongs to candidate `cands[i]`."""

    runs: tuple[str, ...]
    cells: tuple[str, ...]
    cands: tuple[int, ...]

    def only(self, wanted: set[int]) -> Members:
        kept = [k for k, cand in enumerate(self.cands) if cand in wanted]
        return Members(tuple(self.runs[k] for k in kept), tuple(self.cells[k] for k in kept), tuple(self.cands[k] for k in kept))

    def cte(self) -> tuple[str, list[Any]]:
        """`m (run_id, cell_id, cand, k)`: a few dozen pairs, as parameters rather than a table; `k`, a
        pair's place in `pairs`' order, which is the order `choose` meets their rows in."""
        sql = (
            "m AS (SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS cell_id, unnest(?::INTEGER[]) AS cand, "
            "unnest(?::INTEGER[]) AS k)"
        )
        return sql, [list(self.runs), list(self.cells), list(self.cands), list(range(len(self.cands)))]


def identity(store: SqlResultsFile, alias: str = "") -> str:
    """A test's identity across the suite's releases in table `outcomes`, as the pin's rows name it (`rows.as_tests`)."""
    if "test_id" in clauses.columns(store, "outcomes"):
        return f"COALESCE(nullif({alias}test_id, ''), {alias}scenario)"
    return f"{alias}scenario"


#: The chosen tables whose tests' outcomes were read (`_read`), on the connection that holds them.
_READ: set[str] = set()


@contextmanager
def chosen_table(store: SqlResultsFile, tests: Sequence[str]) -> Iterator[str]:
    """The chosen tests as a temporary table (thousands: a table rather than as many `?`), each with
    `t`, its place in their order (`min(t)` is the smallest test); call inside `store.reading()`,
    where the table lives on one connection."""
    name = f"harness_pin_chosen_{uuid.uuid4().hex[:12]}"  # one a read: the dashboard's threads share a connection
    store.fetch(
        f"CREATE TEMP TABLE {name} AS SELECT test, (row_number() OVER (ORDER BY test))::INTEGER AS t "
        "FROM (SELECT DISTINCT unnest(?::VARCHAR[]) AS test)",
        [list(tests)],
    )
    try:
        yield name
    finally:
        if name in _READ:
            _READ.discard(name)
            store.fetch(f"DROP TABLE IF EXISTS {name}_rows")
            store.fetch(f"DROP TABLE IF EXISTS {name}_pairs")
        store.fetch(f"DROP TABLE IF EXISTS {name}")


def _read(store: SqlResultsFile, chosen: str) -> tuple[str, str]:
    """(`{chosen}_rows`, `{chosen}_pairs`): the chosen tests' outcomes read from `outcomes` once, on the
    first read that needs them, one row each: `p` (its (run, cell) pair, numbered in `{chosen}_pairs`),
    `t` (its test's in `chosen`), `repeat`, `ok` (it passed), `started_at`, and where it did not pass
    its `status`, `signature` and `message` (its first line). Dropped with `chosen`."""
    rows, pairs = f"{chosen}_rows", f"{chosen}_pairs"
    if chosen not in _READ:
        store.fetch(
            f"CREATE TEMP TABLE {pairs} AS SELECT run_id, cell_id, (row_number() OVER ())::INTEGER AS p "
            "FROM (SELECT DISTINCT run_id, cell_id FROM outcomes)"
        )
        _READ.add(chosen)
        bad = f"o.status <> '{Status.PASS.value}'"
        # the words of the few outcomes that did not pass come with them: few distinct, read at little cost
        store.fetch(
            f"""CREATE TEMP TABLE {rows} AS
            SELECT pr.p, c.t, o.repeat, NOT ({bad}) AS ok, o.started_at, CASE WHEN {bad} THEN o.status END AS status,
                   CASE WHEN {bad} THEN o.signature END AS signature,
                   CASE WHEN {bad} THEN split_part(o.message, chr(10), 1) END AS message
            FROM outcomes o JOIN {chosen} c ON c.test = {identity(store, "o.")} JOIN {pairs} pr USING (run_id, cell_id)"""
        )
    return rows, pairs


def _mapped(members: Members, pairs: str) -> tuple[str, list[Any]]:
    """CTEs `m` (`Members.cte`) and `mp`: `m` with each pair's number `p` in `pairs`."""
    m, params = members.cte()
    return f"{m}, mp AS (SELECT m.*, pr.p FROM m JOIN {pairs} pr USING (run_id, cell_id))", params


def pairs(store: SqlResultsFile, chosen: str, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per (run, cell) pair that `filters` (of runs and cells: an axis, platform, gpu; a
    `scenario` is left to `chosen`) admit and that holds an outcome of a chosen test,
    in the order `analysis.rows.by_cell` meets them in the pin's rows (by cell, then test, then run):
    the cell columns of `queries.loud_pin_rows`' rows (and `gpu_count`, the run's, as
    `pinning.with_machines` adds it), `outcomes`, `first` (the smallest chosen test), `earliest`
    and `latest` (when its chosen outcomes started) and `unstarted` (how many have no start time)."""
    host = "h.host_python" if clauses.column_or_null(store, "outcomes_v", "host_python") == "host_python" else "NULL AS host_python"
    read, numbered = _read(store, chosen)
    # the pairs numbered with the read are every pair of `outcomes`: admitted among them, not counted again
    ctes, params, _, _ = clauses.admitted_pairs({k: v for k, v in (filters or {}).items() if k != "scenario"}, among=numbered)
    rows = store.fetch(
        f"""
        WITH {ctes.strip()},
        h AS (SELECT run_id, host->>'python' AS host_python, json_extract(host, '$.gpu_count') AS gpu_count FROM runs),
        c AS ({clauses.cell_columns(store)}),
        n AS (
            SELECT p, count(*) AS outcomes, min(t) AS first, min(started_at) AS earliest, max(started_at) AS latest,
                   count(*) FILTER (started_at IS NULL) AS unstarted
            FROM {read} GROUP BY p
        ),
        o AS (
            SELECT pr.run_id, pr.cell_id, n.outcomes, ch.test AS first, n.earliest, n.latest, n.unstarted
            FROM n JOIN {numbered} pr USING (p) JOIN {chosen} ch ON ch.t = n.first
        )
        SELECT o.run_id, o.cell_id, a.gpu, a.platform, {host}, h.gpu_count,
               c.versions, c.installed, c.inherited, c.python, c.cuda_runtime, c.python_version,
               o.outcomes, o.first, o.earliest, o.latest, o.unstarted
        FROM o JOIN admitted a USING (run_id, cell_id) LEFT JOIN h USING (run_id) LEFT JOIN c USING (run_id, cell_id)
        ORDER BY o.cell_id, o.first, o.run_id
        """,
        params,
    )
    for row in rows:  # the run's host JSON as `recorded.runs` decodes it (2, "2", 2.0 read alike there)
        row["gpu_count"] = json.loads(row["gpu_count"]) if isinstance(row["gpu_count"], str) else row["gpu_count"]
    return rows


def _flaky(store: SqlResultsFile) -> str:
    """Table `flaky`, one row per (run, cell, test) as `queries.mark_flaky` reads it (a file without it: none)."""
    if store.has_table("flaky"):
        return "SELECT run_id, cell_id, test, any_value(reason) AS reason FROM flaky GROUP BY ALL"
    return "SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS cell_id, NULL::VARCHAR AS test, NULL::VARCHAR AS reason WHERE false"


def _rows(store: SqlResultsFile, tests: str) -> str:
    """CTEs `f` (the history's marks) and `o`: the outcomes of `tests` (a query of `test`) in pairs `m`, with
    their candidate and pair's place (`k`), `marked` and `flaky_across` (its reason) where marked, and whether it `passed`."""
    test = identity(store, "o.")
    return f"""f AS ({_flaky(store)}),
        o AS (
            SELECT m.cand, m.k, {test} AS test, o.run_id, o.cell_id, o.repeat, o.status, o.signature,
                   split_part(o.message, chr(10), 1) AS message, f.test IS NOT NULL AS marked, f.reason AS flaky_across,
                   o.status = '{Status.PASS.value}' AND f.test IS NULL AS passed
            FROM outcomes o JOIN m USING (run_id, cell_id) LEFT JOIN f ON f.run_id = o.run_id AND f.cell_id = o.cell_id AND f.test = {test}
            WHERE {test} IN ({tests})
        )"""


@contextmanager
def loud_table(store: SqlResultsFile, chosen: str, members: Members) -> Iterator[str]:
    """A temporary table of the chosen tests that do not pass in a candidate, one row per (`cand`,
    `test`): an outcome there did not pass, or the history marks one flaky across runs
    (`queries.mark_flaky`); with how many `outcomes` it has there, whether one is marked (`flaky`),
    and, where it has one outcome, its `status` and `run_id`, and where that one did not pass, its
    `signature` and `message`. The scenarios (no `::`, which a candidate without an outcome of them
    fails) have a row wherever they have an outcome (`bad` says whether they pass). The other chosen
    tests pass wherever they ran: a suite's `-m 'not slow'` at 2,000,000 outcomes keeps 73,000 rows."""
    name = f"harness_pin_loud_{uuid.uuid4().hex[:12]}"
    passed = Status.PASS.value
    read, numbered = _read(store, chosen)
    ctes, params = _mapped(members, numbered)
    # the history's marks of the chosen tests, by pair and test number
    marks = f"SELECT pr.p, ch.t FROM ({_flaky(store)}) x JOIN {numbered} pr USING (run_id, cell_id) JOIN {chosen} ch ON ch.test = x.test"
    # the tests that fail somewhere first (few outcomes do not pass): their outcomes then, not every chosen test's
    loud = f"""SELECT s.t FROM {read} s JOIN mp USING (p) WHERE NOT s.ok
            UNION SELECT f.t FROM f JOIN mp USING (p)
            UNION SELECT t FROM {chosen} WHERE strpos(test, '::') = 0"""
    store.fetch(
        f"""
        CREATE TEMP TABLE {name} AS
        WITH {ctes}, f AS ({marks}), loud AS ({loud}),
        g AS (
            SELECT mp.cand, s.t, count(*) AS outcomes, bool_or(f.t IS NOT NULL) AS flaky, bool_or(NOT s.ok OR f.t IS NOT NULL) AS bad,
                   any_value(s.p) AS p
            FROM {read} s SEMI JOIN loud USING (t) JOIN mp USING (p) LEFT JOIN f USING (p, t)
            GROUP BY mp.cand, s.t
        )
        SELECT g.cand, ch.test, g.outcomes, g.flaky, g.bad,
               CASE WHEN g.outcomes = 1 THEN COALESCE(one.status, '{passed}') END AS status, one.signature, one.message, pr.run_id
        FROM g JOIN {chosen} ch ON ch.t = g.t JOIN {numbered} pr ON pr.p = g.p
        -- the words of a test's one outcome there, joined after the grouping: not carried through it
        LEFT JOIN {read} one ON g.outcomes = 1 AND one.p = g.p AND one.t = g.t
        WHERE g.bad OR strpos(ch.test, '::') = 0
        """,
        params,
    )
    try:
        yield name
    finally:
        store.fetch(f"DROP TABLE IF EXISTS {name}")


def _failing(loud: str, chosen: str, members: Members) -> tuple[str, list[Any]]:
    """CTEs `m`, `bad` (cand, test): the chosen tests that do not pass in each candidate (an outcome
    that did not pass, or one marked flaky across runs) and `missing`: the scenarios without an outcome there."""
    m, params = members.cte()
    sql = f"""{m},
        bad AS (SELECT cand, test FROM {loud} WHERE bad),
        missing AS (
            SELECT k.cand, t.test FROM (SELECT DISTINCT cand FROM m) k, {chosen} t WHERE strpos(t.test, '::') = 0
            EXCEPT SELECT cand, test FROM {loud}
        ),
        failing AS (SELECT * FROM bad WHERE cand IN (SELECT cand FROM m) UNION ALL SELECT * FROM missing)"""
    return sql, params


def failing_counts(store: SqlResultsFile, loud: str, chosen: str, members: Members) -> dict[int, int]:
    """candidate -> how many chosen tests do not pass there (`Candidate.passes`); 0 for the qualifying."""
    ctes, params = _failing(loud, chosen, members)
    counts = dict.fromkeys(members.cands, 0)
    counts.update({int(c): int(n) for c, n in store.fetch_tuples(f"WITH {ctes} SELECT cand, count(*) FROM failing GROUP BY cand", params)})
    return counts


def failing_tests(store: SqlResultsFile, loud: str, chosen: str, members: Members) -> dict[str, int]:
    """chosen test -> in how many of the candidates it does not pass (those where it passes: not listed)."""
    ctes, params = _failing(loud, chosen, members)
    return {str(t): int(n) for t, n in store.fetch_tuples(f"WITH {ctes} SELECT test, count(*) FROM failing GROUP BY test", params)}


def evidence(store: SqlResultsFile, chosen: str, members: Members, runs: Sequence[str]) -> dict[str, tuple[int, tuple[str, ...]]]:
    """chosen test -> (its outcomes, its runs, sorted) in the candidate `members` pools; tests without
    one: not listed. runs: the candidate's; one run is every test's there (no list per test)."""
    read, numbered = _read(store, chosen)
    ctes, params = _mapped(members, numbered)
    listed = "NULL" if len(runs) <= 1 else "list(DISTINCT mp.run_id ORDER BY mp.run_id) FILTER (mp.run_id <> '')"
    sql = f"WITH {ctes} SELECT ch.test, count(*), {listed} FROM {read} s JOIN mp USING (p) JOIN {chosen} ch USING (t) GROUP BY ch.test"
    every = tuple(runs)
    return {str(t): (int(n), tuple(found) if found is not None else every) for t, n, found in store.fetch_tuples(sql, params)}


def first_at(store: SqlResultsFile, chosen: str, members: Members, minute: str) -> tuple[str, str] | None:
    """The (run, cell) of the first chosen outcome that started in `minute` (`rows.to_minute`), in
    the order `Candidate.all_rows` lists them (each test where its first pair holds it, then by
    pair and repeat): the row `choose` takes as the latest when the candidate's pairs tie."""
    read, numbered = _read(store, chosen)
    ctes, params = _mapped(members, numbered)
    sql = (
        f"WITH {ctes}, o AS (SELECT ch.test, mp.run_id, mp.cell_id, s.repeat, s.started_at, mp.k FROM {read} s "
        f"JOIN mp USING (p) JOIN {chosen} ch USING (t)) "
        "SELECT run_id, cell_id FROM (SELECT *, min(k) OVER (PARTITION BY test) AS first_k FROM o) "
        "WHERE COALESCE(strftime(started_at, '%Y-%m-%d %H:%M'), '') = ? ORDER BY first_k, test, k, repeat LIMIT 1"
    )
    found = next(store.fetch_tuples(sql, [*params, minute]), None)
    return (str(found[0]), str(found[1])) if found else None


@dataclass(frozen=True)
class Failures:
    """Why chosen tests do not pass in some candidates (`failures`).

    single: (test, status, signature, message) -> (the candidates, their runs): a failure of one outcome, no history of flakiness;
    rows: (candidate, test) -> the rows of every other failing test there (all its outcomes), as `Candidate.result` reads them;
    absent: (candidate, test) of scenarios with no outcome there."""

    single: Mapping[Single, tuple[tuple[int, ...], tuple[str, ...]]]
    rows: Mapping[tuple[int, str], list[dict[str, Any]]]
    absent: list[tuple[int, str]]


def failures(store: SqlResultsFile, loud: str, chosen: str, members: Members) -> Failures:
    """What `Failures` holds, for the candidates of `members`: read only where a test does not pass."""
    ctes, params = _failing(loud, chosen, members)
    mine = f"SELECT * FROM {loud} WHERE bad AND cand IN (SELECT cand FROM m)"
    single: dict[Single, tuple[tuple[int, ...], tuple[str, ...]]] = {}
    sql = (
        f"WITH {ctes} SELECT test, status, COALESCE(signature, ''), COALESCE(message, ''), list(cand ORDER BY cand), "
        f"list(run_id ORDER BY cand) FROM ({mine}) WHERE outcomes = 1 AND NOT flaky GROUP BY ALL"
    )
    for test, status, signature, message, cands, runs in store.fetch_tuples(sql, params):
        single[(str(test), str(status), str(signature), str(message))] = (tuple(map(int, cands)), tuple(map(str, runs)))
    others = [
        (int(c), str(t)) for c, t in store.fetch_tuples(f"WITH {ctes} SELECT cand, test FROM ({mine}) WHERE outcomes > 1 OR flaky", params)
    ]
    absent = [(int(c), str(t)) for c, t in store.fetch_tuples(f"WITH {ctes} SELECT cand, test FROM missing", params)]
    return Failures(single, _every_outcome(store, members.only({c for c, _ in others}), others), absent)


def _every_outcome(
    store: SqlResultsFile, members: Members, wanted: Sequence[tuple[int, str]]
) -> dict[tuple[int, str], list[dict[str, Any]]]:
    """(cand, test) -> every outcome of it there, for the few `wanted` (repeats, runs, marks): as `Candidate.result` reads them."""
    if not wanted:
        return {}
    m, params = members.cte()
    sql = (  # `choose`'s order: by pair, then repeat (a tie in `Counter.most_common` keeps the first)
        f"WITH {m}, w AS (SELECT unnest(?::INTEGER[]) AS cand, unnest(?::VARCHAR[]) AS test), "
        f"{_rows(store, 'SELECT test FROM w')} "
        "SELECT o.* EXCLUDE (passed) FROM o SEMI JOIN w USING (cand, test) ORDER BY cand, test, k, repeat"
    )
    rows: dict[tuple[int, str], list[Row]] = {}
    for row in store.fetch(sql, [*params, [c for c, _ in wanted], [t for _, t in wanted]]):
        if not row.pop("marked"):
            del row["flaky_across"]  # `mark_flaky` sets the key only on marked rows; `Candidate.result` asks whether it is there
        rows.setdefault((int(row["cand"]), str(row["test"])), []).append(row)
    return rows


def never_passed(store: SqlResultsFile, chosen: str, tests: Sequence[str], runs: Sequence[str] | None = None) -> list[str]:
    """The tests of `tests` (in their order; the table `chosen` holds them) without one outcome that
    passed in `runs` (None: in any run): what the Pin page names when nothing passes, asked of the
    chosen tests only rather than of every test on every machine (`pinning.passing_by_machine`, 1.3 s
    at 2,000,000 outcomes); of their outcomes as the pin read them, when it did (`_read`)."""
    if chosen in _READ:
        read, numbered = _read(store, chosen)
        where = "" if runs is None else f"AND s.p IN (SELECT p FROM {numbered} WHERE run_id IN (SELECT unnest(?::VARCHAR[])))"
        passed = f"SELECT s.t FROM {read} s WHERE s.ok {where}"
        sql = f"SELECT test FROM {chosen} ANTI JOIN ({passed}) USING (t)"
    else:
        test = identity(store)
        where = "" if runs is None else "AND run_id IN (SELECT unnest(?::VARCHAR[]))"
        # an anti join: the few chosen tests without a pass, not every test that passed (0.16 s, not 0.27, at 2,000,000 outcomes)
        passed = f"SELECT {test} AS test FROM outcomes WHERE status = '{Status.PASS.value}' {where}"
        sql = f"SELECT test FROM {chosen} ANTI JOIN ({passed}) USING (test)"
    never = {str(t) for (t,) in store.fetch_tuples(sql, [] if runs is None else [list(runs)])}
    return [t for t in tests if t in never]
