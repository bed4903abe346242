"""`harness attribute`'s stored transitions read back as written: text with quotes, commas, line
breaks and non-ASCII, NULL apart from "", and the JSON columns as `json.dumps` wrote them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from harness.storage.store import Store

ROWS: list[dict[str, Any]] = [
    {
        "scenario": 'tests/t.py::test_a[x,"y"]',
        "signature": "E: KeyError: 'lm_head'\nline two\r\nthree",
        "signature_family": None,
        "axis": "transformers",
        "kind": "regressed",
        "before": "4.57.0",
        "after": "",
        "untested": ["4.57.1", "4.57.2"],
        "inconclusive": [],
        "held": {"torch": "2.13.0", "peft": "0.17.1"},
        "machine": "1x NVIDIA H200 · linux-x86_64 · Python 3.11 ✓",
        "how": None,
        "runs": ["r1"],
        "description": 'regressed in transformers 4.57.0 — with torch 2.13.0, "peft" 0.17.1',
    },
    {"scenario": "s", "signature": "\x1e", "axis": "peft", "kind": "fixed", "held": {}, "untested": None, "after": 7},
    # equal values of other types encode apart (a memo keyed by value alone would give "[1]" for [True])
    {"scenario": "t", "signature": "", "axis": "peft", "kind": "fixed", "held": {"a": "1"}, "untested": [1], "runs": [True]},
    {"scenario": "u", "signature": "", "axis": "peft", "kind": "fixed", "held": {"a": 1}, "untested": [True], "runs": [1.0]},
]


def _stored(db: Path) -> list[dict[str, Any]]:
    with duckdb.connect(str(db), read_only=True) as con:
        cursor = con.execute("SELECT * FROM transitions ORDER BY seq")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def test_transitions_read_back_as_written(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        assert store.replace_transitions([{**r, "scope": "ignored"} for r in ROWS], scope="run-1") == len(ROWS)
    stored = _stored(db)
    assert [r["seq"] for r in stored] == list(range(len(ROWS)))
    for row, got in zip(ROWS, stored):
        assert got["scope"] == "run-1"
        for column in ("scenario", "signature", "signature_family", "axis", "kind", "before", "after", "machine", "how", "description"):
            value = row.get(column)
            assert got[column] == (value if value is None else str(value)), column  # NULL stays NULL, "" stays "", 7 is "7"
        for column in ("untested", "inconclusive", "held", "runs"):
            assert got[column] == json.dumps(row.get(column)), column
    assert stored[0]["after"] == "" and stored[0]["how"] is None and stored[1]["runs"] == "null"


def test_replacing_a_scope_keeps_the_others(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        store.replace_transitions(ROWS, scope="")
        store.replace_transitions(ROWS[1:2], scope="run-2")
        store.replace_transitions(ROWS[:1], scope="")
    assert sorted((r["scope"], r["scenario"]) for r in _stored(db)) == [("", ROWS[0]["scenario"]), ("run-2", "s")]
