"""The Pin page's pin decided in SQL (`storage.pins`, `pinning.pin_from_store`) against the pin
`analysis.pin.choose` decides over every row (`queries.loud_pin_rows`, what `pin_from_store` read
before issue 48): a table of small stores, each pinned over several selections and constraints,
must give the same `PinResult`, field for field (versions, evidence, excluded and their words,
blocking, failing, counts, first and last seen); and each candidate's count of chosen tests that
do not pass (`pins.failing_counts`) must be what `Candidate.passes` says of its rows; and the
tests the page names as never passed on a machine (`never_passed_on`) what `passing_by_machine` says."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.candidates import Standing
from harness.analysis.machines import ANY_MACHINE
from harness.analysis.outcome import CellRecord
from harness.analysis.pin import DEFAULT_RANKING, Constraints, PinResult, candidates_of, choose, standings
from harness.analysis.rows import by_cell
from harness.storage import pins, queries, recorded
from harness.storage.store import Store
from harness.workflows.pinning import (
    _members,
    machines_of,
    never_passed_on,
    passing_by_machine,
    pin_and_never,
    pin_from_store,
    with_full_freeze,
    with_machines,
)

CPU = {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0, "python": "3.11.7"}
H200 = {"platform": "linux-x86_64", "gpu": "NVIDIA H200", "gpu_count": 2, "python": "3.12.3"}
T0 = datetime(2026, 11, 1, 12, 0, 0)
#: cell -> its axes (installed as asked, unless the case says otherwise)
CELLS = {
    "A": {"torch": "2.13.0", "peft": "0.19.1"},
    "B": {"torch": "2.13.0", "peft": "0.20.0"},
    "C": {"torch": "2.14.0", "peft": "0.19.1"},
    "D": {"torch": "2.14.0", "peft": "0.20.0"},
    "E": {"torch": "2.14.0", "peft": "git+https://github.com/huggingface/peft@abc"},
}
#: (run, cell, node id, test id or "", repeat, status, signature, message, minutes after T0 or None)
Row = tuple[str, str, str, str, int, str, str, str, int | None]


def grid(statuses: Mapping[str, Mapping[str, Any]], run: str = "r1", minute: int = 1, test_id: str = "") -> list[Row]:
    """test -> cell -> a status (or one per repeat): the rows, signatures made from the status and test."""
    rows: list[Row] = []
    for node, cells in statuses.items():
        for cell, found in cells.items():
            for repeat, status in enumerate([found] if isinstance(found, str) else found):
                quiet = status in ("pass", "xfail", "not_applicable", "skipped")
                signature = "" if quiet else f"E: {node.split('::')[-1]} {status}"
                rows.append((run, cell, node, test_id, repeat, status, signature, "", minute))
    return rows


EVERY = {c: "pass" for c in "ABCD"}
QUIET = {f"q.py::test_{i}": dict(EVERY) for i in range(3)}  # passed everywhere: the old read's stand-in
CASES: dict[str, dict[str, Any]] = {
    "the newest passes, quiet tests beside": {"rows": grid({**QUIET, "t.py::a": dict(EVERY)})},
    "the newest fails one test: its neighbour excluded": {
        "rows": grid({**QUIET, "t.py::a": {**EVERY, "D": "error"}, "t.py::b": {**EVERY, "C": "fail"}})
    },
    "repeats: flaky, and a tie between two failures": {
        "rows": grid(
            {
                **QUIET,
                "t.py::a": {"A": ["pass", "pass"], "B": ["pass", "pass"], "C": ["fail", "error"], "D": ["pass", "fail"]},
                "t.py::b": {"A": ["pass", "pass"], "B": ["error", "error"], "C": ["pass", "pass"], "D": ["pass", "pass"]},
            }
        )
    },
    "flaky across runs, and marked by the history": {
        "rows": grid({**QUIET, "t.py::a": dict(EVERY), "t.py::b": dict(EVERY)})
        + grid({"t.py::a": {"D": "error"}, "t.py::b": {"A": "pass"}}, run="r2", minute=40)
        + grid({"q.py::test_0": {"D": "pass"}, "q.py::test_1": {"D": "pass"}}, run="r2", minute=40),
        "runs": {"r1": CPU, "r2": CPU},
        "flaky": [("r1", "B", "t.py::b", "E: b error", "flaky across runs: failed in 1 of 2 runs"), ("r1", "C", "t.py::b", None, None)],
    },
    "mixed statuses: not applicable, inconclusive, xfail, a message without a signature": {
        "rows": [
            *grid({**QUIET, "t.py::a": {**EVERY, "D": "not_applicable"}, "t.py::b": {**EVERY, "B": "inconclusive", "D": "xfail"}}),
            ("r1", "A", "t.py::c", "", 0, "crash", "", "  Segfault at 0x0\nmore", 2),
            ("r1", "B", "t.py::c", "", 0, "error", "error: already worded", "", 2),
            ("r1", "C", "t.py::c", "", 0, "timeout", "", "", 2),
            ("r1", "D", "t.py::c", "", 0, "pass", "", "", 2),
        ],
    },
    "not collected: a node id missing passes, a scenario missing does not": {
        "rows": grid({**QUIET, "t.py::a": {"C": "pass", "D": "pass"}, "load": {"A": "pass", "B": "pass", "D": "pass"}})
        + grid({"u.py": {"D": "error"}, "t.py::b": {"A": "pass", "B": "error"}})
    },
    "renamed tests: two node ids, one identity": {
        "rows": grid({**QUIET})
        + grid({"t.py::a_old": {"A": "pass", "B": "pass"}}, test_id="t.py::a")
        + grid({"t.py::a": {"C": "pass", "D": "error"}}, test_id="t.py::a")
        + grid({"t.py::a_v2": {"D": "pass"}}, test_id="t.py::a")
        + grid({"t.py::b": {"A": "pass", "B": "fail", "C": "pass", "D": "pass"}}, test_id="t.py::b"),
    },
    "machines: a CPU run and a GPU run, one cell in both": {
        "rows": grid({**QUIET, "t.py::a": dict(EVERY), "t.py::b": {"A": "pass", "B": "pass"}})
        + grid({"t.py::a": {"A": "error", "C": "pass", "D": "pass"}, "t.py::b": {"C": "not_applicable", "D": "pass"}}, run="g1", minute=30),
        "runs": {"r1": CPU, "g1": H200},
        "constraints": [Constraints(machine="2x NVIDIA H200"), Constraints(gpu="h200", platform="linux"), Constraints(gpu="cpu")],
    },
    "axis filters: a local build and a git source": {
        "rows": grid({**QUIET, "t.py::a": {**EVERY, "E": "pass"}, "t.py::b": {**EVERY, "D": "fail", "E": "pass"}}),
        "installed": {"A": {"torch": "2.13.0+cpu"}, "B": {"torch": "2.13.0+cpu"}},
        "constraints": [
            Constraints((("peft", "<0.20"),)),
            Constraints((("torch", "==2.14.0"), ("peft", "==git+https://github.com/huggingface/peft"))),
        ],
    },
    "ties: one set in two runs, starts in one minute and none": {
        "rows": grid({**QUIET, "t.py::a": dict(EVERY), "t.py::b": {**EVERY, "D": "fail"}}, minute=5)
        + grid({"t.py::a": {"B": "pass"}, "t.py::b": {"B": "pass"}}, run="r2", minute=5)
        + [("r2", "A", "t.py::a", "", 0, "pass", "", "", None)],
        "runs": {"r1": CPU, "r2": CPU},
    },
    "nothing passes: more blockers than a line names": {
        "rows": grid({f"t.py::test_{i}": {c: ("error" if (i + ord(c)) % 3 else "pass") for c in "ABCD"} for i in range(9)})
    },
    "untested combinations: a newer version passes only beside others": {
        "rows": grid({"t.py::a": {"A": "pass", "B": "pass", "C": "pass"}, "t.py::b": {"A": "pass", "B": "pass", "C": "pass"}}),
    },
    "untested combinations: a newer version fails wherever it was tested": {
        "rows": grid({"t.py::a": {"A": "pass", "B": "pass", "C": "error"}, "t.py::b": {"A": "pass", "B": "pass", "C": "fail"}}),
    },
    "a neighbour fails more tests than a line names": {
        "rows": grid({**QUIET, **{f"t.py::test_{i}": {**EVERY, "D": "error"} for i in range(5)}}),
    },
    "a run not recorded, a cell without versions": {
        "rows": grid({**QUIET, "t.py::a": dict(EVERY)}) + grid({"t.py::a": {"X": "pass"}}, run="ghost"),
        "no_versions": ["C"],
    },
}


def _store(path: Path, case: dict[str, Any]) -> Path:
    runs: dict[str, dict[str, Any]] = case.get("runs", {"r1": CPU})
    rows: list[Row] = case["rows"]
    with Store(path) as store:
        for run, host in runs.items():
            store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", host)
        for run, cell in sorted({(r[0], r[1]) for r in rows if r[0] in runs}):
            versions = {} if cell in case.get("no_versions", []) else dict(CELLS.get(cell, {"torch": "2.12.0"}))
            installed = {**versions, **case.get("installed", {}).get(cell, {}), "numpy": "2.3.4"}
            store.record_cell(CellRecord(run, cell, "3.11", versions, [], installed, {}, {}, "ready", "", 1.0, False))
        for run, cell, node, test_id, repeat, status, signature, message, minutes in rows:
            started = None if minutes is None else T0 + timedelta(minutes=minutes)
            store.con.execute(
                "INSERT INTO outcomes (run_id, cell_id, scenario, test_id, repeat, status, signature, message, started_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run, cell, node, test_id or None, repeat, status, signature or None, message or None, started],
            )
        for mark in case.get("flaky", []):
            store.con.execute("INSERT INTO flaky VALUES (?, ?, ?, ?, ?)", list(mark))
    return path


def pin_as_before(store: Store, scenarios: Sequence[str], constraints: Constraints, ranking: Sequence[str] = DEFAULT_RANKING) -> PinResult:
    """`pin_from_store` before issue 48: every row of the chosen tests read, `choose` over them."""
    pushed = {axis: [spec.removeprefix("==")] for axis, spec in constraints.fixed if spec.startswith("==")}
    rows, quiet = queries.loud_pin_rows(store, list(scenarios), pushed)
    if constraints.machine:
        with_machines(rows, recorded.runs(store))
    result = choose(rows, scenarios, constraints, ranking, quiet=quiet)
    return with_full_freeze(result, recorded.cell_records(store, result.cell_ids[0]) if result.found else [])


def _tests(case: dict[str, Any]) -> list[str]:
    return sorted({r[3] or r[2] for r in case["rows"]})


def _selections(case: dict[str, Any]) -> list[list[str]]:
    every = _tests(case)
    loud = [t for t in every if not t.startswith("q.py")]
    return [every, [*reversed(loud[-3:]), loud[-1]]]  # and a selection out of order, with a test twice


def _constraints(case: dict[str, Any]) -> list[Constraints]:
    """Every case under no constraint, one machine class and one held axis; some under their own."""
    return [Constraints(), Constraints(machine="cpu"), Constraints((("torch", "==2.13.0"),)), *case.get("constraints", [])]


@pytest.mark.parametrize("name", list(CASES))
def test_the_pin_decided_in_sql_is_the_pin_over_every_row(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    with Store(_store(tmp_path / "s.duckdb", case), read_only=True) as store:
        for chosen in _selections(case):
            for constraints in _constraints(case):
                for ranking in (DEFAULT_RANKING, ("torch", "peft")) if constraints == Constraints() else (DEFAULT_RANKING,):
                    before = pin_as_before(store, chosen, constraints, ranking)
                    after = pin_from_store(store, chosen, constraints, ranking)
                    assert after == before, (chosen, constraints, ranking)
                    assert after.describe() == before.describe()
                    assert [e.describe() for e in after.excluded] == [e.describe() for e in before.excluded]


@pytest.mark.parametrize("name", list(CASES))
def test_each_candidates_failing_count_is_what_its_rows_say(tmp_path: Path, name: str) -> None:
    """`pins.failing_counts` (SQL) against `Candidate.passes` (Python) over the same candidates."""
    case = CASES[name]
    with Store(_store(tmp_path / "s.duckdb", case), read_only=True) as store:
        for chosen in _selections(case):
            for constraints in _constraints(case):
                assert _sql_counts(store, chosen, constraints) == _python_counts(store, chosen, constraints), (chosen, constraints)


def _sql_counts(store: Store, chosen: Sequence[str], constraints: Constraints) -> dict[tuple[tuple[str, str], ...], int]:
    with store.reading(), pins.chosen_table(store, chosen) as table:
        cells: list[Standing] = standings(pins.pairs(store, table), constraints)
        members = _members(cells)
        with pins.loud_table(store, table, members) as loud:
            counts = pins.failing_counts(store, loud, table, members)
    return {tuple(sorted(c.versions.items())): counts[k] for k, c in enumerate(cells)}


def _python_counts(store: Store, chosen: Sequence[str], constraints: Constraints) -> dict[tuple[tuple[str, str], ...], int]:
    with store.reading():  # its temporary table lives on one connection
        rows, _ = queries._pin_rows(store, list(chosen), None, quiet_as_one=False)  # every row: no stand-in
    with_machines(rows, recorded.runs(store))
    cells = candidates_of(by_cell(queries.mark_flaky(store, rows)), set(chosen), constraints)
    wanted = set(chosen)
    return {tuple(sorted(c.versions.items())): len(wanted - c.passes(wanted)) for c in cells}


def test_the_cases_reach_every_kind_of_answer(tmp_path: Path) -> None:
    """The table above is worth its time: it finds pins, excludes newer versions for each reason,
    finds nothing, and words failures of repeats, of runs, of the history and of a missing scenario."""
    said: list[str] = []
    found = nothing = 0
    for k, case in enumerate(CASES.values()):
        with Store(_store(tmp_path / f"{k}.duckdb", case), read_only=True) as store:
            for chosen in _selections(case):
                result = pin_from_store(store, chosen, Constraints())
                found += result.found
                nothing += not result.found
                said += result.describe()
    text = "\n".join(said)
    assert found and nothing
    for words in (
        "not tested with the pinned versions of the other axes; passes with",
        "fails in every cell that has it",
        "flaky: 1 of 2 repeat(s) did not pass",
        "flaky across runs",
        "no outcome",
        "inconclusive",
        "not_applicable",
        "and 2 more",
        "crash: Segfault at 0x0",
        "error: already worded",
    ):
        assert words in text, words


@pytest.mark.parametrize("name", ["machines: a CPU run and a GPU run, one cell in both", "renamed tests: two node ids, one identity"])
def test_never_passed_asks_the_chosen_tests_what_passing_by_machine_says_of_all(tmp_path: Path, name: str) -> None:
    """The Pin page's "never passed on this machine" (`never_passed_on`, of the chosen tests) against
    `passing_by_machine` (every test on every machine), on each machine class and on all pooled."""
    case = CASES[name]
    with Store(_store(tmp_path / "s.duckdb", case), read_only=True) as store:
        by_machine = passing_by_machine(store)
        for machine in [*machines_of(store), ANY_MACHINE]:
            passing = {s for names in by_machine.values() for s in names} if machine == ANY_MACHINE else set(by_machine.get(machine, []))
            for chosen in _selections(case):
                never = [t for t in chosen if t not in passing]
                assert never_passed_on(store, chosen, machine) == never, (machine, chosen)
                result, said = pin_and_never(store, chosen, Constraints(machine="" if machine == ANY_MACHINE else machine), machine=machine)
                assert said == ([] if result.found else never)
        assert never_passed_on(store, ["t.py::b"], "2x NVIDIA H200") == ([] if "machines" in name else ["t.py::b"])
