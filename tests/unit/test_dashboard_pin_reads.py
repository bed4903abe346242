"""The Pin and Compare pages' faster reads (harness/storage/pages.py) against the reads they replace:
`pages.test_pass_counts` against `suites.test_pass_counts` (its shortcut, one outcome per test and
cell, and its fallback), `pages.newest_host` against `pinning.newest_machine_of`, and
`suites.test_diff` (its comparison computed once, into a table) against the three reads it made
before (`_diff_as_before`): a table of cases, each the same rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.outcome import CellRecord
from harness.analysis.rows import machine_class
from harness.storage import pages, suites
from harness.storage.store import Store
from harness.workflows.pinning import newest_machine_of

CPU = {"platform": "linux-x86_64", "gpu": "cpu", "gpu_count": 0}
H200 = {"platform": "linux-x86_64", "gpu": "NVIDIA H200", "gpu_count": 2}
T0 = datetime(2026, 11, 1, 12, 0, 0)

#: (run, cell, node id, repeat, status, signature, minutes after T0 or None: no start time)
Row = tuple[str, str, str, int, str, str, int | None]
#: name -> (runs: run id -> host, rows)
CASES: dict[str, tuple[dict[str, dict[str, Any]], list[Row]]] = {
    "one outcome per test and cell": (
        {"r1": CPU},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 1),
            ("r1", "B", "t.py::test_a", 0, "fail", "E: x", 2),
            ("r1", "A", "t.py::T::test_b[1]", 0, "not_applicable", "", 3),
            ("r1", "B", "t.py::T::test_b[1]", 0, "xfail", "", 4),
            ("r1", "A", "u.py::test_c", 0, "error", "E: y", 5),
            ("r1", "B", "u.py::test_c", 0, "crash", "", 6),
            ("r1", "C", "u.py::test_c", 0, "pass", "", None),
            ("r1", "C", "t.py::test_a", 0, "timeout", "", 7),
        ],
    ),
    "repeats: a flaky cell neither passes nor only fails": (
        {"r1": CPU},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 1),
            ("r1", "A", "t.py::test_a", 1, "fail", "E: x", 2),
            ("r1", "B", "t.py::test_a", 0, "pass", "", 3),
            ("r1", "B", "t.py::test_a", 1, "not_applicable", "", 4),
            ("r1", "A", "t.py::test_b", 0, "not_applicable", "", 5),
            ("r1", "A", "t.py::test_b", 1, "not_applicable", "", 6),
        ],
    ),
    "two runs on two kinds of host, one cell in both": (
        {"r1": CPU, "r2": H200},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 1),
            ("r2", "A", "t.py::test_a", 0, "fail", "E: cuda", 20),
            ("r1", "B", "t.py::test_a", 0, "pass", "", 2),
            ("r2", "B", "t.py::test_b", 0, "pass", "", 21),
        ],
    ),
    "two runs of one kind of host, each cell in one": (
        {"r1": CPU, "r2": CPU},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 1),
            ("r2", "B", "t.py::test_a", 0, "error", "E: y", 30),
            ("r2", "B", "t.py::test_b", 0, "pass", "", 30),
        ],
    ),
    "a run without a host, ties in the newest start": (
        {"r1": {}, "r2": H200},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 9),
            ("r2", "B", "t.py::test_a", 0, "pass", "", 9),
            ("r1", "B", "t.py::test_b", 0, "fail", "E: z", None),
        ],
    ),
    "a run not in the runs table": (
        {"r1": CPU},
        [
            ("r1", "A", "t.py::test_a", 0, "pass", "", 1),
            ("ghost", "B", "t.py::test_a", 0, "pass", "", 50),
        ],
    ),
    "no start times at all": ({"r1": CPU}, [("r1", "A", "t.py::test_a", 0, "pass", "", None)]),
    "no outcomes": ({"r1": CPU}, []),
}


def _store(path: Path, case: str) -> Path:
    runs, rows = CASES[case]
    with Store(path) as store:
        for run, host in runs.items():
            store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", host)
        for run, cell in sorted({(r[0], r[1]) for r in rows if r[0] in runs}):
            versions = {"torch": "2.13.0", "peft": {"A": "0.19.1", "B": "0.20.0", "C": "0.21.2"}[cell]}
            store.record_cell(CellRecord(run, cell, "3.11", versions, [], versions, {}, {}, "ready", "", 1.0, False))
        for run, cell, node, repeat, status, signature, minutes in rows:
            started = None if minutes is None else T0 + timedelta(minutes=minutes)
            store.con.execute(
                "INSERT INTO outcomes (run_id, cell_id, scenario, repeat, status, signature, started_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [run, cell, node, repeat, status, signature, started],
            )
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_the_pin_page_reads_say_what_the_old_reads_say(tmp_path: Path, case: str) -> None:
    with Store(_store(tmp_path / "s.duckdb", case), read_only=True) as store:
        assert pages.test_pass_counts(store) == suites.test_pass_counts(store)
        host = pages.newest_host(store)
        assert (machine_class(host[0]) if host else "") == newest_machine_of(store)
        cells = sorted({r[1] for r in CASES[case][1]})
        for a, b in [(x, y) for x in cells for y in cells if x != y] + [("A", "nowhere")]:
            for search in ("", "test_a", "T::"):
                for limit in (1, 500):
                    assert suites.test_diff(store, a, b, search, limit=limit) == _diff_as_before(store, a, b, search, limit)


def _diff_as_before(store: Store, a: str, b: str, search: str, limit: int) -> dict[str, Any]:
    """`suites.test_diff` as it read before: the per-test comparison worked out in each of its three reads."""
    from harness.storage import clauses

    where, params = suites._test_where({"cell_id": [a, b]}, search)
    differs = '"A" <> "B" OR "A signature" <> "B signature"'
    base = f"""
        WITH t AS (
            SELECT {clauses.identity_column(store)} AS test, scenario AS node, {suites._LEVELS["group"]} AS grp, cell_id,
                   {suites._WORST} AS worst,
                   COALESCE(mode(signature) FILTER (WHERE signature <> '' AND status IN ({clauses.FAILING})), '') AS signature
            FROM outcomes_v{where} GROUP BY ALL
        ),
        d AS (
            SELECT COALESCE(any_value(node) FILTER (WHERE cell_id = ?), any_value(node)) AS scenario, grp,
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "A",
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "B",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "A signature",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "B signature"
            FROM t GROUP BY test, grp
        )
    """
    both = [*params, a, a, b, a, b]
    tests = store.fetch(base + f"SELECT count(*) AS n, count(*) FILTER ({differs}) AS differ FROM d", both)[0]
    groups = store.fetch(base + f'SELECT grp AS "group", count(*) AS tests FROM d WHERE {differs} GROUP BY 1 ORDER BY 2 DESC, 1', both)
    shown = 'scenario, "A", "B", "A signature", "B signature"'
    rows = store.fetch(base + f"SELECT {shown} FROM d WHERE {differs} ORDER BY scenario LIMIT {int(limit)}", both)
    return {"tests": int(tests["n"]), "differ": int(tests["differ"] or 0), "groups": groups, "rows": rows}
