"""The quiet tests as one stand-in (`analysis.quiet`, `queries.loud_rows`): the same answers, read faster.

- the SQL rule (`queries.loud_rows`) and the Python rule (`quiet.quiet_of`) agree on a table of cases;
- every face that reads the loud rows says, byte for byte, what it says over every row
  (`HARNESS_EVERY_ROW=1`), over a suite file with history, flaky tests, xfails, skips and a test
  file that stopped importing;
- attribution's answers for tests whose rows say the same are worked out once (`_what_rows_say`):
  they are what each test gets alone, for every field the answers read;
- a read over a file larger than DuckDB's memory limit completes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harness.analysis.attribution import attribute
from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.analysis.quiet import STAND_IN, Quiet, quiet_of
from harness.storage import queries
from harness.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}


def _cell(run: str, cell: str, version: str) -> CellRecord:
    pins = {"packaging": version}
    return CellRecord(run, cell, "3.11", pins, [f"packaging=={version}"], {**pins, "pytest": "9.0.1"}, {}, {}, "ready", "", 1.0, False)


def _write(path: Path, runs: Mapping[str, Mapping[str, Mapping[str, list[str]]]], test_ids: Mapping[str, str] | None = None) -> None:
    """runs: run -> cell -> test node id -> the status of each repeat."""
    versions = {"c1": "23.2", "c2": "24.0", "c3": "24.1"}
    for run, cells in runs.items():
        with Store(path) as store:
            store.ensure_run(run, "m.toml", "", {"tests": {"root": "."}}, "0.1.0", CPU)
            for cell, tests in cells.items():
                store.record_cell(_cell(run, cell, versions[cell]))
                for node, statuses in tests.items():
                    for repeat, status in enumerate(statuses):
                        sig = "" if status in ("pass", "not_applicable", "xfail") else "E: boom"
                        store.add_outcome(
                            Outcome(
                                run,
                                cell,
                                node,
                                repeat,
                                Status(status),
                                message=sig,
                                signature=sig,
                                started_at="2026-11-20T04:00:00",
                                test_id=(test_ids or {}).get(node, ""),
                            )
                        )


QUIET_CASES = {
    # name: (runs, the quiet tests)
    "all pass in both cells": ({"r": {"c1": {"t.py::a": ["pass"]}, "c2": {"t.py::a": ["pass"]}}}, ["t.py::a"]),
    "a failure anywhere": (
        {"r": {"c1": {"t.py::a": ["pass"], "t.py::b": ["pass"]}, "c2": {"t.py::a": ["pass"], "t.py::b": ["fail"]}}},
        ["t.py::a"],
    ),
    "missing from a cell": ({"r": {"c1": {"t.py::a": ["pass"], "t.py::b": ["pass"]}, "c2": {"t.py::a": ["pass"]}}}, ["t.py::a"]),
    "one repeat of three": (
        {"r": {"c1": {"t.py::a": ["pass"] * 3, "t.py::b": ["pass"]}, "c2": {"t.py::a": ["pass"] * 3, "t.py::b": ["pass"]}}},
        ["t.py::a"],
    ),
    "a repeat flaky": ({"r": {"c1": {"t.py::a": ["pass", "error"]}, "c2": {"t.py::a": ["pass", "pass"]}}}, []),
    "skipped or xfail is not quiet": (
        {
            "r": {
                "c1": {"t.py::a": ["not_applicable"], "t.py::b": ["xfail"], "t.py::c": ["pass"]},
                "c2": {"t.py::a": ["pass"], "t.py::b": ["xfail"], "t.py::c": ["pass"]},
            }
        },
        ["t.py::c"],
    ),
    "a cell only an older run has": (
        {
            "old": {"c3": {"t.py::a": ["pass"], "t.py::b": ["pass"]}},
            "new": {"c1": {"t.py::a": ["pass"]}, "c2": {"t.py::a": ["pass"], "t.py::b": ["pass"]}},
        },
        ["t.py::a"],
    ),
}


@pytest.mark.parametrize("case", QUIET_CASES, ids=list(QUIET_CASES))
def test_the_sql_rule_is_the_python_rule(tmp_path: Path, case: str) -> None:
    runs, expected = QUIET_CASES[case]
    db = tmp_path / "r.duckdb"
    _write(db, runs)
    with Store(db, read_only=True) as store:
        rows, quiet = queries.loud_rows(store)
        every = queries.outcome_rows(store)
    assert list(quiet.tests) == expected == list(quiet_of(every))
    # the loud rows are every row of the tests that are not quiet, and one stand-in row per (run, cell, repeat)
    loud = [r for r in rows if r["scenario"] != STAND_IN]
    assert sorted((r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) for r in loud) == sorted(
        (r["run_id"], r["cell_id"], r["scenario"], r["repeat"]) for r in every if r["scenario"] not in expected
    )
    stand_ins = [r for r in rows if r["scenario"] == STAND_IN]
    if expected:
        keys = {(r["run_id"], r["cell_id"], r["repeat"]) for r in every}
        assert sorted((r["run_id"], r["cell_id"], r["repeat"]) for r in stand_ins) == sorted(keys)
        assert {r["stands_for"] for r in stand_ins} == {len(expected)}
    else:
        assert stand_ins == []


def test_a_test_flaky_across_runs_is_never_quiet(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {"c1": {"t.py::a": ["pass"], "t.py::b": ["pass"]}, "c2": {"t.py::a": ["pass"], "t.py::b": ["pass"]}}})
    with duckdb.connect(str(db)) as con:  # the history saw t.py::b flip with nothing changed
        con.execute("INSERT INTO flaky VALUES ('r', 'c1', 't.py::b', 'E: boom', 'flaky across runs: failed in 1 of 2 runs')")
    with Store(db, read_only=True) as store:
        rows, quiet = queries.loud_rows(store)
        every = queries.outcome_rows(store)
    assert quiet.tests == ("t.py::a",) == quiet_of(every)
    assert any(r["scenario"] == "t.py::b" and "flaky_across" in r for r in rows)


def test_two_node_ids_of_one_test_in_one_cell_are_not_quiet(tmp_path: Path) -> None:
    # a test's identity across releases (test_id): one cell collected it under two node ids
    db = tmp_path / "r.duckdb"
    runs = {
        "r": {
            "c1": {"t.py::a[0]": ["pass"], "t.py::a[x]": ["pass"], "t.py::b": ["pass"]},
            "c2": {"t.py::a[0]": ["pass"], "t.py::b": ["pass"]},
        }
    }
    _write(db, runs, {"t.py::a[0]": "t.py::a[#1]", "t.py::a[x]": "t.py::a[#1]"})
    with Store(db, read_only=True) as store:
        _, quiet = queries.loud_rows(store)
        assert quiet.tests == ("t.py::b",) == quiet_of(queries.outcome_rows(store))


def test_a_test_renamed_between_cells_passing_in_each_is_quiet(tmp_path: Path) -> None:
    # one identity, a node id per cell: one outcome in each (run, cell, repeat), so quiet, as t.py::b
    db = tmp_path / "r.duckdb"
    runs = {"r": {"c1": {"t.py::a[0]": ["pass"], "t.py::b": ["pass"]}, "c2": {"t.py::a[x]": ["pass"], "t.py::b": ["pass"]}}}
    _write(db, runs, {"t.py::a[0]": "t.py::a[#1]", "t.py::a[x]": "t.py::a[#1]"})
    with Store(db, read_only=True) as store:
        _, quiet = queries.loud_rows(store)
        assert quiet.tests == ("t.py::a[#1]", "t.py::b") == quiet_of(queries.outcome_rows(store))
        assert quiet.nodes == ("t.py::a[0]", "t.py::b")


def test_pin_rows_of_a_selection_hold_its_quiet_tests_as_one(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, {"r": {c: {"t.py::a": ["pass"], "t.py::b": ["pass"], "t.py::c": ["pass" if c == "c1" else "fail"]} for c in ("c1", "c2")}})
    with Store(db, read_only=True) as store:
        rows, quiet = queries.loud_pin_rows(store, ["t.py::b", "t.py::c"])
        every = queries.pin_rows(store, ["t.py::b", "t.py::c"])
    assert quiet.tests == ("t.py::b",)  # t.py::a is quiet too, but not asked for
    assert [(r["cell_id"], r["scenario"]) for r in rows] == [("c1", "t.py::c"), ("c1", STAND_IN), ("c2", "t.py::c"), ("c2", STAND_IN)]
    assert [r for r in every if r["scenario"] == "t.py::c"] == [r for r in rows if r["scenario"] == "t.py::c"]


# -- every face: the same words -------------------------------------------------------------------
@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A suite's file: 3 nights of 300 tests in 4 cells, 5% of the outcomes changing each night,
    and a file of 20 tests that stops importing on the newest: flaky tests, xfails, skips, gone tests."""
    db = tmp_path_factory.mktemp("quiet") / "suite.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "300", "--cells", "4"]
    subprocess.run([*made, "--runs", "3", "--drift", "0.05", "--broken-file", "20", "--out", str(db)], check=True, capture_output=True)
    return db


def _faces(db: Path, out: Path) -> dict[str, list[str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        node = con.execute("SELECT scenario FROM outcomes WHERE status = 'pass' AND scenario LIKE '%::%' ORDER BY 1 LIMIT 1").fetchone()[0]
        failing = con.execute(
            "SELECT signature FROM outcomes WHERE status IN ('error', 'fail') GROUP BY 1 ORDER BY count(*) DESC"
        ).fetchone()
        runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()]
    return {
        "summary": ["summary", "--db", str(db)],
        "summary of the newest run": ["summary", "--db", str(db), "--run-id", runs[-1]],
        "summary of an older run": ["summary", "--db", str(db), "--run-id", runs[0]],
        "pin a file": ["pin", "--db", str(db), "--test", node.split("::")[0]],
        "pin a folder, any machine": ["pin", "--db", str(db), "--test", "tests/", "--machine", "any", "--json"],
        "pin -m": ["pin", "--db", str(db), "-m", "not slow"],
        "constraints": ["pin", "--db", str(db), "--constraints"],
        "report": ["report", "--db", str(db), "--signature", failing[0][:40]],
        "publish": ["publish", "--db", str(db), "--out", str(out / "site")],
    }


def test_every_face_says_over_the_loud_rows_what_it_says_over_every_row(suite: Path, tmp_path: Path) -> None:
    said: dict[str, dict[str, str]] = {}
    for side, extra in (("loud", {}), ("every", {"HARNESS_EVERY_ROW": "1"})):
        out = tmp_path / side
        for name, args in _faces(suite, out).items():
            done = subprocess.run(
                [sys.executable, "-m", "harness", *args],
                capture_output=True,
                text=True,
                cwd=REPO,
                env={**os.environ, **extra, "COLUMNS": "120"},
            )
            assert done.returncode in (0, 1), done.stderr
            text = (out / "site" / "index.html").read_text() if name == "publish" else done.stdout
            said.setdefault(name, {})[side] = text.replace(str(out), "OUT")
    for name, sides in said.items():
        assert sides["loud"] == sides["every"], name
    assert "passes all" in said["summary"]["loud"] or "passes" in said["summary"]["loud"]  # a known-good set was said


def test_attribute_stores_the_same_answers_over_the_loud_rows(suite: Path, tmp_path: Path) -> None:
    stored = {}
    for side, extra in (("loud", {}), ("every", {"HARNESS_EVERY_ROW": "1"})):
        db = tmp_path / f"{side}.duckdb"
        db.write_bytes(suite.read_bytes())
        done = subprocess.run(
            [sys.executable, "-m", "harness", "attribute", "--offline", "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, **extra},
        )
        assert done.returncode == 0, done.stderr
        with duckdb.connect(str(db), read_only=True) as con:
            stored[side] = con.execute("SELECT * EXCLUDE (computed_at) FROM transitions ORDER BY ALL").fetchall()
    assert stored["loud"] == stored["every"] and stored["loud"]


# -- attribution: a test's answers worked out once for the tests that say the same -----------------
def _rows(test: str, every: bool = False, **changed: Any) -> list[dict[str, Any]]:
    """A test failing from packaging 24.0 on; `changed` on its 24.0 row (the transition's new side), or on `every` row."""
    rows = []
    for version, status in (("23.2", "pass"), ("24.0", "error"), ("24.1", "error")):
        row = {
            "scenario": test,
            "run_id": "r",
            "cell_id": f"c-{version}",
            "repeat": 0,
            "status": status,
            "signature": "E: boom" if status == "error" else "",
            "signature_family": "f1",
            "gpu": "cpu",
            "platform": "linux-x86_64",
            "python": "3.11",
            "versions": {"packaging": version},
            "started_at": "2026-11-20T04:00:00",
        }
        if every or version == "24.0":  # the new side of the transition: what it says shows in the answer
            row.update(changed)
        rows.append(row)
    return rows


SAID: dict[str, tuple[bool, dict[str, Any]]] = {
    "status": (False, {"status": "pass", "signature": ""}),
    "signature": (False, {"signature": "E: other"}),
    "family": (False, {"signature_family": "f2"}),
    "run": (True, {"run_id": "r2"}),  # every row: its cells in the same order as the other test's
    "flaky across runs": (False, {"flaky_signature": "E: boom", "flaky_across": "flaky across runs: failed in 1 of 2 runs"}),
    "origin": (False, {"origin": "refine"}),
}


@pytest.mark.parametrize("field", SAID, ids=list(SAID))
def test_two_tests_that_differ_in_what_attribution_reads_get_their_own_answers(field: str) -> None:
    every, changed = SAID[field]
    a, b = _rows("t.py::a"), _rows("t.py::b", every, **changed)
    known = {"packaging": ["23.2", "24.0", "24.1"]}
    together = attribute([*a, *b], known_versions=known)
    alone = [attribute(rows, known_versions=known) for rows in (a, b)]
    assert together.transitions == alone[0].transitions + alone[1].transitions
    assert together.flaky == alone[0].flaky + alone[1].flaky
    assert together.machines == alone[0].machines + alone[1].machines


def test_two_tests_that_say_the_same_get_the_same_answers_under_their_own_names() -> None:
    known = {"packaging": ["23.2", "24.0", "24.1"]}
    together = attribute([*_rows("t.py::a"), *_rows("t.py::b")], known_versions=known)
    assert [t.scenario for t in together.transitions] == ["t.py::a", "t.py::b"]
    assert json.dumps(together.transitions[0].to_dict() | {"scenario": ""}, default=str) == json.dumps(
        together.transitions[1].to_dict() | {"scenario": ""}, default=str
    )


def test_a_quiet_stand_in_expands_in_the_order_of_the_names() -> None:
    quiet = Quiet(("t.py::b", "t.py::d"))
    assert quiet.expand(["t.py::a", STAND_IN, "t.py::c"]) == ("t.py::a", "t.py::b", "t.py::c", "t.py::d")
    assert quiet.expand(["z", "a", STAND_IN]) == ("z", "a", "t.py::b", "t.py::d")  # not sorted: the stand-in's tests last
    assert quiet.expand(["t.py::a"]) == ("t.py::a",)


# -- DuckDB's memory limit --------------------------------------------------------------------------
def test_a_summary_of_a_file_larger_than_the_memory_limit_completes(tmp_path: Path) -> None:
    """400,000 outcomes, a 70 MB file, read under a 64 MB limit: DuckDB spills rather than fails."""
    db = tmp_path / "big.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "20000", "--cells", "20", "--out", str(db)]
    subprocess.run(made, check=True, capture_output=True)
    assert db.stat().st_size > 64 * 2**20
    said = [
        subprocess.run(
            [sys.executable, "-m", "harness", "summary", "--db", str(db)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "HARNESS_DUCKDB_MEMORY": limit, "COLUMNS": "400"},  # the header on one line, whatever the path
        )
        for limit in ("64MB", "4GB")
    ]
    assert said[0].returncode == 0, said[0].stderr
    assert said[0].stdout == said[1].stdout and "20 cell(s) × 20000" in said[0].stdout


@pytest.mark.parametrize(
    ("limit", "said"),
    [
        ("lots", "HARNESS_DUCKDB_MEMORY='lots' is not an amount of memory DuckDB reads; give one like 512MB or 2GB"),
        ("1MB", "needed more than DuckDB's memory limit HARNESS_DUCKDB_MEMORY=1MB"),
    ],
)
def test_a_memory_limit_that_cannot_work_is_one_line_naming_it(suite: Path, limit: str, said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harness", "summary", "--db", str(suite)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HARNESS_DUCKDB_MEMORY": limit},
    )
    assert done.returncode == 2 and said in done.stderr and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("held", ["nothing", "transformers", "status", "gpu"])
def test_pin_rows_are_the_views_rows_of_the_tests_asked_for_as_the_filters_admit(suite: Path, held: str) -> None:
    # `pin_rows` reads the table and decides the filters per (run, cell); `outcome_rows` reads the view
    key = ("run_id", "cell_id", "scenario", "node_id", "repeat", "status", "signature", "gpu", "platform", "started_at")
    with Store(suite, read_only=True) as store:
        every = queries.outcome_rows(store)
        tests = sorted({r["scenario"] for r in every})[::7]  # some of each kind: passing, failing, not run
        oldest = min(str(r["transformers"]) for r in every)
        filters, admits = {
            "nothing": (None, lambda r: True),
            "transformers": ({"transformers": [oldest]}, lambda r: r["transformers"] == oldest),
            "status": ({"status": ["pass"]}, lambda r: r["status"] == "pass"),
            "gpu": ({"gpu": ["NVIDIA H200"]}, lambda r: False),
        }[held]
        got = queries.pin_rows(store, tests, filters)
    want = [r for r in every if r["scenario"] in set(tests) and admits(r)]
    assert sorted(tuple(r[k] for k in key) for r in got) == sorted(tuple(r[k] for k in key) for r in want)
    assert want or held == "gpu"


@pytest.mark.parametrize("which", ["all runs", "the oldest run"])
def test_a_stand_in_row_sums_up_the_quiet_outcomes_it_stands_for(suite: Path, which: str) -> None:
    # one row per (run, cell, repeat): the quiet tests' seconds summed, their latest start and
    # their earliest (`first_started_at`: the published page's first outcome), as every row says
    with Store(suite, read_only=True) as store:
        run = store.fetch("SELECT run_id FROM runs ORDER BY started_at LIMIT 1")[0]["run_id"] if which == "the oldest run" else None
        loud, quiet = queries.loud_rows(store, run)
        every = queries.outcome_rows(store, run)
    assert quiet.tests
    quiet_names = set(quiet.tests)
    expected: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in every:
        if row["scenario"] in quiet_names:
            expected.setdefault((row["run_id"], row["cell_id"], row["repeat"]), []).append(row)
    stand_ins = {(r["run_id"], r["cell_id"], r["repeat"]): r for r in loud if r["scenario"] == STAND_IN}
    assert stand_ins.keys() == expected.keys()
    for key, rows in expected.items():
        row = stand_ins[key]
        assert row["stands_for"] == len(quiet.tests) == len(rows)
        assert row["started_at"] == max(r["started_at"] for r in rows)
        assert row["first_started_at"] == min(r["started_at"] for r in rows)
        assert row["seconds"] == pytest.approx(sum(r["seconds"] for r in rows))
        assert len({r["started_at"] for r in rows}) > 1  # the case can tell the earliest from the latest
