"""A large suite's Matrix in a real browser: past FOLD_PAST files, the files that say something, and a line for the rest.

The file holds 150 test files of 4 tests each in two cells: tests/test_mod000.py … 009 error in
the newer transformers (their squares change colour), 010 … 014 fail in both cells, and the 135
others pass in both (one of their tests is skipped, which a pass beside it does not colour). The
heatmap and the file table draw the 15 that fail somewhere and fold the 135 into one line with
their counts; the search still finds a file that passes everywhere; *show every file* draws all 150.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboard.grouping import FOLD_PAST
from harness.analysis.outcome import CellRecord
from harness.storage.store import OUTCOME_COLUMNS, Store
from tests.browser.conftest import _free_port, serving, streamlit_command
from tests.browser.test_dashboard_browser import settle
from tests.browser.test_suite_browser import grid_rows, search

HEATMAP = '[data-testid="stVegaLiteChart"]'
CELLS = {"5.6.2": "torch2.13.0-tf5.6.2-acc1.13.0", "5.23.0": "torch2.13.0-tf5.23.0-acc1.13.0"}
FILES = 150
LINE = "… 135 file(s) pass in every cell"


def status(f: int, t: int, transformers: str) -> str:
    if f < 10 and t == 0 and transformers == "5.23.0":
        return "error"  # changes between the cells
    if 10 <= f < 15 and t == 0:
        return "fail"  # the same in both
    return "not_applicable" if t == 3 else "pass"


def build(path: Path) -> Path:
    import pandas as pd

    rows = []
    with Store(path) as store:
        store.ensure_run("suite", "matrix.toml", "", {}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0})
        for transformers, cell in CELLS.items():
            versions = {"torch": "2.13.0", "transformers": transformers, "accelerate": "1.13.0"}
            store.record_cell(CellRecord("suite", cell, "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
            for f in range(FILES):
                for t in range(4):
                    row = {c: "" for c in OUTCOME_COLUMNS}
                    row.update(run_id="suite", cell_id=cell, scenario=f"tests/test_mod{f:03d}.py::TestA::test_{t}", repeat=0)
                    row.update(status=status(f, t, transformers), seconds=0.1, metrics="{}", first_run=None, seconds_before=None)
                    row.update(started_at=pd.Timestamp("2026-11-20T10:00:00"))
                    rows.append(row)
        store.con.from_df(pd.DataFrame(rows, columns=list(OUTCOME_COLUMNS))).insert_into("outcomes")
    return path


@pytest.fixture(scope="module")
def fold_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    db = build(tmp_path_factory.mktemp("fold") / "suite.duckdb")
    port = _free_port()
    with serving(streamlit_command(db, port), port, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture
def tab(browser: Any, fold_server: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, base_url=fold_server)
    page = context.new_page()
    page.set_default_timeout(45_000)
    try:
        yield page
    finally:
        context.close()


def heatmap_rows(page: Any) -> set[str]:
    """The row names the heatmap drew (SVG text: at this size Vega draws SVG)."""
    page.wait_for_selector(f"{HEATMAP} svg .mark-rect path")
    return set(page.evaluate(f"() => Array.from(document.querySelectorAll('{HEATMAP} svg text')).map(t => t.textContent)"))


def test_the_files_that_pass_everywhere_are_one_line(tab: Any, screenshots: Path) -> None:
    assert FILES > FOLD_PAST > 15
    tab.goto("/")
    tab.get_by_text(re.compile(r"600 test\(s\) in 150 file\(s\) × 2 cell\(s\)")).wait_for()  # the counts count every file
    settle(tab)
    tab.get_by_text(re.compile(r"15 of 150 file\(s\) drawn one row each")).wait_for()

    drawn = heatmap_rows(tab)
    assert {f"tests/test_mod{f:03d}.py" for f in range(15)} | {LINE} <= drawn
    assert not {f"tests/test_mod{f:03d}.py" for f in range(15, FILES)} & drawn  # the passing files are folded

    rows = grid_rows(tab, 16, "tests/test_mod000.py")
    assert [r[0] for r in rows] == [*(f"tests/test_mod{f:03d}.py" for f in range(15)), LINE]
    assert rows[0][2:] == ["pass 3 · not_applicable 1", "error 1 · pass 2 · not_applicable 1"]
    assert rows[10][2:] == ["fail 1 · pass 2 · not_applicable 1"] * 2
    assert rows[15][1:] == ["540", "pass 405 · not_applicable 135", "pass 405 · not_applicable 135"]  # 135 files × 4 tests
    assert not tab.locator("#glide-cell-0-16").count()  # nothing below the line
    tab.screenshot(path=str(screenshots / "suite-folded.png"), full_page=True)

    search(tab, "test_mod123.py")  # a file that passes everywhere: the search finds it
    tab.get_by_text(re.compile(r"4 test\(s\) matching test_mod123.py in 1 file\(s\)")).wait_for()
    assert "tests/test_mod123.py" in heatmap_rows(tab)
    assert grid_rows(tab, 1, "tests/test_mod123.py")[0][1] == "4"
    search(tab, "TestA")  # every file again: folded again
    tab.get_by_text(re.compile(r"600 test\(s\) matching TestA in 150 file\(s\)")).wait_for()
    grid_rows(tab, 16, "tests/test_mod000.py")

    grid = tab.locator('[data-testid="stDataFrame"]:visible').first
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    tab.mouse.click(box["x"] + 150, box["y"] + 35 + 35 * 15 + 17)  # select the line (row 15, after a 35 px header)
    settle(tab)
    # where the line was, the next file (the grid shows ~17 rows at a time: its mirror holds those)
    tab.wait_for_function("() => (document.getElementById('glide-cell-0-15') || {}).textContent === 'tests/test_mod015.py'")
    rows = grid_rows(tab, 16, "tests/test_mod000.py")
    assert [r[0] for r in rows] == [f"tests/test_mod{f:03d}.py" for f in range(16)]
    drawn = heatmap_rows(tab)
    assert LINE not in drawn and {f"tests/test_mod{f:03d}.py" for f in range(FILES)} <= drawn
    assert tab.locator('label:has-text("show every file (150)") input').is_checked()  # the line turned the toggle on

    tab.get_by_text("show every file (150)").click()  # folded again: the line is not still selected
    settle(tab)
    tab.wait_for_function(f"() => (document.getElementById('glide-cell-0-15') || {{}}).textContent === {LINE!r}")
    assert LINE in heatmap_rows(tab)
    assert tab.get_by_role("combobox", name="File", exact=True).input_value() == "every file (150)"  # the click chose no file
