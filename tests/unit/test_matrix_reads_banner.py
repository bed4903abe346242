"""The Matrix page of a suite reads the banner's counts (`queries.overview`: at 2,000,000 outcomes a
scan of every node id) after its grid, so that the browser draws the grid meanwhile; the banner
says the same words, in the same place, as `data_banner` did; and a file with no outcomes, or one
that cannot be read, still stops the page first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from harness.storage import queries, store
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
def logged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the dashboard's store runs, in order."""
    seen: list[str] = []
    fetch = store.Store.fetch

    def logging(self: Store, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        seen.append(sql)
        return fetch(self, sql, params)

    monkeypatch.setattr(store.Store, "fetch", logging)
    return seen


def _open(path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    return run(AppTest.from_file(APP, default_timeout=60))


def test_the_banner_is_read_after_the_grid_and_says_what_it_said(
    suite_db: Path, monkeypatch: pytest.MonkeyPatch, logged: list[str]
) -> None:
    at = _open(suite_db, monkeypatch)
    overview = [i for i, sql in enumerate(logged) if OVERVIEW in sql]
    grid = [i for i, sql in enumerate(logged) if GRID in sql]
    assert overview and grid and max(grid) < min(overview), "the overview's scan runs after the grid's tallies"
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
