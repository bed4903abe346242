"""`suites.test_group_tallies` reads the outcomes alone where no filter narrows the (run, cell) pairs
and no GPU is asked for: the same rows as the rule it replaced (kept here verbatim as `_old_tallies`,
which always joined every outcome to its admitted pair), over files with one night, repeats, two
hosts and two runs of a cell, every filter alone and together, searched, failing only, by GPU."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.analysis.status import Status
from harness.storage import clauses, suites
from harness.storage.clauses import Filters
from harness.storage.resultsfile import SqlResultsFile
from harness.storage.store import Store
from harness.storage.suites import _LEVELS, _WORST
from tests.unit.test_dashboard_app import CPU, H200, SIG_SUITE, cell_id, outcome, record


def _old_tallies(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    level: str = "file",
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
) -> list[dict[str, Any]]:
    ctes, params, where, outcome_params = clauses.admitted_pairs(filters)
    conditions = [where.removeprefix(" WHERE ")] if where else []
    found = [*outcome_params]
    if search:
        conditions.append("strpos(lower(scenario), lower(?)) > 0")
        found.append(search)
    for name, value in sorted((within or {}).items()):
        conditions.append(f"{_LEVELS[name]} = ?")
        found.append(value)
    if failing_only:
        inner = " AND ".join([*([where.removeprefix(" WHERE ")] if where else []), f"status IN ({clauses.FAILING})"])
        conditions.append(f"scenario IN (SELECT scenario FROM outcomes SEMI JOIN admitted USING (run_id, cell_id) WHERE {inner})")
        found += outcome_params
    narrowed = (" WHERE " + " AND ".join(conditions)) if conditions else ""
    gpu = ", COALESCE(a.gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE worst = '{s}') AS {s}" for s in Status)
    with store.reading():
        shape = store.fetch(f"WITH {ctes} SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeats), 0) AS r FROM admitted", params)[0]
        one_each = shape["runs"] <= 1 and shape["r"] == 0
        worst, grouped = ("status", "") if one_each else (_WORST, " GROUP BY ALL")
        name = f"{_LEVELS[level]} AS name, cell_id{gpu}" + ("" if one_each else ", scenario")
        per_test = f"SELECT {name}, {worst} AS worst FROM outcomes JOIN admitted a USING (run_id, cell_id){narrowed}{grouped}"
        return store.fetch(
            f"WITH {ctes}, t AS ({per_test}) SELECT name, cell_id{', gpu' if by_gpu else ''}, count(*) AS tests, {counts} "
            "FROM t GROUP BY ALL ORDER BY ALL",
            [*params, *found],
        )


#: node id -> its status in cells A, B and C
NIGHT = {
    "tests/test_a.py::TestLora::test_merge[4bit]": ("pass", "error", "fail"),
    "tests/test_a.py::TestLora::test_load": ("pass", "pass", "crash"),
    "tests/test_a.py::test_plain[x::y]": ("pass", "not_applicable", "pass"),
    "tests/test_b.py::TestQuant::test_known": ("xfail", "xfail", "xpass"),
    "tests/test_b.py::test_100%_literal": ("pass", "timeout", "pass"),
    "tests/test_c.py": ("error", "error", "error"),  # a file that failed to collect: its own file and group
}


def _write(path: Path, hosts: dict[str, dict[str, Any]], repeats: bool) -> Path:
    with Store(path) as store:
        for run, host in hosts.items():
            store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", host)
            for name in ("A", "B", "C"):
                store.record_cell(record(run, name))
            for node, shows in NIGHT.items():
                for name, status in zip(("A", "B", "C"), shows):
                    o = outcome(run, cell_id(name), node, status, SIG_SUITE if status != "pass" else "", "2026-11-01T10:00:00")
                    store.add_outcome(o)
                    if repeats and "merge" in node:  # a flaky repeat: passes where the first failed, and the reverse
                        again = "pass" if status != "pass" else "error"
                        store.add_outcome(dataclasses.replace(o, repeat=1, status=Status(again)))
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tallies")
    return {
        "one night": _write(folder / "night.duckdb", {"n1": CPU}, repeats=False),
        "repeats": _write(folder / "repeats.duckdb", {"n1": CPU}, repeats=True),
        "two hosts": _write(folder / "hosts.duckdb", {"cpu": CPU, "gpu": H200}, repeats=False),
    }


FILTERS: list[dict[str, list[str]]] = [
    {},
    {"transformers": []},  # no values: no filter
    {"run_id": ["n1", "gpu"]},
    {"cell_id": [cell_id("A"), cell_id("C")], "status": ["error", "pass"]},
    {"scenario": ["tests/test_c.py"]},
    {"transformers": ["5.23.0"]},
    {"gpu": ["NVIDIA H200"]},
    {"platform": ["linux-x86_64"], "run_id": ["cpu"]},
    {"numpy": ["2.2.6"]},  # an axis that is no column: read from each cell's freeze
]
READS = [
    ("", False, False, "file", None),
    ("merge", False, True, "file", None),
    ("", True, False, "group", None),
    ("TEST_", True, True, "group", {"file": "tests/test_a.py"}),
    ("100%", False, False, "group", {"group": "tests/test_b.py::TestQuant"}),
    ("", True, True, "file", {"file": "tests/test_c.py"}),
]


@pytest.mark.parametrize("which", ["one night", "repeats", "two hosts"])
def test_tallies_read_without_the_pairs_are_the_old_ones(stores: dict[str, Path], which: str) -> None:
    with Store(stores[which], read_only=True) as store:
        for filters, (search, failing, by_gpu, level, within) in itertools.product(FILTERS, READS):
            kwargs: dict[str, Any] = {"level": level, "within": within, "failing_only": failing, "by_gpu": by_gpu}
            new = suites.test_group_tallies(store, filters, search, **kwargs)
            assert new == _old_tallies(store, filters, search, **kwargs), (which, filters, search, kwargs)
        assert suites.test_group_tallies(store), "a file with outcomes has rows: the comparison above compared something"


NARROWS = [
    (None, False),
    ({}, False),
    ({"run_id": ["r"], "cell_id": ["c"], "scenario": ["s"], "status": ["pass"]}, False),  # the outcome's own columns
    ({"gpu": []}, False),
    ({"gpu": ["cpu"]}, True),
    ({"platform": ["linux"]}, True),
    ({"transformers": ["5.6.2"], "run_id": ["r"]}, True),
    ({"numpy": ["2.2.6"]}, True),
]


@pytest.mark.parametrize(("filters", "narrows"), NARROWS)
def test_which_filters_narrow_the_pairs(filters: dict[str, list[str]] | None, narrows: bool) -> None:
    assert suites.narrows_pairs(filters) is narrows


def test_the_one_night_file_takes_the_path_without_the_join(stores: dict[str, Path]) -> None:
    """The case the change is for is exercised: a read that names no pair column never builds `admitted`."""
    seen: list[str] = []
    with Store(stores["one night"], read_only=True) as store:
        fetch = store.fetch

        def logged(sql: str, params: Any = ()) -> list[dict[str, Any]]:
            seen.append(sql)
            return fetch(sql, params)

        store.fetch = logged  # type: ignore[method-assign]
        suites.test_group_tallies(store)
        assert seen and not any("admitted" in sql for sql in seen)
        seen.clear()
        suites.test_group_tallies(store, {"gpu": ["cpu"]})
        assert any("admitted" in sql for sql in seen)
