"""`harness attribute` writes its answers by column (`attribution.to_columns`, `Store.replace_transition_columns`):
the `transitions` table it leaves is the one the rows (`to_rows`, `Store.replace_transitions`) leave.

The columns hand the answers' own tuples to the encoder, which knows renamed tests' shared
lists by identity: a case where two answers share them, and one where equal lists are distinct
objects, and the other kinds (machine differences, flaky cells) after the transitions.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.analysis.attribution import Attribution, Flaky, MachineDifference, Transition, _renamed, to_columns, to_rows
from harness.storage.store import Store
from harness.workflows.answering import answer

REPO = Path(__file__).resolve().parents[2]
STORED = "SELECT * EXCLUDE (computed_at) FROM transitions ORDER BY scope, seq"

HELD = (("torch", "2.13.0"), ("peft", "0.19.0"))
ONE = Transition(
    "tests/a.py::t1", "E: boom", "transformers", "introduced", "5.5.0", "5.6.0", HELD, "cpu",
    not_built=("5.5.1",), signature_family="E", before_cell="c1", after_cell="c2", runs=("r1", "r2"),
)  # fmt: skip
TWIN = _renamed(ONE, "tests/a.py::t2")  # shares ONE's tuples, as attribution's copies do
EQUAL = Transition(
    "tests/b.py::t3", "E: boom", "transformers", "fixed", "5.6.0", "5.7.0", tuple(list(HELD)), "cpu",
    not_built=tuple(["5.5.1"]), runs=tuple(["r1", "r2"]),
)  # fmt: skip
ANSWERS = Attribution(
    (ONE, TWIN, EQUAL),
    (Flaky("tests/c.py::t4", "E: flaky", "c1", HELD, 1, 3, "E", ("r1",), "cpu", 1, 2, True),),
    (MachineDifference("tests/d.py::t5", "E: gpu", "1x H200", "cpu", "", "", "", HELD, "E", "c3", "c1", ("r1",)),),
)


def _stored(db: Path) -> list[tuple[object, ...]]:
    with Store(db, read_only=True) as store:
        return [tuple(r.values()) for r in store.fetch(STORED)]


def _both(tmp_path: Path, source: Path, answers: Attribution, scope: str) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    by_rows, by_columns = tmp_path / "rows.duckdb", tmp_path / "columns.duckdb"
    shutil.copy(source, by_rows)
    shutil.copy(source, by_columns)
    with Store(by_rows) as store:
        store.replace_transitions(to_rows(answers, scope), scope=scope)
    with Store(by_columns) as store:
        store.replace_transition_columns(to_columns(answers, scope), scope=scope)
    return _stored(by_rows), _stored(by_columns)


def test_every_kind_of_answer_is_stored_as_its_row_would_be(tmp_path: Path) -> None:
    rows, columns = _both(tmp_path, REPO / "results" / "default.duckdb", ANSWERS, "run-1")
    assert rows == columns
    mine = [r for r in columns if r[0] == "run-1"]
    assert [r[1] for r in mine] == ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t3", "tests/d.py::t5", "tests/c.py::t4"]
    assert mine[0][8:11] == mine[1][8:11] == ('["5.5.1"]', "[]", '{"torch": "2.13.0", "peft": "0.19.0"}')  # the twin's lists


def test_a_files_answers_are_stored_as_their_rows_would_be(tmp_path: Path) -> None:
    shipped = REPO / "results" / "default.duckdb"
    with Store(shipped, read_only=True) as store:
        found = answer(store, loud=True).attribution
    assert found.transitions
    rows, columns = _both(tmp_path, shipped, found, "")
    assert rows == columns and len(rows) >= len(found.transitions)
