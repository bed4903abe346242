"""The History page in a real browser: five nights of a small suite in two cells, written through
the harness's own writer (tests/unit/test_timeline.py's `build`, with its table of nights), and a
cause stored for t_reg's regression in c1 as `harness explain` stores it.

- the list has a row per test, newest change first, and per cell a strip of one bar per run;
- a test's runs × cells chart has a square per run and cell and a mark on each change;
- its changes are listed with the stored cause, and the flaky flips say so;
- *changed in the last N runs* and *flaky across runs* narrow the list;
- selecting a row opens that test (`?test=`), a link you can share.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import _free_port, serving, streamlit_command
from tests.browser.test_dashboard_browser import settle
from tests.unit.test_timeline import CAUSE, E2, build, t

CHART = '[data-testid="stVegaLiteChart"]'
LIST = '[data-testid="stDataFrame"]'


@pytest.fixture(scope="module")
def history_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    db = build(tmp_path_factory.mktemp("history") / "history.duckdb")
    port = _free_port()
    with serving(streamlit_command(db, port), port, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture
def tab(browser: Any, history_server: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, base_url=history_server)
    page = context.new_page()
    page.set_default_timeout(45_000)
    try:
        yield page
    finally:
        context.close()


def open_history(page: Any, query: str = "") -> None:
    page.goto(f"/history{query}")
    page.get_by_role("heading", name="History", level=1).wait_for()
    settle(page)


def listed(page: Any, count: int, first: str) -> list[list[str]]:
    """The list's first `count` rows as text (test, changes, last change, failing now) once its first
    test is `first` (the list it replaced may still be on screen): its accessible mirror, as the
    grid is a canvas; the row markers, column 0, are left out of it."""
    grid = page.locator(LIST).first
    grid.wait_for()
    page.wait_for_function(
        "([list, first, n]) => { const g = document.querySelector(list);"
        " return g && (g.querySelector('#glide-cell-1-0') || {}).textContent === first && g.querySelector(`#glide-cell-1-${n - 1}`); }",
        arg=[LIST, first, count],
    )
    script = """(grid, n) => Array.from({length: n}, (_, r) => [1, 2, 3, 4].map(
        (c) => (grid.querySelector(`#glide-cell-${c}-${r}`) || {textContent: ''}).textContent))"""
    return list(grid.evaluate(script, count))


#: What each mark of a kind says in the test's chart (Vega's description of it: run, cell, status, …); legends say nothing.
_SAID = (
    "(kind) => Array.from(document.querySelectorAll(`%s svg .mark-${kind} path`))"
    ".map(p => p.getAttribute('aria-label') || '').filter(Boolean)"
)


def squares(page: Any) -> list[str]:
    """What each square of the test's chart says."""
    page.wait_for_selector(f"{CHART} svg .mark-rect path")
    return list(page.evaluate(_SAID % CHART, "rect"))


def marks(page: Any) -> list[str]:
    """What each change's triangle says."""
    return list(page.evaluate(_SAID % CHART, "symbol"))


def _said(descriptions: list[str], *parts: str) -> list[str]:
    return [d for d in descriptions if all(p in d for p in parts)]


def test_each_test_has_a_strip_per_cell_and_its_runs_with_the_changes_marked(tab: Any, screenshots: Path) -> None:
    open_history(tab)
    tab.get_by_text(re.compile(r"6 test\(s\) · 5 of 5 run\(s\), 2026-11-21 … 2026-11-25, oldest left · 2 cell\(s\)")).wait_for()
    rows = listed(tab, 6, t("t_gone"))
    # newest change first (night 5: t_gone left, t_flaky came back), then night 3's, then the tests that never changed
    assert [r[0].split("::")[1] for r in rows] == ["t_gone", "t_flaky", "t_reg", "t_fix", "t_new", "t_same"]
    assert rows[2][1:] == ["2", "night-3", "2"]  # t_reg: 2 changes (a cell each), last in night-3, failing in 2 cells now
    # one strip per cell (columns A and B), drawn as images in the grid
    assert tab.locator(f"{LIST} [role=columnheader]").filter(has_text=re.compile(r"^A$")).count() == 1
    tab.screenshot(path=str(screenshots / "history.png"), full_page=True)

    # the first row's runs × cells: t_gone passed four nights in both cells and was not collected on the fifth
    drawn = squares(tab)
    assert len(drawn) == 10, drawn  # 5 runs × 2 cells
    assert len(_said(drawn, "status: pass")) == 8 and len(_said(drawn, "run_id: night-5", "status: not_collected")) == 2
    assert len(_said(marks(tab), "run_id: night-5", "left the suite")) == 2


def test_a_tests_changes_are_listed_with_their_stored_cause(tab: Any, screenshots: Path) -> None:
    open_history(tab, f"?test={t('t_reg')}")
    tab.get_by_role("heading", name="t_reg").wait_for()
    drawn = squares(tab)
    assert len(_said(drawn, "status: pass")) == 4 and len(_said(drawn, "status: fail", E2.split(" @ ")[0])) == 6
    flips = marks(tab)
    assert len(flips) == 2 and len(_said(flips, "run_id: night-3", "started failing")) == 2  # in c1 and in c2
    tab.get_by_text("2 change(s) among the runs shown, newest first:").wait_for()
    changes = tab.locator(LIST).nth(1)
    changes.get_by_text(f"culprit: {CAUSE}").wait_for(state="attached")  # the cause stored for c1
    changes.get_by_text("not explained yet (`harness explain` narrows it)").wait_for(state="attached")  # c2 has none
    tab.screenshot(path=str(screenshots / "history-cause.png"), full_page=True)
    if os.environ.get("HARNESS_DOCS_SCREENSHOTS"):  # the picture of docs/dashboard.md (see test_docs_screenshots.py)
        tab.set_viewport_size({"width": 1440, "height": 1350})  # the list, the chart and the changes with their causes
        tab.wait_for_timeout(500)
        tab.screenshot(path=str(Path(os.environ["HARNESS_DOCS_SCREENSHOTS"]) / "history.jpg"), type="jpeg", quality=70)

    open_history(tab, f"?test={t('t_flaky')}")
    tab.get_by_role("heading", name="t_flaky").wait_for()
    assert len(_said(marks(tab), "cell_id: c1")) == 2  # failed on night 4, passed again on night 5: both marked
    tab.locator(LIST).nth(1).get_by_text("flaky (nothing changed)").first.wait_for(state="attached")


def test_the_filters_changed_in_the_last_n_runs_and_flaky(tab: Any, screenshots: Path) -> None:
    open_history(tab)
    box = tab.get_by_role("spinbutton", name="Changed in the last N runs")
    box.fill("1")
    box.press("Enter")
    tab.get_by_text(re.compile(r"^2 test\(s\) changed in the last 1 run\(s\)")).wait_for()
    settle(tab)
    assert [r[0].split("::")[1] for r in listed(tab, 2, t("t_gone"))] == ["t_gone", "t_flaky"]
    box.fill("3")
    box.press("Enter")
    tab.get_by_text(re.compile(r"^4 test\(s\) changed in the last 3 run\(s\)")).wait_for()
    settle(tab)

    tab.get_by_text("Flaky across runs", exact=True).click()
    tab.get_by_text(re.compile(r"^1 test\(s\) changed in the last 3 run\(s\), flaky across runs")).wait_for()
    settle(tab)
    assert [r[0].split("::")[1] for r in listed(tab, 1, t("t_flaky"))] == ["t_flaky"]
    tab.screenshot(path=str(screenshots / "history-filtered.png"), full_page=True)
    box.fill("0")
    box.press("Enter")
    tab.get_by_text(re.compile(r"^1 test\(s\) flaky across runs")).wait_for()


def test_selecting_a_row_opens_that_test(tab: Any) -> None:
    open_history(tab)
    listed(tab, 6, t("t_gone"))
    box = tab.locator(LIST).first.bounding_box()
    tab.mouse.click(box["x"] + 12, box["y"] + 35 + 34 * 3 + 17)  # the row marker of the fourth row: t_fix (header 35 px, rows 34)
    tab.get_by_role("heading", name="t_fix").wait_for()
    settle(tab)
    assert tab.url.endswith("?test=tests%2Ftest_pkg.py%3A%3At_fix")
    assert len(_said(marks(tab), "run_id: night-3", "fixed")) == 2
