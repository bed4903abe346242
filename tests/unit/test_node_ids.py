"""`queries.node_ids`: the node id refinement hands pytest for a test, read in SQL, is the one the rows give.

A test renamed between releases of the suite has one identity and two node ids; the node id of
its last row in `outcome_rows`' order (by cell, node id, repeat, run) is the one kept, as the
dict made from every row kept it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage import queries
from harness.storage.store import Store

CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": [], "python": "3.11.7"}

CASES = {
    # name: cell -> (node id, test id) of each outcome
    "one node id": {"c1": [("t.py::a", "")], "c2": [("t.py::a", "")]},
    "renamed in the newer cell": {"c1": [("t.py::a_old", "t.py::a")], "c2": [("t.py::a", "")]},
    "renamed in the older cell": {"c1": [("t.py::a", "")], "c2": [("t.py::a_new", "t.py::a")]},
    "two node ids in one cell": {"c1": [("t.py::a", ""), ("t.py::b", "t.py::a")], "c2": [("t.py::z", "t.py::a")]},
    "a scenario": {"c1": [("load_4bit", "")], "c2": [("load_4bit", "")]},
}


def _write(db: Path, cells: dict[str, list[tuple[str, str]]]) -> None:
    with Store(db) as store:
        store.ensure_run("r", "m.toml", "", {}, "0.1.0", CPU)
        for k, (cell, outcomes) in enumerate(cells.items()):
            pins = {"packaging": f"2{k}.0"}
            store.record_cell(CellRecord("r", cell, "3.11", pins, [], pins, {}, {}, "ready", "", 1.0, False))
            for node, test_id in outcomes:
                store.add_outcome(Outcome("r", cell, node, 0, Status.PASS, started_at="2026-11-20T04:00:00", test_id=test_id))


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_node_id_kept_is_the_rows(tmp_path: Path, case: str) -> None:
    db = tmp_path / "r.duckdb"
    _write(db, CASES[case])
    with Store(db, read_only=True) as store:
        every = {str(r["scenario"]): str(r["node_id"]) for r in queries.outcome_rows(store)}
        assert queries.node_ids(store) == every
    assert len(every) == 1


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_tests_rows_by_identity_or_node_id_are_the_rows_that_name_it(tmp_path: Path, case: str) -> None:
    """`harness bisect` with one end reads the test's stored rows in SQL (`outcome_rows_with_traces`), not every row."""
    db = tmp_path / "r.duckdb"
    _write(db, CASES[case])
    with Store(db, read_only=True) as store:
        every = queries.outcome_rows(store)
        for name in {n for outcomes in CASES[case].values() for pair in outcomes for n in pair if n}:
            found = queries.outcome_rows_with_traces(store, scenarios=[name])
            named = [r for r in every if name in (r["scenario"], r["node_id"])]
            assert [{k: r[k] for k in every[0]} for r in found] == named, name  # and the traceback, the output, the first run
