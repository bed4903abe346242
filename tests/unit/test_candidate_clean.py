"""A candidate's clean tests (`Candidate.clean`: every outcome there passed, none flaky across
runs) are worked out while `pin.candidates_of` reads its rows, not in a second pass over them:
they must be what the rule says over the candidate's rows, for cells of one set of versions
pooled from two runs, repeats that disagree, a test flaky across runs and tests not asked for."""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.analysis.candidates import Candidate
from harness.analysis.pin import Constraints, candidates_of
from harness.analysis.rows import by_cell

STATUSES = ["pass"] * 5 + ["fail", "error", "not_applicable", "xfail"]


def _rows(seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    rows = []
    for run in ("r1", "r2"):
        for c in range(rnd.randint(1, 4)):
            versions = {"torch": "2.13.0", "peft": f"0.{c % 2}.0"}  # cells c0 and c2 hold the same versions: pooled
            for s in range(rnd.randint(1, 6)):
                for repeat in range(rnd.choice([1, 1, 3])):
                    row = {"cell_id": f"c{c}", "scenario": f"t.py::test_{s}", "status": rnd.choice(STATUSES), "repeat": repeat}
                    row |= {"run_id": run, "versions": versions, "signature": "" if row["status"] == "pass" else "E"}
                    if rnd.random() < 0.05:
                        row |= {"flaky_across": "flipped with nothing changed", "flaky_signature": "E"}
                    rows.append(row)
    return rows


def _by_rule(cell: Candidate) -> set[str]:
    """`Candidate.clean` worked out from the candidate's rows (no `known_clean`)."""
    return Candidate(cell.versions, rows=cell.rows).clean


@pytest.mark.parametrize("seed", range(40))
def test_the_clean_tests_are_the_rules_over_the_rows(seed: int) -> None:
    rows = _rows(seed)
    asked = {r["scenario"] for r in rows if r["scenario"] != "t.py::test_0"}  # one test not asked for
    cells = candidates_of(by_cell(rows), asked, Constraints())
    assert cells
    for cell in cells:
        assert cell.known_clean is not None
        assert cell.clean == _by_rule(cell)
        assert cell.clean <= asked


def test_a_failing_repeat_and_a_flip_across_runs_are_not_clean() -> None:
    base = {"cell_id": "c0", "repeat": 0, "run_id": "r1", "versions": {"torch": "2.13.0"}, "signature": ""}
    rows = [
        {**base, "scenario": "t.py::a", "status": "pass"},
        {**base, "scenario": "t.py::b", "status": "pass"},
        {**base, "scenario": "t.py::b", "status": "fail", "repeat": 1, "signature": "E"},
        {**base, "scenario": "t.py::c", "status": "pass", "flaky_across": "flipped", "flaky_signature": "E"},
    ]
    (cell,) = candidates_of(by_cell(rows), {"t.py::a", "t.py::b", "t.py::c"}, Constraints())
    assert cell.clean == {"t.py::a"}
