"""The Matrix page of a suite reads the banner's counts (`queries.overview`: at 2,000,000 outcomes a
scan of every node id) aside, on a connection of its own in a thread (`common.query_aside`), while
its own reads tally the files, and writes them into the banner last; the banner says the same words,
in the same place, as `data_banner` did; and a file with no outcomes, or one that cannot be read,
still stops the page first."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from harness.storage import attributed, queries, store
from harness.storage.store import Store
from tests.unit.test_dashboard_app import APP, run, suite_db

__all__ = ["suite_db"]  # the fixture, shared with test_dashboard_app
OVERVIEW = "count(DISTINCT scenario) AS scenarios FROM outcomes"  # the overview's scan
GRID = "count(*) AS tests"  # the grid's tallies


def _banner(path: Path) -> str:
    """The words `data_banner` always wrote for `path` (its format, from the overview)."""
    with Store(path, read_only=True) as held:
        o = queries.overview(held)
    first, last = str(o["first"])[:10], str(o["last"])[:10]
    span = f" · {first}" if first == last else f" · {first} … {last}"
    return (
        f"Data: **{path}** · {o['outcomes']:,} outcomes · {o['runs']} run(s) · {o['cells']} cell(s) · "
        f"{o['scenarios']} scenario(s) · {', '.join(o['gpus'])}{span} · {o['transitions']:,} stored transition(s)"
    )


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """Every SQL statement the dashboard's stores run, in order: (the thread's name, the store, the statement)."""
    seen: list[tuple[str, int, str]] = []
    fetch = store.Store.fetch

    def logging(self: Store, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        seen.append((threading.current_thread().name, id(self), sql))
        return fetch(self, sql, params)

    monkeypatch.setattr(store.Store, "fetch", logging)
    return seen


def _open(path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    return run(AppTest.from_file(APP, default_timeout=60))


def test_the_banner_is_read_aside_and_says_what_it_said(
    suite_db: Path, monkeypatch: pytest.MonkeyPatch, logged: list[tuple[str, int, str]]
) -> None:
    at = _open(suite_db, monkeypatch)
    overview = [(thread, held) for thread, held, sql in logged if OVERVIEW in sql]
    grid = [(thread, held) for thread, held, sql in logged if GRID in sql]
    aside = [held for thread, held in overview if thread == "query_aside harness.storage.queries.overview"]
    assert len(aside) == 1 and grid, "the banner's scan runs once, in its own thread"
    assert aside[0] not in {held for _, held in grid}  # on its own connection, not the page's held one
    with Store(suite_db, read_only=True) as held:
        computed = 0 if attributed.answers_current(held) else 1  # `edges_if_cheap` asks how many outcomes, uncached
    assert len(overview) == 1 + computed  # the banner's `fill` found it cached
    assert at.caption[0].value == _banner(suite_db)  # the first line of the page, whole
    assert "…" not in at.caption[0].value


def test_a_file_without_outcomes_stops_with_its_banner_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty.duckdb"
    Store(empty).close()
    at = _open(empty, monkeypatch)
    assert at.caption[0].value.startswith(f"Data: **{empty}** · 0 outcomes · 0 run(s)")
    assert [i.value for i in at.info] == [f"{empty} holds no outcomes yet: run `harness sweep --db {empty}`."]
    assert not at.dataframe


def test_a_file_that_cannot_be_read_stops_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "broken.duckdb"
    broken.write_text("not a database")
    at = _open(broken, monkeypatch)
    assert at.error and at.error[0].value.startswith(f"Cannot read {broken}: ")
    assert not at.caption and not at.dataframe
