"""The History page's reads (`storage.timeline`): each test's squares run by run per cell, its
changes and their causes, the list filtered, grouped per file and paged.

Five nights of a suite in two cells, written through the harness's own writer (journal, folds,
collections), the team's code changing on night 3 and nothing else changing after it:

    test                     n1      n2      n3      n4      n5
    pkg.py::t_reg            pass    pass    fail E2 fail E2 fail E2     regressed on n3 (code A → B); a stored cause in c1
    pkg.py::t_fix            fail E1 fail E1 pass    pass    pass        fixed on n3
    pkg.py::t_flaky (c1)     pass    pass    pass    fail E3 pass        flaky on n4 and back on n5 (nothing changed)
    pkg.py::t_same           pass    pass    pass    pass    pass
    more.py::t_gone          pass    pass    pass    pass    —           removed on n5 (not collected)
    more.py::t_new           —       —       —       pass    pass        new on n4
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harness.analysis.outcome import CellRecord, Collection, Outcome, Status
from harness.storage import timeline
from harness.storage.store import Store

CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}
PKG, MORE = "tests/test_pkg.py", "tests/test_more.py"
CELLS = {"c1": "23.2", "c2": "24.0"}
SUITE = {"paths": ["tests"], "k": "", "m": ""}
START = datetime(2026, 11, 20, 4)
E1, E2, E3 = "AssertionError: old bug", "KeyError: 22 @ pkg/model.py:forward", "TimeoutError: flaky socket"
CAUSE = "the team's code: code-A → code-B"
P, F = ("pass", ""), ("fail",)


def t(name: str) -> str:
    return f"{PKG if name in ('t_reg', 't_fix', 't_flaky', 't_same') else MORE}::{name}"


def outcomes(night: int, cell: str) -> dict[str, tuple[str, str]]:
    """Night `night`'s outcomes in `cell`, as the module's table says."""
    found = {
        t("t_reg"): P if night < 3 else ("fail", E2),
        t("t_fix"): ("fail", E1) if night < 3 else P,
        t("t_flaky"): ("fail", E3) if night == 4 and cell == "c1" else P,
        t("t_same"): P,
    }
    if night < 5:
        found[t("t_gone")] = P
    if night >= 4:
        found[t("t_new")] = P
    return found


def build(path: Path, nights: int = 5, cause: bool = True) -> Path:
    """The module's nights in a real results file; with `cause`, the cause `harness explain` would store for t_reg in c1."""
    for night in range(1, nights + 1):
        run = f"night-{night}"
        code = "code-A" if night < 3 else "code-B"
        inputs = {"scenarios": {}, "tests": {"config": "conf", "files": {PKG: "pkg-1", MORE: "more-1"}, "code": code}, "paths": {}}
        with Store(path) as store:
            store.ensure_run(run, "m.toml", "", {"tests": {"root": ".", **SUITE}, "inputs": inputs}, "0.1.0", CPU)
            for cell, version in CELLS.items():
                pins = {"packaging": version}
                store.record_cell(CellRecord(run, cell, "3.11", pins, [], {**pins, "pytest": "9.0.1"}, {}, {}, "ready", "", 1.0, False))
                ran = outcomes(night, cell)
                store.record_collection(Collection(run, cell, SUITE, list(ran)))
                for node, (status, signature) in ran.items():
                    store.add_outcome(Outcome(run, cell, node, 0, Status(status), message=signature, signature=signature, seconds=1.0))
            store.con  # noqa: B018  (folds the journal: the next night starts later)
        with duckdb.connect(str(path)) as con:  # a day apart
            con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [START + timedelta(days=night), run])
    if cause:
        with duckdb.connect(str(path)) as con:
            con.execute(
                "INSERT INTO causes VALUES ('night-3', 'night-2', 'c1', 'regressed', ?, ?, 'culprit', ?, '{}', 3, 12.5, now())",
                [E2, f'["{t("t_reg")}"]', CAUSE],
            )
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("timeline") / "results.duckdb")


def _names(found: dict[str, Any]) -> list[str]:
    return [r["name"].split("::")[-1] if found["level"] == "test" else r["name"] for r in found["rows"]]


def test_the_runs_are_the_columns_oldest_first(db: Path) -> None:
    with Store(db, read_only=True) as store:
        assert [(r["run_id"], r["ord"]) for r in timeline.runs(store)] == [(f"night-{n}", n) for n in range(1, 6)]


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        # newest change first, then most changes, most failing, by test id; the tests that never changed last
        ({}, ["t_gone", "t_flaky", "t_reg", "t_fix", "t_new", "t_same"]),
        ({"changed_within": 1}, ["t_gone", "t_flaky"]),  # night 5: t_gone left, t_flaky came back
        ({"changed_within": 2}, ["t_gone", "t_flaky"]),  # night 4: t_flaky failed
        ({"changed_within": 3}, ["t_gone", "t_flaky", "t_reg", "t_fix"]),  # night 3: the code changed
        ({"flaky": True}, ["t_flaky"]),  # flagged flaky across runs by the writer (table `flaky`)
        ({"flaky": True, "changed_within": 3}, ["t_flaky"]),
        ({"search": "T_F"}, ["t_flaky", "t_fix"]),  # case-insensitive substring of the test id
        ({"search": "t_[a-z]"}, []),  # never a pattern
        ({"file": MORE}, ["t_gone", "t_new"]),
        ({"file": MORE, "changed_within": 1}, ["t_gone"]),
        ({"limit": 2, "offset": 2}, ["t_reg", "t_fix"]),  # a page of the list
    ],
)
def test_the_list_is_filtered_ordered_and_paged(db: Path, asked: dict[str, Any], expected: list[str]) -> None:
    with Store(db, read_only=True) as store:
        found = timeline.listing(store, **asked)
    assert found["level"] == "test" and _names(found) == expected
    assert found["total"] == found["matched"] == (6 if "limit" in asked else len(expected))


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        # name: (tests, failing now, failing cells, changed, changes (cells × runs), flaky, last change, gone)
        (0, {"t_reg": (1, 1, 2, 1, 2, 0, 3, 0), "t_flaky": (1, 0, 0, 1, 2, 1, 5, 0), "t_gone": (1, 0, 0, 1, 2, 0, 5, 1)}),
        (2, {"t_reg": (1, 1, 2, 0, 0, 0, 3, 0), "t_flaky": (1, 0, 0, 1, 2, 1, 5, 0), "t_gone": (1, 0, 0, 1, 2, 0, 5, 1)}),
        (1, {"t_reg": (1, 1, 2, 0, 0, 0, 3, 0), "t_flaky": (1, 0, 0, 1, 1, 1, 5, 0), "t_new": (1, 0, 0, 0, 0, 0, None, 0)}),
    ],
)
def test_each_rows_counts_cover_the_runs_shown(db: Path, window: int, expected: dict[str, tuple[Any, ...]]) -> None:
    keys = ("tests", "failing", "failing_cells", "changed", "changes", "flaky", "last_change", "gone")
    with Store(db, read_only=True) as store:
        rows = {r["name"].split("::")[1]: tuple(r[k] for k in keys) for r in timeline.listing(store, window=window)["rows"]}
    assert {name: rows[name] for name in expected} == expected


def test_past_the_limit_the_list_has_a_row_per_file(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "GROUP_PAST", 3)
    keys = ("tests", "failing", "changed", "changes", "flaky", "last_change", "gone")
    with Store(db, read_only=True) as store:
        files = timeline.listing(store)
        narrowed = timeline.listing(store, changed_within=1)  # two tests: one per row again
        chosen = timeline.listing(store, file=PKG)  # a file chosen: its tests, however many
    assert (files["level"], files["matched"], files["total"]) == ("file", 6, 2)
    assert {r["name"]: tuple(r[k] for k in keys) for r in files["rows"]} == {
        PKG: (4, 1, 3, 6, 1, 5, 0),
        MORE: (2, 0, 1, 2, 0, 5, 1),
    }
    assert _names(files) == [PKG, MORE]  # the same night; more changes first
    assert narrowed["level"] == "test" and _names(narrowed) == ["t_gone", "t_flaky"]
    assert chosen["level"] == "test" and _names(chosen) == ["t_flaky", "t_reg", "t_fix", "t_same"]


def _strip(found: list[dict[str, Any]], name: str, cell: str, *keys: str) -> list[tuple[Any, ...]]:
    """One strip's squares, each as `keys`: `strips` gives one row per name and cell, its squares as lists."""
    (strip,) = [s for s in found if s["name"] == name and s["cell_id"] == cell]
    return [tuple(square[k] for k in keys) for square in strip["squares"]]


@pytest.mark.parametrize(
    ("test", "cell", "window", "expected"),
    [
        ("t_flaky", "c1", 0, [(1, "pass", ""), (2, "pass", ""), (3, "pass", ""), (4, "fail", "regressed"), (5, "pass", "fixed")]),
        ("t_flaky", "c2", 0, [(n, "pass", "") for n in range(1, 6)]),
        ("t_reg", "c2", 0, [(1, "pass", ""), (2, "pass", ""), (3, "fail", "regressed"), (4, "fail", ""), (5, "fail", "")]),
        ("t_fix", "c1", 2, [(4, "pass", ""), (5, "pass", "")]),  # the newest two runs only
        # left the suite on night 5: not collected, never an outcome
        ("t_gone", "c1", 0, [(1, "pass", ""), (2, "pass", ""), (3, "pass", ""), (4, "pass", ""), (5, "not_collected", "removed")]),
        ("t_new", "c2", 0, [(4, "pass", ""), (5, "pass", "")]),  # no square before it ran
    ],
)
def test_a_tests_strip_is_its_status_per_run_with_its_changes_marked(
    db: Path, test: str, cell: str, window: int, expected: list[tuple[Any, ...]]
) -> None:
    with Store(db, read_only=True) as store:
        squares = timeline.strips(store, [t(test)], window=window)
    assert _strip(squares, t(test), cell, "ord", "status", "change") == expected
    assert {square["run_id"] for strip in squares for square in strip["squares"]} <= {f"night-{n}" for n in range(1, 6)}


def test_a_squares_signature_and_a_marks_reason(db: Path) -> None:
    with Store(db, read_only=True) as store:
        squares = timeline.strips(store, [t("t_reg"), t("t_gone")])
    assert _strip(squares, t("t_reg"), "c1", "ord", "signature")[2:] == [(3, E2), (4, E2), (5, E2)]
    assert _strip(squares, t("t_gone"), "c2", "ord", "reason")[-1] == (5, "removed")


@pytest.mark.parametrize(
    ("asked", "cell", "expected"),
    [
        # (run, failing, not collected, said nothing, worst failing status, tests changed there); the rest passed
        (
            {},
            "c1",
            [
                (1, 1, 0, 0, "fail", 0),  # t_fix fails
                (2, 1, 0, 0, "fail", 0),
                (3, 1, 0, 0, "fail", 2),  # t_reg and t_fix changed
                (4, 2, 0, 0, "fail", 1),  # t_flaky failed
                (5, 1, 0, 0, "fail", 1),  # and came back
            ],
        ),
        ({"window": 2}, "c2", [(4, 1, 0, 0, "fail", 0), (5, 1, 0, 0, "fail", 0)]),
        # over the tests the list's filters admit only: the flaky one, the one matching a search
        (
            {"flaky": True},
            "c1",
            [(1, 0, 0, 0, "", 0), (2, 0, 0, 0, "", 0), (3, 0, 0, 0, "", 0), (4, 1, 0, 0, "fail", 1), (5, 0, 0, 0, "", 1)],
        ),
        (
            {"search": "T_REG"},
            "c2",
            [(1, 0, 0, 0, "", 0), (2, 0, 0, 0, "", 0), (3, 1, 0, 0, "fail", 1), (4, 1, 0, 0, "fail", 0), (5, 1, 0, 0, "fail", 0)],
        ),
        (
            {"changed_within": 1},
            "c1",
            [(1, 0, 0, 0, "", 0), (2, 0, 0, 0, "", 0), (3, 0, 0, 0, "", 0), (4, 1, 0, 0, "fail", 1), (5, 0, 0, 0, "", 1)],
        ),
    ],
)
def test_a_files_strip_counts_its_tests_per_run(db: Path, asked: dict[str, Any], cell: str, expected: list[tuple[Any, ...]]) -> None:
    keys = ("ord", "failing", "out", "other", "status", "changed")
    with Store(db, read_only=True) as store:
        squares = timeline.strips(store, [PKG], level="file", **asked)
    assert _strip(squares, PKG, cell, *keys) == expected


def test_a_file_with_a_test_gone_counts_it_as_not_collected(db: Path) -> None:
    keys = ("ord", "failing", "out", "status", "changed")
    with Store(db, read_only=True) as store:
        squares = timeline.strips(store, [MORE], level="file")
    assert _strip(squares, MORE, "c1", *keys) == [
        (1, 0, 0, "", 0),
        (2, 0, 0, "", 0),
        (3, 0, 0, "", 0),
        (4, 0, 0, "", 0),  # t_new arrived: it passes
        (5, 0, 1, "", 1),  # t_gone left
    ]


@pytest.mark.parametrize(
    ("test", "expected"),
    [
        # (cell, kind, before, after, signature, before run, after run, cause)
        (
            "t_reg",
            [
                ("c1", "regressed", "pass", "fail", E2, "night-2", "night-3", CAUSE),
                ("c2", "regressed", "pass", "fail", E2, "night-2", "night-3", ""),
            ],
        ),
        (
            "t_fix",
            [
                ("c1", "fixed", "fail", "pass", E1, "night-2", "night-3", ""),
                ("c2", "fixed", "fail", "pass", E1, "night-2", "night-3", ""),
            ],
        ),
        # nothing it depends on changed between the runs around either flip: flaky, newest first
        (
            "t_flaky",
            [
                ("c1", "flaky", "fail", "pass", E3, "night-4", "night-5", ""),
                ("c1", "flaky", "pass", "fail", E3, "night-3", "night-4", ""),
            ],
        ),
        (
            "t_gone",
            [
                ("c1", "removed", "pass", "not_collected", "", "night-4", "night-5", ""),
                ("c2", "removed", "pass", "not_collected", "", "night-4", "night-5", ""),
            ],
        ),
        ("t_same", []),
        ("t_new", []),
    ],
)
def test_a_tests_changes_come_with_their_causes(db: Path, test: str, expected: list[tuple[str, ...]]) -> None:
    keys = ("cell_id", "kind", "before", "after", "signature", "before_run", "after_run", "cause")
    with Store(db, read_only=True) as store:
        found = timeline.story(store, t(test))
    assert [tuple(c[k] for k in keys) for c in found] == expected


def test_a_change_says_what_moved_between_its_runs(db: Path) -> None:
    with Store(db, read_only=True) as store:
        (c1, _) = timeline.story(store, t("t_reg"))
        recent = timeline.story(store, t("t_reg"), window=2)
    assert c1["verdict"] == "culprit" and any("code" in m or "code-A" in m for m in c1["moved"]), c1["moved"]
    assert recent == []  # night 3 is not among the newest two runs


def test_a_file_of_one_run_has_no_change(tmp_path: Path) -> None:
    db = build(tmp_path / "one.duckdb", nights=1, cause=False)
    with Store(db, read_only=True) as store:
        found = timeline.listing(store, changed_within=1)
        every = timeline.listing(store)
        squares = timeline.strips(store, [t("t_reg")])
    assert found["rows"] == [] and found["matched"] == 0
    assert every["matched"] == 5 and all(r["changes"] == 0 and r["last_change"] is None for r in every["rows"])
    assert [(s["cell_id"], [(q["ord"], q["status"], q["change"]) for q in s["squares"]]) for s in squares] == [
        ("c1", [(1, "pass", "")]),
        ("c2", [(1, "pass", "")]),
    ]
