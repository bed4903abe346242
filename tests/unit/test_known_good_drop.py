"""The known-good set's drop order, worked out in one pass, against the rule it implements.

The rule (`knowngood.choose_for_passing`): while no candidate cell passes every wanted scenario, drop
the one that does not pass in the most candidate cells (the first by name on a tie), and ask
again. `reference` asks `choose` again after every drop, as the harness did before; the fast
path must give the same result, field by field, on random tables: scenarios and tests, repeats,
cells that ran only some scenarios (they stop being candidates when those are dropped), files
that failed to collect.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.analysis import knowngood, pin
from harness.analysis.status import Status

STATUSES = ["pass"] * 4 + ["fail", "error", "not_applicable", "inconclusive"]


def reference(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], list[str]] | None:
    passing = sorted({r["scenario"] for r in rows if r["status"] == Status.PASS})
    if not passing:
        return None
    wanted, dropped = list(passing), []
    result = pin.choose(rows, wanted)
    while not result.found and len(wanted) > 1:
        worst = result.failing[0][0]
        wanted.remove(worst)
        dropped.append(worst)
        result = pin.choose(rows, wanted)
    return result.to_dict(), wanted, dropped


def table(seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    suite = seed % 2 == 0  # node ids (a test a cell does not collect is no miss) or scenarios
    cells, scenarios = rnd.randint(1, 6), rnd.randint(1, 8)
    rows = []
    for c in range(cells):
        versions = {"torch": "2.13.0", "peft": f"0.{c}.0"}
        ran = [s for s in range(scenarios) if rnd.random() < 0.8] or [0]
        for s in ran:
            name = f"t{s % 2}.py::test_{s}" if suite else f"s{s}"
            for repeat in range(rnd.choice([1, 1, 2])):
                status = rnd.choice(STATUSES)
                signature = f"E{s}" if status != "pass" else ""
                rows.append(
                    {
                        "cell_id": f"c{c}",
                        "scenario": name,
                        "status": status,
                        "repeat": repeat,
                        "run_id": "r",
                        "versions": versions,
                        "signature": signature,
                    }
                )
        if suite and rnd.random() < 0.3:  # a test file that did not import there
            rows.append(
                {
                    "cell_id": f"c{c}",
                    "scenario": f"t{rnd.randint(0, 1)}.py",
                    "status": "error",
                    "repeat": 0,
                    "run_id": "r",
                    "versions": versions,
                    "signature": "SyntaxError",
                }
            )
    return rows


@pytest.mark.parametrize("seed", range(300))
def test_the_drop_order_follows_the_rule(seed: int) -> None:
    rows = table(seed)
    fast = knowngood.choose_for_passing(rows)
    assert (None if fast is None else (fast[0].to_dict(), fast[1], fast[2])) == reference(rows)


def test_the_tables_drop_often() -> None:
    # the comparison above means little if nothing is ever dropped
    assert sum(bool(reference(table(seed)) and reference(table(seed))[2]) for seed in range(300)) > 100  # type: ignore[index]


def test_a_cell_that_ran_only_dropped_scenarios_stops_counting() -> None:
    # c0 ran only `a`, which fails there; c1 and c2 fail `b` and pass `a`. Dropping `b` (2 cells)
    # first leaves c1 passing `a`: the set is c1's, and `a` is kept.
    rows = [
        {"cell_id": "c0", "scenario": "a", "status": "fail", "repeat": 0, "run_id": "r", "versions": {"peft": "0.3.0"}, "signature": "E"},
        *[
            {"cell_id": f"c{c}", "scenario": s, "status": st, "repeat": 0, "run_id": "r", "versions": {"peft": f"0.{c}.0"}, "signature": ""}
            for c in (1, 2)
            for s, st in (("a", "pass"), ("b", "fail"))
        ],
        {"cell_id": "c3", "scenario": "b", "status": "pass", "repeat": 0, "run_id": "r", "versions": {"peft": "0.0.1"}, "signature": ""},
    ]
    result, kept, dropped = knowngood.choose_for_passing(rows)  # type: ignore[misc]
    assert (dict(result.versions), kept, dropped) == ({"peft": "0.2.0"}, ["a"], ["b"])
    assert (result.to_dict(), kept, dropped) == reference(rows)


def _row(cell: str, scenario: str, status: str) -> dict[str, Any]:
    return {"cell_id": cell, "scenario": scenario, "status": status, "repeat": 0, "run_id": "r", "versions": {"peft": f"0.{cell[1:]}.0"}}


def test_a_cell_gone_from_the_candidates_no_longer_counts_its_misses() -> None:
    # c9 ran one test, t0.py::a (fails), and t1.py did not import there: t1.py::b is missed in c9
    # too. Counts: a 2 (c9, c3), b 2 (c9, c2), c 2 (c1, c3). `a` goes first (by name), which
    # leaves c9 with no outcome of a wanted test: it is no longer a candidate, so `b` now
    # fails in 1 cell and `c` in 2, and `c` goes next: c1 and c3 pass `b`, and c3 is newer.
    # Counting c9 still would drop `b` instead and choose c2, the only cell passing `c`.
    a, b, c = "t0.py::a", "t1.py::b", "t2.py::c"
    rows = [
        _row("c9", a, "fail"),
        _row("c9", "t1.py", "error"),
        *(_row("c1", s, st) for s, st in ((a, "pass"), (b, "pass"), (c, "fail"))),
        *(_row("c2", s, st) for s, st in ((a, "pass"), (b, "fail"), (c, "pass"))),
        *(_row("c3", s, st) for s, st in ((a, "fail"), (b, "pass"), (c, "fail"))),
    ]
    result, kept, dropped = knowngood.choose_for_passing(rows)  # type: ignore[misc]
    assert (dict(result.versions), kept, dropped) == ({"peft": "0.3.0"}, [b], [a, c])
    assert (result.to_dict(), kept, dropped) == reference(rows)
