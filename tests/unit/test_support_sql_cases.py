"""The Support page's tables decided in DuckDB (`storage.support_rows`, `workflows.support._support_in_sql`)
are the tables Python's rule makes from every loud row (`_support_read`), on a table of cases.

Each case is a small results file: cells of transformers × peft releases on one or two machines,
tests whose repeats pass, fail, flake, xfail, skip or say nothing, tests some cells did not
collect, a file that stopped importing, renamed tests, a suite's test groups, known-good sets
that are found only after dropping tests. `harness attribute --offline` stores their answers (the
decided tables mark the stored exact answers, as the read does while they are current). Where the
static drop order could differ from `knowngood.drop_order`, DuckDB hands the choice back (None),
and the page still shows the read's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.analysis.support import Chosen
from harness.cli import main
from harness.storage.store import Store
from harness.workflows import support
from harness.workflows.answering import EVERY_ROW, answer

CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}
GPU = {"hostname": "g", "platform": "linux-x86_64", "gpu_count": 1, "gpu": "NVIDIA H200", "gpus": [], "python": "3.11.7"}
DROPPED = "tests/test_a.py::test_load"  # missed in two cells, as test_p and test_q are: the first by name goes
TF = ("5.1.0", "5.2.0", "5.4.0")  # 5.3.0 listed, never built: a gap
PEFT = ("0.19.0", "0.20.0")

#: A test's statuses (one per repeat) in a cell of (transformers, peft); None: not collected there.
Rule = Callable[[str, str], list[str] | None]
#: A case: run -> (its host, test -> rule), and the node id each test's identity has per cell (renames).
Case = dict[str, Any]


def _all(status: str, repeats: int = 1) -> Rule:
    return lambda tf, peft: [status] * repeats


def _unless(cells: Mapping[tuple[str, str], list[str] | None], otherwise: str = "pass") -> Rule:
    return lambda tf, peft: cells.get((tf, peft), [otherwise])


def _before(tf_fixed: str, status: str = "error") -> Rule:
    return lambda tf, peft: [status] if TF.index(tf) < TF.index(tf_fixed) else ["pass"]


def _fails_in(*cells: tuple[str, str]) -> Rule:
    return lambda tf, peft: ["fail"] if (tf, peft) in cells else ["pass"]


def _each_fails_one(*cells: tuple[str, str]) -> dict[str, Rule]:
    """A test failing in each of `cells` alone; none ran in tf 5.1.0 × peft 0.19.0."""
    return {
        f"tests/test_b.py::test_{i}": lambda tf, peft, cell=cell: (
            None if (tf, peft) == ("5.1.0", "0.19.0") else ["fail"] if (tf, peft) == cell else ["pass"]
        )
        for i, cell in enumerate(cells)
    }


def _suite(n: int) -> dict[str, Rule]:
    """`n` tests in 7 files, some classes: a suite (more than a grid's rows), a few failing somewhere."""
    tests: dict[str, Rule] = {}
    for i in range(n):
        node = f"tests/test_m{i % 7}.py::" + ("TestA::" if i % 3 == 0 else "") + f"test_{i}"
        tests[node] = _before("5.2.0") if i % 11 == 0 else _unless({("5.4.0", "0.20.0"): ["fail"]}) if i % 13 == 0 else _all("pass")
    return tests


BASE: dict[str, Rule] = {
    "tests/test_a.py::test_load": _before("5.2.0"),  # fixed in 5.2.0: a mark
    "tests/test_a.py::test_save": _unless({("5.4.0", "0.19.0"): ["error"], ("5.4.0", "0.20.0"): ["error"]}),  # introduced
    "tests/test_b.py::TestX::test_y": _all("pass"),  # quiet
    "tests/test_b.py::TestX::test_z": _all("pass"),
}

CASES: dict[str, Case] = {
    "introduced and fixed": {"runs": {"r": (CPU, BASE)}},
    "flaky repeats": {"runs": {"r": (CPU, {**BASE, "tests/test_c.py::test_f": _unless({("5.2.0", "0.19.0"): ["pass", "error", "pass"]})})}},
    "xfail, skipped, not_applicable, inconclusive": {
        "runs": {
            "r": (
                CPU,
                {
                    **BASE,
                    "tests/test_c.py::test_x": _all("xfail"),
                    "tests/test_c.py::test_s": _unless({("5.1.0", "0.20.0"): ["not_applicable"]}),
                    "tests/test_c.py::test_n": _all("not_applicable"),
                    "tests/test_c.py::test_i": _unless({("5.4.0", "0.19.0"): ["inconclusive"], ("5.2.0", "0.20.0"): ["xpass"]}),
                    "tests/test_c.py::test_m": _unless({("5.2.0", "0.19.0"): ["not_applicable", "pass"]}),
                },
            )
        }
    },
    "not collected, and a file that stopped importing": {
        "runs": {
            "r": (
                CPU,
                {
                    **BASE,
                    "tests/test_d.py::test_new": _unless({("5.1.0", "0.19.0"): None, ("5.1.0", "0.20.0"): None}),
                    "tests/test_e.py": lambda tf, peft: ["error"] if tf == "5.4.0" else None,  # its tests not collected there
                    "tests/test_e.py::test_1": lambda tf, peft: None if tf == "5.4.0" else ["pass"],
                    "tests/test_e.py::test_2": lambda tf, peft: None if tf == "5.4.0" else ["pass"],
                },
            )
        }
    },
    "quiet tests of a suite, by file and class": {"runs": {"r": (CPU, {**BASE, **_suite(90)})}},
    "renamed tests": {
        "runs": {"r": (CPU, BASE)},
        "renamed": {"tests/test_a.py::test_load": lambda tf, peft: "tests/test_a.py::test_loading" if tf == "5.4.0" else ""},
    },
    "several machines": {
        "runs": {
            "cpu": (CPU, BASE),
            "gpu": (GPU, {**BASE, "tests/test_g.py::test_cuda": _unless({("5.2.0", "0.20.0"): ["oom"]})}),
        }
    },
    "no cell passes every test: drops, a tie by name": {
        "runs": {
            "r": (
                CPU,
                {
                    **BASE,
                    "tests/test_f.py::test_p": _unless({("5.4.0", "0.20.0"): ["fail"], ("5.4.0", "0.19.0"): ["fail"]}),
                    "tests/test_f.py::test_q": _unless({("5.4.0", "0.20.0"): ["fail"], ("5.2.0", "0.20.0"): ["fail"]}),
                    "tests/test_f.py::test_r": _unless({("5.2.0", "0.19.0"): ["timeout"], ("5.1.0", "0.20.0"): ["crash"]}),
                },
            )
        }
    },
    # the one test that ran in tf 5.1.0 × peft 0.19.0 goes first (and last): that cell goes with it
    "a candidate that goes with the last drop": {
        "runs": {
            "r": (
                CPU,
                {
                    "tests/test_a.py::test_1": _fails_in(("5.1.0", "0.19.0"), ("5.2.0", "0.19.0")),
                    **_each_fails_one(("5.4.0", "0.19.0"), ("5.1.0", "0.20.0"), ("5.2.0", "0.20.0"), ("5.4.0", "0.20.0")),
                },
            )
        }
    },
    "two runs of the same cells": {
        "runs": {"old": (CPU, BASE), "new": (CPU, {**BASE, "tests/test_a.py::test_save": _all("pass")})},
    },
    "nothing passes": {"runs": {"r": (CPU, {"tests/test_a.py::test_load": _all("error")})}},
}


#: Cases where a drop could change what ranks the rest (`knowngood.drop_order`, `_narrowed`): Python's rule decides.
HANDED_BACK: dict[str, Case] = {
    # the file fails beside every peft 0.20.0 cell, and goes first; its test is then not collected
    # there because the file failed (`_narrowed`): no cell qualifies, as only Python's rule knows
    "a dropped file that kept its tests from being collected": {
        "runs": {
            "r": (
                CPU,
                {
                    "tests/test_e.py": lambda tf, peft: ["error"] if peft == "0.20.0" else ["pass"],
                    "tests/test_e.py::test_1": lambda tf, peft: None if peft == "0.20.0" else ["pass"],
                    "tests/test_f.py::test_1": _fails_in(("5.1.0", "0.19.0")),
                    "tests/test_f.py::test_2": _fails_in(("5.2.0", "0.19.0")),
                    "tests/test_f.py::test_3": _fails_in(("5.4.0", "0.19.0")),
                },
            )
        }
    },
    # the one test that ran in tf 5.1.0 × peft 0.19.0 goes first, test_2 last: that cell stops being a
    # candidate before the last drop, and a scenario only it missed (no outcome there) then counts less
    "a candidate left with no test before the last drop": {
        "runs": {
            "r": (
                CPU,
                {
                    "tests/test_a.py::test_1": _fails_in(("5.1.0", "0.19.0"), ("5.2.0", "0.19.0"), ("5.4.0", "0.19.0")),
                    "tests/test_a.py::test_2": lambda tf, peft: (
                        None
                        if (tf, peft) == ("5.1.0", "0.19.0")
                        else ["fail"]
                        if (tf, peft) in (("5.2.0", "0.19.0"), ("5.4.0", "0.19.0"))
                        else ["pass"]
                    ),
                    "scenario": lambda tf, peft: None if (tf, peft) == ("5.1.0", "0.19.0") else ["pass"],
                    **_each_fails_one(("5.1.0", "0.20.0"), ("5.2.0", "0.20.0"), ("5.4.0", "0.20.0")),
                },
            )
        }
    },
}


#: No known-good set: nothing passes; or, once the file is dropped, no cell passes the rest (only Python's rule sees it).
NO_TABLE = {"nothing passes", "a dropped file that kept its tests from being collected"}


def _write(db: Path, case: Case) -> None:
    renamed: dict[str, Callable[[str, str], str]] = case.get("renamed", {})
    for run, (host, tests) in case["runs"].items():
        with Store(db) as store:
            store.ensure_run(run, "m.toml", "", {"tests": {"root": "."}}, "0.1.0", host)
            store.record_releases(run, {"transformers": [(v, None) for v in ("5.1.0", "5.2.0", "5.3.0", "5.4.0")]})
            for tf in TF:
                for peft in PEFT:
                    _cell(store, run, tf, peft, tests, renamed)
    assert main(["attribute", "--offline", "--db", str(db)]) == 0  # the answers the tables mark, stored


def _cell(store: Store, run: str, tf: str, peft: str, tests: Mapping[str, Rule], renamed: Mapping[str, Callable[[str, str], str]]) -> None:
    cell = f"tf{tf}-peft{peft}"
    pins = {"transformers": tf, "peft": peft}
    store.record_cell(CellRecord(run, cell, "3.11", pins, [], {**pins, "pytest": "9.0.1"}, {}, {}, "ready", "", 1.0, False))
    for test, rule in tests.items():
        node = renamed[test](tf, peft) if test in renamed else ""
        for repeat, status in enumerate(rule(tf, peft) or []):
            sig = "" if status in ("pass", "not_applicable", "xfail", "xpass") else f"E: {status} in {test}"
            outcome = Outcome(
                run, cell, node or test, repeat, Status(status), message=sig, signature=sig, started_at="2026-11-20T04:00:00",
                test_id=test if node else "",
            )  # fmt: skip
            store.add_outcome(outcome)


@pytest.fixture(params=[*CASES, *HANDED_BACK])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    db = tmp_path / "r.duckdb"
    _write(db, {**CASES, **HANDED_BACK}[request.param])
    return str(request.param), db


@pytest.mark.parametrize("every_row", [False, True])
def test_the_tables_decided_in_duckdb_are_the_tables_read_from_the_rows(
    case: tuple[str, Path], every_row: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, db = case
    if every_row:  # the read of every row, not the loud ones: the same tables
        monkeypatch.setenv(EVERY_ROW, "1")
    with Store(db, read_only=True) as store:
        decided = support._support_in_sql(store)
        read = support._support_read(store)
        shown = support.support_of(store)
    if name in HANDED_BACK:
        assert decided is None
    else:
        assert decided is not None
        assert decided == read
    assert shown == read
    tables, _ = read
    if name in NO_TABLE:
        assert tables == ()
    else:  # each case says something: a table with squares, the line's gap
        assert tables and any(t.entries for t in tables) and any(not c.built for t in tables for c in t.columns)


@pytest.mark.parametrize(
    ("name", "holds"),
    [
        ("introduced and fixed", lambda tables, rows_are, known: sum(t.marked for t in tables) >= 1),
        ("several machines", lambda tables, rows_are, known: {t.machine for t in tables} == {"cpu", "1x NVIDIA H200"}),
        ("quiet tests of a suite, by file and class", lambda tables, rows_are, known: "tests/test_m0.py::TestA" in tables[0].rows),
        (
            "no cell passes every test: drops, a tie by name",
            lambda tables, rows_are, known: known[0].dropped == (DROPPED,),
        ),
    ],
)
def test_the_cases_say_what_they_are_named_for(tmp_path: Path, name: str, holds: Callable[..., bool]) -> None:
    # so that the agreement above says something: marks, two machines, a suite's groups, a drop
    db = tmp_path / "r.duckdb"
    _write(db, CASES[name])
    with Store(db, read_only=True) as store:
        tables, rows_are = support._support_read(store)
        known = answer(store, loud=True).known_good
    assert holds(tables, rows_are, known)


@pytest.mark.parametrize("name", list(CASES))
def test_the_known_good_cell_is_the_one_pythons_rule_chooses(tmp_path: Path, name: str) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, CASES[name])
    with Store(db, read_only=True) as store:
        python = [Chosen.of(k) for k in answer(store, loud=True).known_good]
        decided = _decided(store)
    assert decided == [c for c in python if c is not None]


def _decided(store: Store) -> list[Chosen | None]:
    from harness.storage import support_rows

    pairs, facts = support._pairs(support_rows.cell_rows(store))
    with support_rows.reading(store, pairs) as read:
        found = read.known_good() if read is not None else None
    assert found is not None
    return [c for m in support._classes(pairs) if m in found.classes for c in [support._chosen(m, found.classes[m], facts, pairs)] if c]


@pytest.mark.parametrize(
    "node",
    ["t.py::A::b[x::y]", "t.py::b", "t.py", "gemma4_lora", "", "a:::b::c", "::x::y", "a::::b", "t.py::A::B::c", "dir/t.py::A::b"],
)
def test_a_tests_group_in_sql_is_its_group_in_python(node: str) -> None:
    from harness.analysis.rows import group_of
    from harness.storage.support_rows import _GROUP

    assert duckdb.execute(f"SELECT {_GROUP.format(t='n')} FROM (SELECT ?::VARCHAR AS n)", [node]).fetchone() == (group_of(node),)
