"""A large suite's Matrix folds the files that pass in every cell (`grouping.fold`): which files it
folds, in which order it keeps the others, what the folded lines count, and the page around it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dashboard import grouping
from tests.unit.test_dashboard_app import APP, run, suite_db, texts

__all__ = ["suite_db"]  # the fixture, shared with test_dashboard_app

COLS = grouping.columns([{"cell_id": c, "torch": v} for c, v in (("a", "1"), ("b", "2"), ("c", "3"))])


def grid(files: dict[str, tuple[dict[str, int] | None, ...]]) -> grouping.Grid:
    """A grid of files from each file's counts per cell (None: no outcome there)."""
    rows: list[dict[str, Any]] = []
    for name, per_cell in files.items():
        for column, counts in zip(COLS, per_cell):
            if counts is not None:
                rows.append({"name": name, "cell_id": column.cell_id, "tests": sum(counts.values()), **counts})
    return grouping.build_grid(rows, COLS)


P = {"pass": 4}
SKIP = {"pass": 3, "not_applicable": 1}  # a skip beside passes: a pass-coloured square
ONLY_SKIPPED = {"not_applicable": 4}
XFAIL = {"pass": 3, "xfail": 1}
F1 = {"pass": 3, "fail": 1}
E2 = {"pass": 2, "error": 2}

# name -> (its squares, marked, whether it is folded as passing everywhere)
CASES: dict[str, tuple[tuple[dict[str, int] | None, ...], bool, bool]] = {
    "pass.py": ((P, P, P), False, True),
    "skip.py": ((SKIP, P, XFAIL), False, True),
    "marked.py": ((P, P, P), True, False),  # a transition names it: never folded away
    "missing.py": ((P, None, P), False, False),  # not run in one cell
    "only_skipped.py": ((P, ONLY_SKIPPED, P), False, False),  # a grey square
    "changes.py": ((P, F1, F1), False, False),
    "changes_more.py": ((P, E2, E2), False, False),
    "steady.py": ((F1, F1, F1), False, False),
    "steady_more.py": ((E2, E2, E2), False, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_file_is_folded_only_when_every_square_passes(name: str) -> None:
    files = {n: squares for n, (squares, _, _) in CASES.items()}
    marked = {n for n, (_, m, _) in CASES.items() if m}
    folded = grouping.fold(grid(files), marked, limit=len(files) - 1)
    passing = next(v for k, v in folded.folded.items() if "pass in every cell" in k)
    assert (name in passing) is CASES[name][2]
    assert (name in set(folded.grid.frame["name"])) is not CASES[name][2]


def test_the_files_that_change_come_first_then_the_most_failures() -> None:
    files = {n: squares for n, (squares, _, _) in CASES.items()}
    marked = {n for n, (_, m, _) in CASES.items() if m}
    kept = lambda limit: list(grouping.fold(grid(files), marked, limit=limit).grid.frame["name"])  # noqa: E731
    # changing or marked or missing (most failures first: changes_more 4, changes 2, the others 0), then steady
    assert kept(3)[:3] == ["changes.py", "changes_more.py", "marked.py"]  # drawn in name order
    assert kept(2)[:2] == ["changes.py", "changes_more.py"]
    assert kept(6)[:6] == ["changes.py", "changes_more.py", "marked.py", "missing.py", "only_skipped.py", "steady_more.py"]
    folded = grouping.fold(grid(files), marked, limit=6)
    assert list(folded.folded) == ["… 2 file(s) pass in every cell", "… 1 more file(s), fewer failures"]
    assert folded.folded["… 1 more file(s), fewer failures"] == ["steady.py"]
    assert folded.files == len(files)


def test_the_lines_count_every_test_of_their_files() -> None:
    files = {"a.py": (P, SKIP, XFAIL), "b.py": (SKIP, SKIP, P), "c.py": (F1, P, P), "d.py": (E2, E2, E2)}
    folded = grouping.fold(grid(files), limit=1)
    frame = folded.grid.frame.set_index("name")
    assert list(frame.index) == ["c.py", "… 2 file(s) pass in every cell", "… 1 more file(s), fewer failures"]
    line = frame.loc["… 2 file(s) pass in every cell"]
    assert [line["tests"], line["A"], line["B"], line["C"]] == [
        8,
        "pass 7 · not_applicable 1",
        "pass 6 · not_applicable 2",
        "pass 7 · xfail 1",
    ]
    assert frame.loc["… 1 more file(s), fewer failures"]["A"] == "error 2 · pass 2"
    # the totals and the file count still count everything
    assert folded.grid.totals == grid(files).totals and folded.files == 4


def test_up_to_the_limit_nothing_is_folded() -> None:
    files = {"a.py": (P, P, P), "b.py": (F1, P, P)}
    assert grouping.fold(grid(files), limit=2).folded == {}
    assert list(grouping.fold(grid(files), limit=2).grid.frame["name"]) == ["a.py", "b.py"]
    assert list(grouping.fold(grid(files), limit=1).grid.frame["name"]) == ["b.py", "… 1 file(s) pass in every cell"]


@pytest.mark.parametrize(
    ("drawn", "chosen", "listed"),
    [
        (["a.py", "b.py", "c.py"], "", ["a.py", "b.py", "c.py"]),  # nothing folded: every file
        (["b.py", "… 2 file(s) pass in every cell"], "", ["b.py"]),  # the files drawn, never a line
        (["b.py", "… 2 file(s) pass in every cell"], "c.py", ["b.py", "c.py"]),  # and the one chosen, in name order
        (["b.py", "… 2 file(s) pass in every cell"], "gone.py", ["b.py"]),  # a choice no longer in the file is not offered
    ],
)
def test_the_file_box_lists_the_files_drawn_and_the_one_chosen(drawn: list[str], chosen: str, listed: list[str]) -> None:
    from dashboard import suite

    assert suite.file_options(["a.py", "b.py", "c.py"], drawn, chosen) == listed


@pytest.mark.parametrize("word", ["", "pass 40", "crash 2 · error 1 · pass 5", "pass 1 · not_applicable 1 · xfail 1"])
def test_a_word_says_its_counts_back(word: str) -> None:
    assert grouping.group_word(grouping.word_counts(word)) == word


def test_the_matrix_folds_past_the_limit_and_a_click_on_the_line_shows_every_file(suite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(suite_db))
    monkeypatch.setattr(grouping, "FOLD_PAST", 1)
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60))
    # tests/test_b.py: a pass, a skip and an xfail in each cell; tests/test_a.py errors in cell C
    assert list(at.dataframe[0].value["shown"]) == ["tests/test_a.py", "… 1 file(s) pass in every cell"]
    assert list(at.dataframe[0].value["tests"]) == [5, 3]
    assert "**8** test(s) in **2** file(s)" in texts(at)  # the counts count every file
    assert "1 of 2 file(s) drawn one row each" in texts(at)
    assert at.selectbox(key="m_file").options == ["every file (2)", "tests/test_a.py"]  # the files drawn, not the line
    at.session_state["suite_grid:file:::False:folded"] = {"selection": {"rows": [], "columns": [], "cells": [[1, "A"]]}}
    at.run()
    assert at.toggle(key="m_every_file").value is True
    assert list(at.dataframe[0].value["shown"]) == ["tests/test_a.py", "tests/test_b.py"]
    assert at.selectbox(key="m_file").value == ""  # the click on the line chose no file
    assert at.selectbox(key="m_file").options == ["every file (2)", "tests/test_a.py", "tests/test_b.py"]  # every file drawn: every file
    at.selectbox(key="m_file").set_value("tests/test_b.py").run()
    at.toggle(key="m_every_file").set_value(False).run()
    # folded again, the file chosen is still offered and still chosen (its classes are listed)
    assert at.selectbox(key="m_file").options == ["every file (2)", "tests/test_a.py", "tests/test_b.py"]
    assert at.selectbox(key="m_file").value == "tests/test_b.py"
    at.selectbox(key="m_file").set_value("").run()
    at.toggle(key="m_every_file").set_value(False).run()
    assert list(at.dataframe[0].value["shown"]) == ["tests/test_a.py", "… 1 file(s) pass in every cell"]
    at.text_input(key="f_search").set_value("test_known").run()  # the search finds a file folded away
    assert list(at.dataframe[0].value["shown"]) == ["tests/test_b.py"]
    st.cache_data.clear()
