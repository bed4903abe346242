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


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_node_id_kept_is_the_rows(tmp_path: Path, case: str) -> None:
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        store.ensure_run("r", "m.toml", "", {}, "0.1.0", CPU)
        for k, (cell, outcomes) in enumerate(CASES[case].items()):
            pins = {"packaging": f"2{k}.0"}
            store.record_cell(CellRecord("r", cell, "3.11", pins, [], pins, {}, {}, "ready", "", 1.0, False))
            for node, test_id in outcomes:
                store.add_outcome(Outcome("r", cell, node, 0, Status.PASS, started_at="2026-11-20T04:00:00", test_id=test_id))
    with Store(db, read_only=True) as store:
        every = {str(r["scenario"]): str(r["node_id"]) for r in queries.outcome_rows(store)}
        assert queries.node_ids(store) == every
    assert len(every) == 1
