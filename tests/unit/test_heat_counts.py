"""The published heatmap counted in DuckDB (`queries.heat_counts_aside`, `heatmap.from_counts`) says
what the rows say (`heatmap.from_rows`), and `Store.fetch_aside` reads in a thread only where that
sees what the store's own reads see.

Real DuckDB files: the quiet tests' table of cases (tests/unit/test_quiet.py: repeats, cells only
an older run has, skips and xfails, a test renamed between cells) and a suite of three nights made by
make_large_store (flaky tests, a file that stops importing).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.analysis import heatmap
from harness.analysis.outcome import Outcome, Status
from harness.render import page
from harness.storage import queries
from harness.storage.store import Store
from harness.workflows.answering import answer
from tests.unit.test_quiet import QUIET_CASES, _write, suite  # noqa: F401  (a fixture)

CASES = {
    **{name: (runs, {}) for name, (runs, _) in QUIET_CASES.items()},
    "a test renamed between cells": (
        {"r": {"c1": {"t.py::old": ["pass"], "u.py::b": ["fail"]}, "c2": {"t.py::new": ["pass", "error"], "u.py::b": ["pass"]}}},
        {"t.py::old": "t.py::a", "t.py::new": "t.py::a"},
    ),
}


def _both(db: Path, by_file: bool) -> tuple[object, object, object]:
    """(from the SQL counts, from the loud rows and their stand-in, from every row)."""
    group = page._file_of if by_file else None
    with Store(db, read_only=True) as store:
        loud = answer(store, loud=True)
        counted = queries.heat_counts_aside(store, by_file=by_file).result()
        every = queries.outcome_rows(store)
    return heatmap.from_counts(counted, loud.rows), heatmap.from_rows(loud.rows, group, loud.quiet), heatmap.from_rows(every, group)


@pytest.mark.parametrize("by_file", [False, True], ids=["by test", "by file"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_counts_in_sql_word_the_heatmap_as_the_rows_do(tmp_path: Path, case: str, by_file: bool) -> None:
    runs, test_ids = CASES[case]
    db = tmp_path / "r.duckdb"
    _write(db, runs, test_ids)
    counted, loud, every = _both(db, by_file)
    assert counted == loud == every
    names, columns, words = counted  # type: ignore[misc]
    assert names and columns and words  # something was said


def test_a_suites_counts_word_its_heatmap_and_page_as_its_rows_do(suite: Path) -> None:  # noqa: F811
    counted, loud, _ = _both(suite, by_file=True)
    assert counted == loud
    with Store(suite, read_only=True) as store:
        found = answer(store, loud=True)
        heat = queries.heat_counts_aside(store, by_file=True)
        assert page.site_of(found, "s", heat=heat) == page.site_of(found, "s")  # the page's status counts too
        kinds = {status for _, _, status, _ in heat.result()}
    assert {"pass", "fail", "xfail"} <= kinds  # the suite holds more than passes


def test_a_read_aside_runs_in_a_thread_of_its_own_on_a_readers_store(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {"c1": {"t.py::a": ["pass"]}}})
    seen: list[str] = []
    with Store(db, read_only=True) as store:
        original = store.fetch_tuples

        def spy(sql: str, params: object = ()) -> object:
            seen.append(threading.current_thread().name)
            return original(sql, params)  # type: ignore[arg-type]

        store.fetch_tuples = spy  # type: ignore[method-assign]
        assert store.fetch_aside("SELECT count(*) FROM outcomes").result() == [(1,)]
        assert seen == []  # not through the store's own reads: a connection of its own
        with store.reading():  # a view held: the rows must be that view's, read at once
            assert store.fetch_aside("SELECT count(*) FROM outcomes").result() == [(1,)]
        assert seen == [threading.current_thread().name]


def test_a_writers_read_aside_sees_what_it_wrote(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {"c1": {"t.py::a": ["pass"]}}})
    with Store(db) as store:
        store.add_outcome(Outcome("r", "c1", "t.py::b", 0, Status.PASS, started_at="2026-11-20T04:00:00"))
        assert store.fetch_aside("SELECT count(*) FROM outcomes").result() == [(2,)]


def test_a_read_aside_that_fails_raises_where_its_rows_are_asked_for(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {"c1": {"t.py::a": ["pass"]}}})
    with Store(db, read_only=True) as store:
        pending = store.fetch_aside("SELECT no_such_column FROM outcomes")
        with pytest.raises(Exception, match="no_such_column"):
            pending.result(timeout=30)


def test_a_read_aside_while_another_store_of_the_file_holds_a_view_reads_at_once(tmp_path: Path) -> None:
    # the file's lock is one per path and process: a thread waiting for it would wait forever here
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {"c1": {"t.py::a": ["pass"]}}})
    with Store(db, read_only=True) as one, Store(db, read_only=True) as other, one.reading():
        assert other.fetch_aside("SELECT count(*) FROM outcomes").result(timeout=30) == [(1,)]
