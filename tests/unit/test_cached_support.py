"""The Support page's tables kept in the results file (`storage/cached.py`, `publish.keep_support`).

Real DuckDB files: a copy of the shipped results, and a suite made by make_large_store. What is
kept is used only while the file is as it was when they were computed; any write that changes
what they read (an outcome, a flaky mark, stored answers, a release list) makes readers compute
them again, and what they read back equals what they would compute.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.analysis.answer import answer_rows
from harness.analysis.support import support_tables, tables_from_json, tables_to_json
from harness.storage import cached
from harness.storage.store import Store
from harness.workflows import support as publish
from harness.workflows.answering import answer
from tests.unit.test_publish import LISTED, ROWS, SHIPPED

REPO = Path(__file__).resolve().parents[2]


def test_tables_come_back_from_json_equal() -> None:
    with Store(SHIPPED, read_only=True) as store:
        shipped, _ = publish._support_now(store)
    tables = (*support_tables(answer_rows(ROWS, LISTED)), *shipped)
    assert any(t.marked for t in tables) and any(not c.built for t in tables for c in t.columns)  # marks and gaps
    assert tables_from_json(tables_to_json(tables, "scenario")) == (tables, "scenario")


@pytest.fixture()
def shipped(tmp_path: Path) -> Path:
    db = tmp_path / "results.duckdb"
    shutil.copy(SHIPPED, db)
    return db


def _kept(db: Path) -> str | None:
    with Store(db, read_only=True) as store:
        return cached.read(store, publish.SUPPORT, cached.state_key(store))


def test_a_writer_keeps_them_and_readers_get_what_they_would_compute(shipped: Path) -> None:
    assert _kept(shipped) is None  # the shipped file keeps none: computed
    publish.keep_support_of(shipped)
    assert _kept(shipped) is not None
    with Store(shipped, read_only=True) as store:
        assert publish.support_of(store) == publish._support_now(store)


def test_any_change_they_read_makes_readers_compute_them_again(shipped: Path) -> None:
    publish.keep_support_of(shipped)
    with Store(shipped) as store:
        before = cached.state_key(store)
        store.replace_transitions([], scope="")  # the stored answers gone: the marks are computed again
        assert cached.state_key(store) != before
        assert cached.read(store, publish.SUPPORT, cached.state_key(store)) is None
        tables, _ = publish.support_of(store)
        assert tables == publish._support_now(store)[0]
    with Store(shipped) as store:
        with store.writing() as con:
            con.execute("INSERT INTO flaky VALUES ('r', 'c', 't', 's', 'why')")
        flaky = cached.state_key(store)
        with store.writing() as con:
            con.execute("UPDATE outcomes SET status = 'fail' WHERE rowid = (SELECT min(rowid) FROM outcomes)")
        assert cached.state_key(store) not in (flaky, before)


def test_a_merge_of_a_suite_keeps_them(tmp_path: Path) -> None:
    db, other = tmp_path / "suite.duckdb", tmp_path / "more.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "200", "--cells", "4"]
    subprocess.run([*made, "--out", str(db)], check=True, capture_output=True)
    subprocess.run([*made, "--out", str(other), "--runs", "2"], check=True, capture_output=True)
    merged = subprocess.run(
        [sys.executable, "-m", "harness", "merge", "--db", str(db), str(other)], capture_output=True, text=True, cwd=REPO
    )
    assert merged.returncode == 0, merged.stderr
    kept = _kept(db)
    assert kept is not None
    with Store(db, read_only=True) as store:
        assert tables_from_json(kept) == publish._support_now(store)


def test_a_sweep_that_finds_the_file_held_by_another_writer_goes_on_without_them(shipped: Path) -> None:
    # another writer's turn at the file (a second sweep folding into it), held for as long as the test needs
    hold = (
        "import sys\nfrom harness.storage.store import Store\n"
        "with Store(sys.argv[1]) as store, store.writing():\n    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(shipped)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        publish.keep_support_of(shipped)  # neither waits for the turn nor raises
        assert time.monotonic() - began < 30
    finally:
        holder.communicate("")
    assert _kept(shipped) is None


@pytest.mark.parametrize("suite", [False, True])
def test_after_attribute_the_page_decides_its_tables_in_sql_as_its_answer_would_make_them(tmp_path: Path, suite: bool) -> None:
    # attribute keeps no tables (it did: 2.3 s of 5.7 at 2,000,000 outcomes); with its answers
    # stored, the page decides them in DuckDB: they must be those the answer it stored makes
    db = tmp_path / "results.duckdb"
    if suite:
        made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "200", "--cells", "4", "--out", str(db)]
        subprocess.run(made, check=True, capture_output=True)
    else:
        shutil.copy(SHIPPED, db)
    publish.keep_support_of(db)  # a sweep's, before the answers change
    done = subprocess.run(
        [sys.executable, "-m", "harness", "attribute", "--offline", "--db", str(db)], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert _kept(db) is None  # the sweep's tables marked the answers before: not read
    with Store(db, read_only=True) as store:
        found = answer(store, loud=True)
        from_answer = publish._support_from(found, found.transitions)
        in_sql = publish._support_in_sql(store)
        assert in_sql is not None  # decided in DuckDB, not from every row
        assert in_sql == from_answer == publish.support_of(store)
        assert any(t.marked for t in in_sql[0]) or suite  # the shipped file's tables mark its answers


def test_the_published_page_shows_the_kept_tables_which_are_those_it_would_compute(shipped: Path) -> None:
    from harness.render.page import read_site, site_of

    with Store(shipped, read_only=True) as store:
        computed = site_of(answer(store, loud=True), "x")
    publish.keep_support_of(shipped)
    with Store(shipped, read_only=True) as store:
        assert publish.kept_support(store) == computed.tables != ()
        assert read_site(store, "x") == computed
    with Store(shipped) as store:  # what it shows is what the file kept, while current
        cached.write(store, publish.SUPPORT, cached.state_key(store), tables_to_json(computed.tables[:1], "scenario"))
    with Store(shipped, read_only=True) as store:
        assert read_site(store, "x").tables == computed.tables[:1]


def test_the_tables_made_with_only_the_stored_exact_answers_are_those_made_with_every_answer(shipped: Path) -> None:
    # `_support_now` reads the stored answers that can mark a table (exact ones), not every range
    with Store(shipped, read_only=True) as store:
        from harness.storage import attributed

        assert attributed.answers_current(store)
        found = answer(store, loud=True)
        assert publish._support_now(store) == publish._support_from(found, found.transitions)
        assert any(t.marked for t in publish._support_now(store)[0])


def test_only_the_exact_stored_answers_are_read_where_asked(shipped: Path) -> None:
    from harness.storage import attributed

    exact = {"scenario": "a", "signature": "E", "axis": "peft", "kind": "fixed", "before": "1", "after": "2", "held": {}}
    ranges = [{**exact, "scenario": "b", "untested": ["1.5"]}, {**exact, "scenario": "c", "inconclusive": ["1.5 (flaky 1/3)"]}]
    with Store(shipped) as store:
        store.replace_transitions([exact, *ranges], scope="x")
        assert [r["scenario"] for r in attributed.transitions(store, "x")] == ["a", "b", "c"]
        assert [r["scenario"] for r in attributed.transitions(store, "x", exact=True)] == ["a"]


def test_a_stamp_alone_keeps_no_table_and_costs_no_state_key(shipped: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `harness attribute` stamps its answers in table `cached`; a reader must not take that table
    # for kept Support tables and hash every outcome for a key (0.2 s at 2,000,000 outcomes).
    with Store(shipped) as store:
        store.replace_transitions(answer(store).to_rows(""), scope="")
        assert cached.stamped(store, "") is not None and not cached.holds(store, publish.SUPPORT)

        def hashed(_store: object) -> str:
            raise AssertionError("state_key read with no table kept")

        monkeypatch.setattr(cached, "state_key", hashed)
        assert publish.kept_support(store) is None
