"""A test suite's results in the dashboard, in a real browser: grouped by file then class, and searchable.

The file holds 3,000 pytest node ids (30 files × [TestAlpha 40, TestBeta 40, 20 module-level
functions]) in two cells; TestBeta of tests/test_mod07.py errors in the newer transformers.
Written in bulk (one INSERT), as `benchmarks/make_large_store.py` does: 6,000 `add_outcome`
calls would cost the test most of its time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.outcome import CellRecord
from harness.storage.store import OUTCOME_COLUMNS, Store
from tests.browser.conftest import _free_port, serving, streamlit_command
from tests.browser.test_dashboard_browser import settle

SIG = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
CELLS = {"5.6.2": "torch2.13.0-tf5.6.2-acc1.13.0", "5.23.0": "torch2.13.0-tf5.23.0-acc1.13.0"}


def node_ids() -> list[str]:
    ids = []
    for f in range(30):
        path = f"tests/test_mod{f:02d}.py"
        ids += [f"{path}::TestAlpha::test_case_{i}[cpu]" for i in range(40)]
        ids += [f"{path}::TestBeta::test_merge_{i}[4bit]" for i in range(40)]
        ids += [f"{path}::test_fn_{i}" for i in range(20)]
    return ids


def failing(node: str, transformers: str) -> bool:
    return node.startswith("tests/test_mod07.py::TestBeta::") and transformers == "5.23.0"


def build_suite(path: Path) -> Path:
    import pandas as pd

    rows = []
    with Store(path) as store:
        store.ensure_run("suite", "matrix.toml", "", {}, "0.1.0", {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0})
        for transformers, cell in CELLS.items():
            versions = {"torch": "2.13.0", "transformers": transformers, "accelerate": "1.13.0"}
            store.record_cell(CellRecord("suite", cell, "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
            for node in node_ids():
                bad = failing(node, transformers)
                row = {c: "" for c in OUTCOME_COLUMNS}
                row.update(run_id="suite", cell_id=cell, scenario=node, repeat=0, status="error" if bad else "pass", seconds=0.1)
                row.update(metrics="{}", started_at=pd.Timestamp("2026-11-20T10:00:00"), first_run=None, seconds_before=None)
                if bad:
                    row.update(message="KeyError: 3", signature=SIG, blamed_library="transformers", exception_type="KeyError")
                rows.append(row)
        store.con.from_df(pd.DataFrame(rows, columns=list(OUTCOME_COLUMNS))).insert_into("outcomes")
    return path


@pytest.fixture(scope="module")
def suite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
    db = build_suite(tmp_path_factory.mktemp("suite") / "suite.duckdb")
    port = _free_port()
    with serving(streamlit_command(db, port), port, tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


@pytest.fixture
def tab(browser: Any, suite_server: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1000}, base_url=suite_server)
    page = context.new_page()
    page.set_default_timeout(45_000)
    try:
        yield page
    finally:
        context.close()


def grid_rows(page: Any, count: int, *first: str) -> list[list[str]]:
    """The visible grid's first `count` rows, as text (its accessible mirror: the grid itself is a
    canvas), once its first row begins with `first` (the grid it replaced may still be on screen)."""
    page.locator('[data-testid="stDataFrame"]:visible').first.wait_for()
    script = "want => want.every((t, c) => (document.getElementById(`glide-cell-${c}-0`) || {}).textContent === t)"
    page.wait_for_function(script, arg=list(first))
    page.wait_for_selector(f"#glide-cell-0-{count - 1}", state="attached")
    script = """n => Array.from({length: n}, (_, r) => Array.from({length: 4},
        (_, c) => (document.getElementById(`glide-cell-${c}-${r}`) || {textContent: ''}).textContent))"""
    return page.evaluate(script, count)


def choose(page: Any, label: str, option: str) -> None:
    page.get_by_role("combobox", name=label, exact=True).click()
    page.keyboard.type(option)
    page.keyboard.press("Enter")
    settle(page)


def search(page: Any, text: str) -> None:
    box = page.get_by_role("textbox", name="Search test ids")
    box.fill(text)
    box.press("Enter")
    page.get_by_text(f"matching {text}").first.wait_for()
    settle(page)


def test_a_suite_is_grouped_by_file_then_class(tab: Any, screenshots: Path) -> None:
    tab.goto("/")
    tab.get_by_text(re.compile(r"3,000 test\(s\) in 30 file\(s\) × 2 cell\(s\)")).wait_for()
    settle(tab)
    rows = grid_rows(tab, 8, "tests/test_mod00.py")
    assert [r[0] for r in rows] == [f"tests/test_mod{f:02d}.py" for f in range(8)]  # one row per file, not per test
    assert {r[1] for r in rows} == {"100"}
    assert rows[7][2:] == ["pass 100", "error 40 · pass 60"]  # columns A (tf 5.6.2) and B (tf 5.23.0)
    tab.screenshot(path=str(screenshots / "suite-files.png"), full_page=True)

    choose(tab, "File", "tests/test_mod07.py")
    tab.get_by_text("3 class(es) and function(s) in tests/test_mod07.py").wait_for()
    classes = grid_rows(tab, 3, "(module-level functions)")
    assert classes == [
        ["(module-level functions)", "20", "pass 20", "pass 20"],
        ["TestAlpha", "40", "pass 40", "pass 40"],
        ["TestBeta", "40", "pass 40", "error 40"],
    ]
    choose(tab, "Class or function", "TestBeta")
    tab.get_by_text(re.compile(r"40 test\(s\) in tests/test_mod07.py::TestBeta")).wait_for()
    tests = grid_rows(tab, 3, "test_merge_0[4bit]")
    assert [t[0] for t in tests] == sorted(f"test_merge_{i}[4bit]" for i in range(40))[:3]  # in node id order
    assert tests[0][2:] == ["pass", "error"]
    tab.screenshot(path=str(screenshots / "suite-class.png"), full_page=True)


def test_search_narrows_to_the_matching_tests(tab: Any, screenshots: Path) -> None:
    tab.goto("/")
    tab.get_by_text(re.compile(r"3,000 test\(s\) in")).wait_for()
    settle(tab)
    search(tab, "test_case_3[")  # `[` is literal: test_case_3[cpu] in every file, not test_case_30 … 39
    tab.get_by_text(re.compile(r"30 test\(s\) matching test_case_3\[ in 30 file\(s\)")).wait_for()
    assert grid_rows(tab, 2, "tests/test_mod00.py", "1")[1][:2] == ["tests/test_mod01.py", "1"]  # one matching test per file

    search(tab, "mod07.py::TestAlpha::test_case_1")
    tab.get_by_text(re.compile(r"11 test\(s\) matching mod07.py::TestAlpha::test_case_1 in 1 file\(s\)")).wait_for()
    tab.get_by_text("list the tests").click()
    settle(tab)
    tab.get_by_text(re.compile(r"^11 test\(s\) matching .*; select a square")).wait_for()
    expected = sorted(f"tests/test_mod07.py::TestAlpha::test_case_{i}[cpu]" for i in (1, *range(10, 20)))
    names = [r[0] for r in grid_rows(tab, 11, expected[0])]
    assert names == expected
    assert not tab.locator("#glide-cell-0-11").count()  # nothing else listed
    tab.screenshot(path=str(screenshots / "suite-search.png"), full_page=True)

    tab.get_by_role("link", name="Failures").click()  # the search is kept across pages, and narrows the failures too
    tab.get_by_role("heading", name="Failures", level=1).wait_for()
    settle(tab)
    assert tab.get_by_role("textbox", name="Search test ids").input_value() == "mod07.py::TestAlpha::test_case_1"
    tab.get_by_text("No failures among the outcomes that match these filters.").wait_for()
    box = tab.get_by_role("textbox", name="Search test ids")
    box.fill("TestBeta")
    box.press("Enter")
    tab.get_by_text(re.compile(r"40 test\(s\) in 1 class\(es\) or function\(s\) of 1 file\(s\)")).first.wait_for()


def test_the_pin_page_lists_every_test_and_pins_a_choice(tab: Any, screenshots: Path) -> None:
    tab.goto("/pin")
    tab.get_by_text(re.compile(r"Every test \(3,000;")).wait_for()
    settle(tab)
    # the list's first column is its row checkboxes, which the grid's accessible mirror leaves out
    tab.wait_for_selector("#glide-cell-1-0", state="attached")
    shown = tab.evaluate("() => [0, 1].map((r) => document.getElementById(`glide-cell-1-${r}`).textContent)")
    assert shown == ["tests/test_mod00.py::TestAlpha::test_case_0[cpu]", "tests/test_mod00.py::TestAlpha::test_case_10[cpu]"]
    box = tab.get_by_role("textbox", name="node ids, files, classes or folders, one per line")
    box.fill("tests/test_mod07.py::TestBeta\ntests/test_mod01.py")
    box.press("Control+Enter")
    tab.get_by_text(re.compile(r"140 test\(s\) chosen")).wait_for()
    settle(tab)
    tab.get_by_role("button", name="Pin the 140 test(s)").click()
    tab.get_by_text("Newest passing set on cpu").wait_for()
    settle(tab)
    tab.screenshot(path=str(screenshots / "suite-pin.png"), full_page=True)
    metric = tab.locator('[data-testid="stMetric"]').filter(has_text="transformers")
    assert "5.6.2" in metric.inner_text()  # TestBeta of test_mod07.py errors in 5.23.0
