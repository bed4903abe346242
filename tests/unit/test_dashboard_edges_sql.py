"""The Matrix heatmap's edges decided in DuckDB (`pages.heatmap_edges`) against the Python rule they
replace (`heatmap.edges_of` of every stored transition): a table of cases, each compared on what the
heatmap draws from them (its marks and its busiest axis), with every stored row."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import heatmap
from harness.storage import attributed, pages
from harness.storage.store import Store

CELLS = ["c0", "c1", "c2", "c3"]
COLUMNS = [heatmap.Column(c, c, (("transformers", f"5.{i}.0"),)) for i, c in enumerate(CELLS)]


def _t(scenario: str, kind: str = "introduced", **more: Any) -> dict[str, Any]:
    row = {
        "scenario": scenario,
        "signature": "KeyError: <key>",
        "axis": "transformers",
        "kind": kind,
        "before": "5.0.0",
        "after": "5.1.0",
        "before_cell": "c0",
        "after_cell": "c1",
        "description": f"{kind} in transformers 5.1.0 (after 5.0.0) — with torch 2.13.0",
    }
    return {**row, **more}


#: name -> the transitions stored (in this order: `seq`), each case a place where the rules could part.
CASES: dict[str, list[dict[str, Any]]] = {
    "one exact answer": [_t("a")],
    "no description: the fallback headline": [_t("a", description=None), _t("b", description="")],
    "no 'after': the fallback says None, as str() does": [_t("a", description=None, after=None)],
    "a description without its ' — ' part": [_t("a", description="fixed in peft 0.21.0 (after 0.19.1)", kind="fixed")],
    "a description with two ' — '": [_t("a", description="x — y — z")],
    "kinds without an edge": [_t("a", kind="flaky"), _t("b", kind="machine"), _t("c", kind="regressed")],
    "no after cell (NULL or empty)": [_t("a", after_cell=None), _t("b", after_cell="")],
    "no before cell": [_t("a", before_cell=None), _t("b", before_cell="")],
    "repeats of one edge, interleaved with another": [
        _t("t.py::A::x", after_cell="c2", before_cell="c1"),
        _t("t.py::A::y"),
        _t("t.py::A::z", after_cell="c2", before_cell="c1"),
    ],
    "two headlines at one spot, the first kind and signature win": [
        _t("t.py::b", kind="fixed", signature="S2", description="fixed in transformers 5.1.0 (after 5.0.0)"),
        _t("t.py::a", signature="S1"),
        _t("t.py::a", signature="S1", description="introduced in transformers 5.1.0 (between) — x"),
    ],
    "a neighbour and a far before cell at one spot": [_t("t.py::a", before_cell="c0", after_cell="c2"), _t("t.py::b", after_cell="c2")],
    "node ids with '::' in their parameters": [_t("t.py::test_p[a::b]"), _t("u.py::T::test[x::y]", kind="fixed")],
    "a scenario without '::'": [_t("gemma4_load"), _t("gemma4_load", axis="peft", after_cell="c3", before_cell="c2")],
    "the busiest axis counts every transition": [
        _t("t.py::a", axis="peft"),
        _t("t.py::b", axis="transformers"),
        _t("t.py::c", axis="transformers"),
        _t("t.py::d", axis="transformers"),
        _t("t.py::e", axis="peft", after_cell="c3", before_cell="c2"),
    ],
    "a tie between axes": [_t("t.py::a", axis="peft"), _t("t.py::b", axis="transformers")],
    "another scope is not read": [_t("t.py::a")],
    "nothing stored": [],
}


def _store(tmp_path: Path, rows: Sequence[dict[str, Any]], scope: str = "") -> Store:
    store = Store(tmp_path / "r.duckdb")
    store.replace_transitions(list(rows), scope=scope)
    if scope:  # the answers for all runs are another's: one row of them, of another file
        store.replace_transitions([_t("other.py::z", after_cell="c3")], scope="")
    return store


def _drawn(edges: Sequence[heatmap.Edge], counted: Sequence[heatmap.Edge], cells: set[str]) -> tuple[Any, ...]:
    """What the heatmap draws: its marks, and the axis it orders by (`busiest_axis`)."""
    axes = ["peft", "transformers"]
    shown = [e for e in edges if e.after_cell in cells]
    return heatmap.marks(shown, COLUMNS), heatmap.busiest_axis([e for e in counted if e.after_cell in cells], axes)


@pytest.mark.parametrize("by_file", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_sql_edges_draw_what_python_edges_draw(tmp_path: Path, case: str, by_file: bool) -> None:
    scope = "run-1" if case == "another scope is not read" else ""
    with _store(tmp_path, CASES[case], scope) as store:
        group = (lambda s: s.split("::", 1)[0]) if by_file else None
        python = heatmap.edges_of(attributed.transitions(store, ""), group)
        rows = pages.heatmap_edges(store, by_file=by_file)
    sql = [heatmap.Edge(r["row"], r["kind"], r["headline"], r["axis"], r["before_cell"], r["after_cell"], r["signature"]) for r in rows]
    counted = [e for e, r in zip(sql, rows) for _ in range(int(r["n"]))]
    # one row per distinct edge, in the order of its first transition, with how many give it
    assert sql == list(dict.fromkeys(python))
    assert sorted(counted, key=repr) == sorted(python, key=repr)
    for cells in (set(CELLS), {"c1"}, {"c2", "c3"}):
        assert _drawn(sql, counted, cells) == _drawn(python, python, cells)
