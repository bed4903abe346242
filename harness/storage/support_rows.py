"""The Support page's tables decided in DuckDB (#48): each machine class's known-good cell, the
outcomes of its lines' cells counted by (row, cell, status), and the exact answers a table marks.

`workflows.support` read every loud row into Python for them (`answering.answer`), chose each
class's known-good set there (`analysis.knowngood`) and counted the lines' squares (6.7 s at
2,000,000 outcomes). Here the same decisions are aggregates of table `outcomes`:

- **the known-good cell** (`Reading.known_good`): a class's *wanted* tests pass somewhere on it; a
  *candidate* is a set of its (run, cell)s with one installed freeze (`Candidate`); a wanted test
  is *missed* in a candidate where a row of it there did not pass or is flaky across runs, or
  where it has no row and was not merely not collected (`Candidate._absent`). `drop_order` then
  drops the test missed in the most candidates (the first by name on a tie) until a candidate
  misses none. While no candidate loses every wanted row before the last drop, each test's count
  stays as it started, so the drops are the tests ranked by (count desc, name) up to the first
  rank at which some candidate has lost all its misses: one query (a candidate that loses its last
  row with the last drop goes, as `knowngood._narrowed` drops it). Where that does not hold (a
  candidate left with no row before the last drop, or none left that misses nothing; a dropped
  file that could keep a test from being collected; fewer than two tests left; more than 127
  (run, cell)s) the answer is None and the caller decides in Python, as before.
- **the squares** (`Reading.square_counts`): a line cell's outcomes by (row, status), the row a
  test or its group (`rows.group_of`, stated in SQL as `_GROUP`); a test whose every row passed,
  one in each (run, cell), counted from the same read as the known-good choice (most of a suite).
- **the marks** (`line_transitions`): the stored exact answers between two cells of a line.

Every rule is held to its Python original by tests of tables of cases (tests/unit/test_support_sql_*.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from harness.analysis.rows import GRID_ROWS
from harness.analysis.status import FAILURES, Status
from harness.storage import clauses
from harness.storage.resultsfile import SqlResultsFile

#: A (run, cell) is one bit of a test's mask (`known_good`): more of them, and Python decides.
MAX_PAIRS = 127  # a HUGEINT's bits but its sign

#: `rows.group_of` of `{t}` (a test's identity): its text up to the second `::` (file::Class),
#: else up to the first (its file); a scenario (no `::`) is its own group.
_GROUP = (
    "CASE WHEN strpos({t}, '::') > 0 AND strpos(substr({t}, strpos({t}, '::') + 2), '::') > 0 "
    "THEN substr({t}, 1, strpos({t}, '::') + strpos(substr({t}, strpos({t}, '::') + 2), '::')) "
    "ELSE split_part({t}, '::', 1) END"
)

#: Statuses of a file's (or paths') row that kept its tests from being collected (`candidates.breaks_collection`).
_BREAKS = ", ".join(f"'{s.value}'" for s in sorted({*FAILURES, Status.INCONCLUSIVE}, key=lambda s: s.value))


@dataclass(frozen=True)
class Pair:
    """A (run, cell) with outcomes: its machine class and its candidate (None: no installed versions)."""

    run_id: str
    cell_id: str
    machine: str
    candidate: int | None


@dataclass(frozen=True)
class KnownGood:
    """`known_good`'s answer: per machine class with a wanted test, its choice; and whether the
    file's tests are a suite's (`rows.names_are_suite` of every identity), from the same read."""

    classes: dict[str, Misses]
    suite: bool


@dataclass(frozen=True)
class Misses:
    """One machine class's known-good choice as DuckDB worked it out (`known_good`)."""

    wanted: int  # tests that pass somewhere on the class
    last: dict[int, int]  # joined candidate -> the rank of its last missed test (0: misses none)
    stop: int  # how many tests are dropped: the least `last`
    joined: dict[int, tuple[str, ...]]  # joined candidate -> the cell ids of its (run, cell)s left with a wanted row


def identity(store: SqlResultsFile, alias: str = "") -> str:
    """A test's identity across the suite's releases in table `outcomes` (`rows.as_tests`, as `outcomes_v` reads it)."""
    if "test_id" in clauses.columns(store, "outcomes"):
        return f"COALESCE(nullif({alias}test_id, ''), {alias}scenario)"
    return f"{alias}scenario"


def cell_rows(store: SqlResultsFile) -> list[dict[str, Any]]:
    """One row of `outcomes_v` per (run, cell) with outcomes (its cell's and run's columns), in
    the order `rows.by_cell` meets them in a read of every row: by cell, then by the first outcome
    of each of its runs (asked only of a cell that ran in several)."""
    # any outcome of a (run, cell) carries its columns: the first stored, found without reading a test's name
    one = "SELECT run_id, cell_id, scenario, repeat FROM outcomes WHERE rowid IN (SELECT min(rowid) FROM outcomes GROUP BY run_id, cell_id)"
    rows = store.fetch(f"SELECT v.* FROM outcomes_v v SEMI JOIN ({one}) one USING (run_id, cell_id, scenario, repeat)")
    runs: dict[str, int] = {}
    for row in rows:
        runs[str(row["cell_id"])] = runs.get(str(row["cell_id"]), 0) + 1
    again = sorted(c for c, n in runs.items() if n > 1)
    first: dict[tuple[str, str], tuple[Any, ...]] = {}
    if again:
        marks = ", ".join("?" for _ in again)
        sql = f"SELECT run_id, cell_id, min((scenario, repeat)) AS first FROM outcomes WHERE cell_id IN ({marks}) GROUP BY ALL"
        for r in store.fetch(sql, again):
            value = r["first"]  # a struct: a dict, or a tuple where DuckDB did not name its fields
            first[(str(r["run_id"]), str(r["cell_id"]))] = tuple(value.values()) if isinstance(value, dict) else tuple(value)
    at = {(str(r["run_id"]), str(r["cell_id"])): r for r in rows}
    return [at[k] for k in sorted(at, key=lambda k: (k[1], *first.get(k, ("", 0)), k[0]))]


@contextmanager
def _temp(store: SqlResultsFile, names: Sequence[str]) -> Iterator[dict[str, str]]:
    """Temporary tables of one read, by name, unique to it (the dashboard's threads share a connection); dropped after."""
    tag = uuid.uuid4().hex[:12]
    tables = {name: f"harness_support_{name}_{tag}" for name in names}
    try:
        yield tables
    finally:
        for table in tables.values():
            store.fetch(f"DROP TABLE IF EXISTS {table}")


def _values(pairs: Sequence[Pair]) -> tuple[str, list[Any]]:
    """`pairs` as a VALUES list (run_id, cell_id, machine, candidate, pair) and its parameters."""
    marks = ", ".join("(?, ?, ?, ?::INTEGER, ?::INTEGER)" for _ in pairs)
    params = [v for i, p in enumerate(pairs) for v in (p.run_id, p.cell_id, p.machine, p.candidate, i)]
    return f"(VALUES {marks}) AS p(run_id, cell_id, machine, cand, pair)", params


@contextmanager
def reading(store: SqlResultsFile, pairs: Sequence[Pair]) -> Iterator[Reading | None]:
    """One read of the file's outcomes by (run, cell) (`pairs`, in order) for the Support page: each
    class's tests, read once for the known-good choice and the squares; None where there are more
    (run, cell)s than a test's mask holds (Python decides)."""
    if not pairs or len(pairs) > MAX_PAIRS:
        yield None
        return
    with store.reading(), _temp(store, ["p", "t", "np", "miss", "ranked"]) as tmp:
        values, params = _values(pairs)
        store.fetch(f"CREATE TEMP TABLE {tmp['p']} AS SELECT * FROM {values}", params)
        _tests(store, tmp)
        yield Reading(store, tmp, pairs)


#: A test of a class whose every row passed, one in each (run, cell) it ran in (most of a suite's):
#: a pass in each (run, cell) of its mask, counted without reading its rows again.
_SIMPLE = "clean AND n = bit_count(mask)"


class Reading:
    """The temporary tables of one `reading`, and the questions asked of them."""

    def __init__(self, store: SqlResultsFile, tmp: dict[str, str], pairs: Sequence[Pair]) -> None:
        self.store, self.tmp, self.pairs = store, tmp, pairs

    def known_good(self) -> KnownGood | None:
        """Per machine class with a wanted test: its candidates' misses and how many tests are dropped
        (see the module docstring); None where the drops could depend on more than that (Python decides)."""
        store, tmp = self.store, self.tmp
        _missed(store, tmp)
        chosen = _choices(store, tmp, self.pairs)
        if chosen is None:
            return None
        found, at = chosen
        stops = {m: c.stop for m, c in found.items()}
        before = _kept(store, tmp, {m: max(n - 1, 0) for m, n in stops.items()})  # before the last drop
        after = _kept(store, tmp, stops)
        if before is None or after is None:
            return None
        for machine, choice in found.items():
            left = {}
            for c, idx in at[machine].items():
                if not any(before.get(machine, 0) >> i & 1 for i in idx):  # no row left before the last drop: counts changed
                    return None
                cells = tuple(self.pairs[i].cell_id for i in idx if after.get(machine, 0) >> i & 1)
                if cells:  # its (run, cell)s left with a row (`Candidate.cell_id`); none: it goes with the last drop (`_narrowed`)
                    left[c] = cells
            if choice.stop and not any(choice.last[c] <= choice.stop for c in left):  # drop_order would drop on
                return None
            found[machine] = replace(choice, joined=left, last={c: choice.last[c] for c in left})
        row = store.fetch(f"SELECT count(DISTINCT test) AS n, bool_or(contains(test, '::')) AS node FROM {tmp['t']}")[0]
        return KnownGood(found, int(row["n"]) > GRID_ROWS and bool(row["node"]))

    def square_counts(self, lined: Sequence[int], suite: bool) -> list[tuple[str, str, str, str, int]]:
        """(machine class, cell id, row, status, outcomes) of the (run, cell)s `lined` (indexes into
        the pairs: the lines' cells), one or more per (class, cell, row, status), to be added up: the
        row a test's identity, or its group (`rows.group_of`) where the file is a suite."""
        if not lined:
            return []
        store, t, pairs = self.store, self.tmp["t"], self.pairs
        found = []
        row_of = _GROUP.format(t="test") if suite else "test"
        sql = f"SELECT machine, {row_of} AS row, mask, count(*) AS n FROM {t} WHERE {_SIMPLE} GROUP BY ALL"
        for machine, row, mask, n in (tuple(r.values()) for r in store.fetch(sql)):  # `fetch`: a mask as an int, not a float
            found += [
                (machine, pairs[i].cell_id, row, Status.PASS.value, n) for i in lined if mask >> i & 1 and pairs[i].machine == machine
            ]
        test = identity(store, "o.")
        marks = ", ".join("?" for _ in lined)
        sql = (
            f"SELECT p.machine, o.cell_id, {_GROUP.format(t=test) if suite else test} AS row, o.status, count(*) FROM outcomes o "
            f"JOIN {self.tmp['p']} p USING (run_id, cell_id) SEMI JOIN (SELECT machine, test FROM {t} WHERE NOT ({_SIMPLE})) l "
            f"ON l.machine = p.machine AND l.test = {test} WHERE p.pair IN ({marks}) GROUP BY ALL"
        )
        return found + [(str(m), str(c), str(r), str(s), int(n)) for m, c, r, s, n in store.fetch_tuples(sql, list(lined))]


def _tests(store: SqlResultsFile, tmp: dict[str, str]) -> None:
    """Each class's tests: whether one passed there, and in which (run, cell)s it has rows (a bit
    each); and the rows that did not pass, or are flaky across runs (the few that say something)."""
    test, p = identity(store, "o."), tmp["p"]
    store.fetch(
        f"CREATE TEMP TABLE {tmp['t']} AS SELECT p.machine, {test} AS test, bool_or(o.status = 'pass') AS passed, "
        f"bool_and(o.status = 'pass') AS clean, count(*) AS n, "
        f"bit_or(1::HUGEINT << p.pair) AS mask FROM outcomes o JOIN {p} p USING (run_id, cell_id) GROUP BY ALL"
    )
    flaky = ""
    if store.has_table("flaky"):  # a flaky test's rows are no clean pass (`Candidate.clean`), whatever their status
        flaky = (
            f"UNION ALL SELECT p.machine, p.cand, p.pair, f.test, 'flaky' FROM flaky f JOIN {p} p USING (run_id, cell_id) "
            f"JOIN {tmp['t']} t ON t.machine = p.machine AND t.test = f.test WHERE (t.mask >> p.pair) & 1 = 1"
        )
    store.fetch(
        f"CREATE TEMP TABLE {tmp['np']} AS SELECT p.machine, p.cand, p.pair, {test} AS test, o.status "
        f"FROM outcomes o JOIN {p} p USING (run_id, cell_id) WHERE o.status <> 'pass' {flaky}"
    )


#: The (class, candidate, test) a wanted test is missed in (`Candidate.passes`, negated): a row of it
#: there did not pass; or it has none there, and it is no node id, or what would have collected it
#: failed there (`Candidate._absent`, `candidates._covers`: a failed file, folder or paths of the
#: class's tests that pass nowhere on it).
_MISSED = """
    CREATE TEMP TABLE {miss} AS
    WITH w AS (SELECT machine, test, mask FROM {t} WHERE passed),
    cands AS (  -- the candidates some wanted row joined, with the (run, cell)s of each
        SELECT machine, cand, bit_or(1::HUGEINT << pair) AS mask FROM {p} WHERE cand IS NOT NULL GROUP BY ALL
    ),
    every AS (SELECT machine, bit_or(mask) AS mask FROM w GROUP BY ALL),
    joined AS (SELECT c.machine, c.cand, c.mask FROM cands c JOIN every e USING (machine) WHERE e.mask & c.mask <> 0),
    everywhere AS (SELECT machine, bit_or(mask) AS mask FROM joined GROUP BY ALL),
    parts AS (  -- what kept tests from being collected in each candidate, each of its paths
        SELECT DISTINCT n.machine, n.cand, s.part FROM {np} n ANTI JOIN w USING (machine, test),
        unnest(string_split(n.test, ' ')) AS s(part)
        WHERE n.cand IS NOT NULL AND NOT contains(n.test, '::') AND n.status IN ({breaks})
    ),
    failed AS (SELECT DISTINCT n.machine, n.cand, n.test FROM {np} n SEMI JOIN w USING (machine, test) WHERE n.cand IS NOT NULL),
    absent AS (
        SELECT w.machine, j.cand, w.test FROM w JOIN everywhere a USING (machine) JOIN joined j USING (machine)
        WHERE w.mask & a.mask <> a.mask AND w.mask & j.mask = 0  -- most tests ran in every candidate: none is absent
        AND (NOT contains(w.test, '::') OR EXISTS (
            SELECT 1 FROM parts x WHERE x.machine = w.machine AND x.cand = j.cand
            AND (x.part IN ('.', '') OR starts_with(w.test, x.part || '::') OR starts_with(w.test, rtrim(x.part, '/') || '/'))
        ))
    )
    SELECT * FROM failed UNION ALL SELECT * FROM absent
"""


def _missed(store: SqlResultsFile, tmp: dict[str, str]) -> None:
    store.fetch(_MISSED.format(miss=tmp["miss"], t=tmp["t"], p=tmp["p"], np=tmp["np"], breaks=_BREAKS))
    # drop_order's heap: the test missed in the most candidates first, the first by name on a tie
    store.fetch(
        f"CREATE TEMP TABLE {tmp['ranked']} AS SELECT machine, test, "
        f"row_number() OVER (PARTITION BY machine ORDER BY count(*) DESC, test) AS rank FROM {tmp['miss']} GROUP BY machine, test"
    )


def _choices(
    store: SqlResultsFile, tmp: dict[str, str], pairs: Sequence[Pair]
) -> tuple[dict[str, Misses], dict[str, dict[int, list[int]]]] | None:
    """Per class: its wanted tests, its joined candidates' last missed rank, the drops; and each
    joined candidate's (run, cell)s with a wanted row (indexes into `pairs`)."""
    t, miss, ranked = tmp["t"], tmp["miss"], tmp["ranked"]
    sql = f"SELECT machine, count(*) AS n, bit_or(mask) AS mask FROM {t} WHERE passed GROUP BY ALL"
    wanted, masks = {}, {}
    for r in store.fetch(sql):
        wanted[str(r["machine"])], masks[str(r["machine"])] = int(r["n"]), int(r["mask"])
    joined: dict[str, dict[int, list[int]]] = {}  # a candidate joins with its (run, cell)s that have a wanted row
    for i, pair in enumerate(pairs):
        if pair.candidate is not None and masks.get(pair.machine, 0) >> i & 1:
            joined.setdefault(pair.machine, {}).setdefault(pair.candidate, []).append(i)
    last: dict[str, dict[int, int]] = {m: dict.fromkeys(c, 0) for m, c in joined.items()}
    sql = f"SELECT m.machine, m.cand, max(r.rank) AS last FROM {miss} m JOIN {ranked} r USING (machine, test) GROUP BY ALL"
    for r in store.fetch(sql):
        if int(r["cand"]) in last.get(str(r["machine"]), {}):
            last[str(r["machine"])][int(r["cand"])] = int(r["last"])
    found = {}
    for machine, n in wanted.items():
        mine = last.get(machine, {})
        stop = min(mine.values(), default=0)
        if stop > n - 1:  # drop_order stops with one test left: fewer than it would drop here
            return None
        found[machine] = Misses(n, mine, stop, {})
    return found, {m: joined.get(m, {}) for m in found}


def _kept(store: SqlResultsFile, tmp: dict[str, str], stops: dict[str, int]) -> dict[str, int] | None:
    """Per class, the (run, cell)s (a mask) left with a wanted row that is not dropped; None where a
    dropped test is a file (or paths) that covers a wanted test: where it failed, `knowngood._narrowed`
    counts it as what kept that test from being collected, which `_choices` did not rank."""
    if not stops:
        return {}
    t, ranked = tmp["t"], tmp["ranked"]
    limits = " UNION ALL ".join("SELECT ? AS machine, ?::BIGINT AS stop" for _ in stops)
    params = [v for m, s in stops.items() for v in (m, s)]
    dropped = f"SELECT r.machine, r.test FROM {ranked} r JOIN ({limits}) s USING (machine) WHERE r.rank <= s.stop"
    # a dropped file (no `::`) could keep a wanted test from being collected (`candidates._covers`)
    covering = (
        f"SELECT count(*) AS n FROM ({dropped}) d, unnest(string_split(d.test, ' ')) AS s(part) WHERE NOT contains(d.test, '::') "
        f"AND EXISTS (SELECT 1 FROM {t} w WHERE w.machine = d.machine AND w.passed AND contains(w.test, '::') AND (part IN ('.', '') "
        "OR starts_with(w.test, part || '::') OR starts_with(w.test, rtrim(part, '/') || '/')))"
    )
    if store.fetch(covering, params)[0]["n"]:
        return None
    sql = f"SELECT t.machine, bit_or(t.mask) AS mask FROM {t} t ANTI JOIN ({dropped}) d USING (machine, test) WHERE t.passed GROUP BY ALL"
    return {str(r["machine"]): int(r["mask"]) for r in store.fetch(sql, params)}


def line_transitions(store: SqlResultsFile, lines: Sequence[tuple[str, str, Sequence[str]]]) -> list[dict[str, Any]]:
    """The stored exact answers of all runs (`attributed.transitions(store, "", exact=True)`, the
    columns a table reads of them) along a line's library, on its machine, between two of its
    cells, in attribution's order: of `lines` (library, machine, cell ids), the only ones a table
    can mark (`support._marks`)."""
    if not store.has_table("transitions") or not lines:
        return []
    machine = "COALESCE(machine, '')" if "machine" in clauses.columns(store, "transitions") else "''"
    on, params = [], []
    for library, host, cells in lines:
        ids = ", ".join("?" for _ in cells)
        on.append(f"(axis = ? AND {machine} = ? AND before_cell IN ({ids}) AND after_cell IN ({ids}))")
        params += [library, host, *cells, *cells]
    # the columns a mark reads (`support._marks`, `Transition.headline`); an exact answer's lists are empty
    sql = (
        f"SELECT scenario, axis, kind, before, after, {machine} AS machine, before_cell, after_cell FROM transitions "
        "WHERE scope = '' "
        "AND COALESCE(untested, 'null') IN ('[]', 'null') AND COALESCE(inconclusive, 'null') IN ('[]', 'null') "
        f"AND ({' OR '.join(on)}) ORDER BY scope, scenario, seq"
    )
    return store.fetch(sql, params)
