"""The History page (dashboard/views/history.py) and its pictures (dashboard/strips.py).

The page over test_timeline.py's five nights, through Streamlit's AppTest: the list, its filters,
a file's row and a test's story with its stored cause; the strips and the test's chart as tables
of cases, pure.
"""

from __future__ import annotations

import doctest
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dashboard import grouping, strips
from harness.storage import timeline
from tests.unit.test_timeline import CAUSE, MORE, PKG, build, t

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
RUNS = [{"run_id": f"night-{n}", "started_at": datetime(2026, 11, 20 + n, 4), "ord": n} for n in range(1, 6)]
COLUMNS = [
    grouping.Column("A", "c1", {"packaging": "23.2"}, "packaging 23.2"),
    grouping.Column("B", "c2", {"packaging": "24.0"}, "packaging 24.0"),
]


def test_doctests() -> None:
    assert doctest.testmod(strips).failed == 0


#: The triangle over the first run's bar.
FIRST_MARK = "M-0.5 0h4l-2 6z"


def _bars(svg: str) -> dict[str, str]:
    """colour -> the path of an SVG's bars (strokes) and marks (fills)."""
    found = {}
    for part in svg.split("<path ")[1:]:
        colour = part.split("'")[1]
        found[colour] = part.split("d='")[1].split("'")[0]
    return found


@pytest.mark.parametrize(
    ("squares", "ords", "expected"),
    [
        # a bar per run, at its place among the runs shown; a triangle on a change
        ([{"ord": 2, "status": "pass", "change": ""}], [1, 2, 3], {"#43a047": "M5.5 8v20"}),
        (
            [{"ord": 1, "status": "pass", "change": ""}, {"ord": 2, "status": "error", "change": "regressed"}],
            [1, 2],
            {"#43a047": "M1.5 8v20", "#c62828": "M5.5 8v20", "#b71c1c": "M3.5 0h4l-2 6z"},
        ),
        # not collected: a short grey bar; a run outside those shown: nothing
        (
            [{"ord": 3, "status": "not_collected", "change": "removed"}, {"ord": 9, "status": "pass", "change": ""}],
            [3],
            {"#9e9e9e": "M1.5 17v11", "#424242": FIRST_MARK},
        ),
        ([], [1, 2], {}),
    ],
)
def test_a_tests_strip(squares: list[dict[str, Any]], ords: list[int], expected: dict[str, str]) -> None:
    svg = strips.bars(squares, ords)
    assert svg.startswith(f"<svg xmlns='http://www.w3.org/2000/svg' width='{len(ords) * 4}' height='28'>")
    assert _bars(svg) == expected


@pytest.mark.parametrize(
    ("square", "tests", "expected"),
    [
        ({"failing": 0, "out": 0, "other": 0, "status": "", "changed": 0}, 10, {"#43a047": "M1.5 8v20"}),
        # one failing of 10: a red top of 40% (never less), the rest green; a change marked
        (
            {"failing": 1, "out": 0, "other": 0, "status": "fail", "changed": 2},
            10,
            {"#e53935": "M1.5 8v8", "#43a047": "M1.5 16v12", "#212121": FIRST_MARK},
        ),
        ({"failing": 10, "out": 0, "other": 0, "status": "crash", "changed": 0}, 10, {"#8e24aa": "M1.5 8v20"}),  # all of them
        ({"failing": 0, "out": 4, "other": 0, "status": "", "changed": 4}, 4, {"#9e9e9e": "M1.5 17v11", "#212121": FIRST_MARK}),  # all left
        ({"failing": 0, "out": 0, "other": 3, "status": "", "changed": 0}, 3, {"#cfd8dc": "M1.5 8v20"}),  # all said nothing
    ],
)
def test_a_files_strip(square: dict[str, Any], tests: int, expected: dict[str, str]) -> None:
    assert _bars(strips.file_bars([{"ord": 1, **square}], [1], tests)) == expected


def test_the_tests_chart_marks_each_change_as_the_story_classes_it() -> None:
    rows = [
        {
            "name": t("t_flaky"),
            "cell_id": "c1",
            "squares": [
                {"ord": 3, "run_id": "night-3", "status": "pass", "signature": "", "reason": "", "repeats": 1, "change": ""},
                {"ord": 4, "run_id": "night-4", "status": "fail", "signature": "E3", "reason": "", "repeats": 1, "change": "regressed"},
            ],
        }
    ]
    plain = strips.story_spec(rows, COLUMNS, RUNS)
    classed = strips.story_spec(rows, COLUMNS, RUNS, [{"cell_id": "c1", "after_run": "night-4", "kind": "flaky"}])
    assert [(v["run_id"], v["cell"], v["status"], v["change"]) for v in plain["data"]["values"]] == [
        ("night-3", "A · packaging 23.2", "pass", ""),
        ("night-4", "A · packaging 23.2", "fail", "started failing"),
    ]
    assert [v["change"] for v in classed["data"]["values"]] == ["", "flaky (nothing changed)"]
    assert plain["layer"][0]["encoding"]["x"]["sort"] == [f"{n:03d} night-{n}" for n in range(1, 6)]  # every run, oldest first


def test_the_changes_table_says_the_cause_or_that_none_was_found() -> None:
    changes = [
        {"cell_id": "c1", "kind": "regressed", "before": "pass", "after": "fail", "signature": "E2", "before_run": "night-2",
         "after_run": "night-3", "moved": ["your code code-A..code-B"], "cause": CAUSE, "verdict": "culprit"},
        {"cell_id": "c2", "kind": "regressed", "before": "pass", "after": "fail", "signature": "E2", "before_run": "night-2",
         "after_run": "night-3", "moved": [], "cause": "", "verdict": ""},
        {"cell_id": "c1", "kind": "flaky", "before": "fail", "after": "pass", "signature": "E3", "before_run": "night-4",
         "after_run": "night-5", "moved": [], "cause": "", "verdict": ""},
    ]  # fmt: skip
    frame = strips.changes_table(changes, COLUMNS, RUNS)
    assert frame[["run", "cell", "change", "from → to"]].values.tolist()[0] == [
        "night-3 (2026-11-23)",
        "A · c1",
        "started failing",
        "pass → fail",
    ]
    assert frame["cause"].tolist() == [f"culprit: {CAUSE}", "not explained yet (`harness explain` narrows it)", ""]
    assert frame["moved"].tolist() == ["your code code-A..code-B", "", "nothing the results file records"]


# -- the page ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("page") / "results.duckdb")


@pytest.fixture
def app(db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(db))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()  # the navigation, which switch_page needs
    yield at
    st.cache_data.clear()


def history(at: AppTest, **params: str) -> AppTest:
    at.switch_page("views/history.py")
    at.query_params.update(params)
    return rerun(at)


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def said(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in [*at.markdown, *at.caption])


def listed(at: AppTest) -> list[str]:
    return [str(n).split("::")[-1] for n in at.dataframe[0].value["name"]]


def test_the_page_lists_each_test_with_a_strip_per_cell(app: AppTest) -> None:
    at = history(app)
    assert "**6** test(s) · 5 of 5 run(s), 2026-11-21 … 2026-11-25, oldest left · 2 cell(s)" in said(at)
    frame = at.dataframe[0].value
    assert listed(at) == ["t_gone", "t_flaky", "t_reg", "t_fix", "t_new", "t_same"]
    assert frame["A"].str.startswith("data:image/svg+xml;utf8,").all() and frame["B"].str.startswith("data:image/svg+xml;utf8,").all()
    assert frame.loc[2, ["changes", "last change", "failing now"]].tolist() == [2, "night-3", 2]  # t_reg
    # the first row's story under the list: t_gone left the suite in both cells on night 5
    assert "`tests/test_more.py::t_gone` — the list's first row; select another" in said(at)
    assert at.dataframe[1].value["change"].tolist() == ["left the suite", "left the suite"]


@pytest.mark.parametrize(
    ("changed", "flaky", "search", "expected", "line"),
    [
        (1, False, "", ["t_gone", "t_flaky"], "**2** test(s) changed in the last 1 run(s) ·"),
        (3, False, "", ["t_gone", "t_flaky", "t_reg", "t_fix"], "**4** test(s) changed in the last 3 run(s) ·"),
        (3, True, "", ["t_flaky"], "**1** test(s) changed in the last 3 run(s), flaky across runs ·"),
        (0, True, "", ["t_flaky"], "**1** test(s) flaky across runs ·"),
        (0, False, "fix", ["t_fix"], "**1** test(s) matching `fix` ·"),
    ],
)
def test_the_filters_narrow_the_list(app: AppTest, changed: int, flaky: bool, search: str, expected: list[str], line: str) -> None:
    at = history(app)
    at.number_input(key="h_changed").set_value(changed)
    at.toggle(key="h_flaky").set_value(flaky)
    at.text_input(key="h_search").set_value(search)
    rerun(at)
    assert listed(at) == expected and line in said(at)


def test_a_link_opens_a_tests_changes_with_the_stored_cause(app: AppTest) -> None:
    at = history(app, test=t("t_reg"))
    assert at.subheader[0].value == "t_reg" and f"`{t('t_reg')}`" in said(at)
    changes = at.dataframe[1].value
    assert changes["change"].tolist() == ["started failing", "started failing"]
    assert changes["cause"].tolist() == [f"culprit: {CAUSE}", "not explained yet (`harness explain` narrows it)"]
    assert at.get("vega_lite_chart")  # its runs × cells


def test_past_the_limit_a_row_per_file_then_a_files_tests(app: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "GROUP_PAST", 3)
    at = history(app)
    assert "**6** test(s) in **2** file(s) — one row per file; select one for its tests" in said(at)
    assert at.dataframe[0].value["name"].tolist() == [PKG, MORE]
    assert "Select a file for its tests, then a test for its runs and changes." in said(at)
    # what the browser sends when a row is selected: the file's tests, however many
    question = ("", 0, False, "", 0)  # no search, no N, not only flaky, no file chosen, every run
    at.session_state[f"h_table:file:{question}:1"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    rerun(at)
    assert listed(at) == ["t_flaky", "t_reg", "t_fix", "t_same"] and f"**4** test(s) in `{PKG}` ·" in said(at)
    at.button(key="h_all_files").click()
    rerun(at)
    assert at.dataframe[0].value["name"].tolist() == [PKG, MORE]
