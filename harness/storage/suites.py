"""A team's suite's reads: its node ids grouped by file and class, counted per cell, searched, and
compared between two cells (the dashboard's pages over a suite).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from harness.analysis.status import SEVERITY, Status
from harness.storage import clauses
from harness.storage.clauses import Filters
from harness.storage.resultsfile import SqlResultsFile

# A test suite stores one outcome per node id (`tests/test_x.py::TestA::test_b[param]`), 20,000
# of them per cell for a large suite: these reads group, search and cap in DuckDB so that a
# page moves a few thousand rows into Python, whatever the suite's size. Levels: `file` (the
# node id's path) and `group` (`file::Class`, or the file for its module-level functions:
# `analysis.rows.group_of`, the summary's groups); a node id without `::` (a scenario, or a file
# that failed to collect) is its own file and group.
_BASE = r"regexp_replace(scenario, '\[.*$', '')"  # parameters may hold '::'; paths never hold '['
_LEVELS = {
    "file": "split_part(scenario, '::', 1)",
    "group": f"CASE WHEN len(string_split({_BASE}, '::')) > 2 THEN array_to_string(string_split({_BASE}, '::')[1:2], '::') "
    "ELSE split_part(scenario, '::', 1) END",
    "test": "scenario",
}
_SEVERITY = "[" + ", ".join(f"'{s}'" for s in SEVERITY) + "]"
_NA_RANK = SEVERITY.index(Status.NOT_APPLICABLE) + 1
#: One status per test and cell over its repeats and runs: the worst, a not_applicable beside others dropped (`status.fold`).
_WORST = f"{_SEVERITY}[COALESCE(min(list_position({_SEVERITY}, status)) FILTER (WHERE status <> '{Status.NOT_APPLICABLE}'), {_NA_RANK})]"


def _test_where(
    filters: Filters | None, search: str = "", within: Mapping[str, str] | None = None, failing_only: bool = False
) -> tuple[str, list[Any]]:
    """`clauses.where(filters)` narrowed further: node ids containing `search` (case-insensitive substring),
    inside `within` ({"file": path} or {"group": "file::Class"}), and with `failing_only` tests that fail somewhere."""
    where, params = clauses.where(filters)
    conditions = [where.removeprefix(" WHERE ")] if where else []
    if search:
        conditions.append("strpos(lower(scenario), lower(?)) > 0")  # a substring, never a pattern: `[`, `%` and `_` are literal
        params.append(search)
    for level, value in sorted((within or {}).items()):
        conditions.append(f"{_LEVELS[level]} = ?")  # level is one of a fixed set, never user text
        params.append(value)
    if failing_only:
        inner, inner_params = clauses.where(filters)
        more = (inner + " AND") if inner else " WHERE"
        conditions.append(f"scenario IN (SELECT scenario FROM outcomes_v{more} status IN ({clauses.FAILING}))")
        params += inner_params
    return (" WHERE " + " AND ".join(conditions)) if conditions else "", params


def test_group_counts(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    level: str = "file",
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
) -> list[dict[str, Any]]:
    """One row per (group at `level`, cell[, gpu]): `tests`, then how many tests had each status
    there (columns named after the statuses: a test's repeats and runs count once, by their worst
    status) and the most frequent failure signature. `level` is `file` or `group`."""
    if level not in ("file", "group"):
        raise ValueError(level)
    where, params = _test_where(filters, search, within, failing_only)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE worst = '{s}') AS {s}" for s in Status)
    failing = f"signature <> '' AND status IN ({clauses.FAILING})"
    with store.reading():  # one snapshot for both reads
        shape = store.fetch(f"SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeat), 0) AS repeats FROM outcomes_v{where}", params)[0]
        if shape["runs"] <= 1 and shape["repeats"] == 0:
            # One outcome per test and cell: its status is the test's, and no per-test grouping
            # (20,000 tests × 20 cells: 400,000 groups, the bulk of the time) is needed.
            worst, signature, grouped = "status", f"CASE WHEN {failing} THEN signature END", ""
        else:
            worst, signature, grouped = _WORST, f"mode(signature) FILTER (WHERE {failing})", " GROUP BY ALL"
        name = f"{_LEVELS[level]} AS name, cell_id{gpu}" + (", scenario" if grouped else "")
        per_test = f"SELECT {name}, {worst} AS worst, {signature} AS signature FROM outcomes_v{where}{grouped}"
        return store.fetch(
            f"WITH t AS ({per_test}) SELECT name, cell_id{', gpu' if by_gpu else ''}, count(*) AS tests, {counts}, "
            "mode(signature) AS signature FROM t GROUP BY ALL ORDER BY ALL",
            params,
        )


def test_counts(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
    limit: int = 500,
) -> dict[str, Any]:
    """The first `limit` matching node ids (in order), shaped as `matrix_counts` rows (a count per
    status over repeats and runs), with `tests`: how many matched in all."""
    where, params = _test_where(filters, search, within, failing_only)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in Status)
    total = store.fetch(f"SELECT count(DISTINCT scenario) AS n FROM outcomes_v{where}", params)[0]["n"]
    shown = (where + " AND" if where else " WHERE") + " scenario IN (SELECT scenario FROM shown)"
    rows = store.fetch(
        f"""
        WITH shown AS (SELECT DISTINCT scenario FROM outcomes_v{where} ORDER BY scenario LIMIT {int(limit)})
        SELECT cell_id, scenario{gpu}, count(*) AS outcomes, {counts},
               mode(signature) FILTER (WHERE signature <> '' AND status IN ({clauses.FAILING})) AS signature
        FROM outcomes_v{shown} GROUP BY ALL ORDER BY ALL
        """,
        params + params,
    )
    return {"tests": int(total), "rows": rows}


def test_failure_summaries(
    store: SqlResultsFile, filters: Filters | None = None, search: str = "", *, top: int = 3
) -> list[dict[str, Any]]:
    """`failure_summaries` for a test suite: per signature, how many tests, groups and files it hits,
    and (as `scenarios`) its `top` groups with their test counts, never the whole list of node ids."""
    where, params = _test_where(filters, search)
    where = (where + " AND" if where else " WHERE") + f" {clauses.NOT_A_FAILURE}"
    return store.fetch(
        f"""
        WITH f AS (
            SELECT *, COALESCE(NULLIF(signature, ''), status) AS sig, {_LEVELS["group"]} AS grp, {_LEVELS["file"]} AS file
            FROM outcomes_v{where}
        ),
        g AS (SELECT sig, grp, count(DISTINCT scenario) AS tests FROM f GROUP BY ALL),
        top AS (
            SELECT sig, list(grp || ' (' || tests || ')' ORDER BY tests DESC, grp)[1:{int(top)}] AS scenarios FROM g GROUP BY sig
        )
        SELECT f.sig AS signature, any_value(signature_family) AS signature_family,
               mode(NULLIF(blamed_library, '')) AS blamed_library, mode(NULLIF(exception_type, '')) AS exception_type,
               list(DISTINCT status ORDER BY status) AS statuses, count(*) AS outcomes, count(DISTINCT cell_id) AS cells,
               count(DISTINCT scenario) AS tests, count(DISTINCT grp) AS groups, count(DISTINCT file) AS files,
               any_value(top.scenarios) AS scenarios, count(DISTINCT run_id) AS runs,
               min(started_at) AS first_seen, max(started_at) AS last_seen, min(cell_id) AS example_cell,
               min(scenario) AS example_scenario
        FROM f JOIN top USING (sig) GROUP BY f.sig ORDER BY cells DESC, tests DESC, outcomes DESC, signature
        """,
        params,
    )


def test_signature_groups(store: SqlResultsFile, signature: str, filters: Filters | None = None, search: str = "") -> list[dict[str, Any]]:
    """Where one failure signature (or a bare status, as `test_failure_summaries` names it) lands: per
    group, how many tests and cells, and one test and cell to open."""
    where, params = _test_where(filters, search)
    where = (where + " AND" if where else " WHERE") + f" {clauses.NOT_A_FAILURE} AND COALESCE(NULLIF(signature, ''), status) = ?"
    return store.fetch(
        f"""
        SELECT {_LEVELS["group"]} AS "group", count(DISTINCT scenario) AS tests, count(DISTINCT cell_id) AS cells,
               count(*) AS outcomes, min(scenario) AS example_test, min(cell_id) AS example_cell
        FROM outcomes_v{where} GROUP BY 1 ORDER BY tests DESC, 1
        """,
        [*params, signature],
    )


def test_signature_tests(
    store: SqlResultsFile, signature: str, group: str, filters: Filters | None = None, search: str = "", limit: int = 500
) -> list[dict[str, Any]]:
    """The node ids of one group that fail with one signature: cells and outcomes each, the first `limit`."""
    where, params = _test_where(filters, search, {"group": group})
    where = (where + " AND" if where else " WHERE") + f" {clauses.NOT_A_FAILURE} AND COALESCE(NULLIF(signature, ''), status) = ?"
    return store.fetch(
        f"""
        SELECT scenario AS test, count(DISTINCT cell_id) AS cells, count(*) AS outcomes, min(cell_id) AS example_cell
        FROM outcomes_v{where} GROUP BY 1 ORDER BY 1 LIMIT {int(limit)}
        """,
        [*params, signature],
    )


def test_outcomes(
    store: SqlResultsFile,
    cell_id: str,
    search: str = "",
    *,
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    limit: int = 500,
) -> dict[str, Any]:
    """One cell's outcomes of the matching node ids, without their long text (failures first, then by
    node id; the first `limit`), and `tests`: how many node ids matched in all."""
    where, params = _test_where({"cell_id": [cell_id]}, search, within, failing_only)
    total = store.fetch(f"SELECT count(DISTINCT scenario) AS n FROM outcomes_v{where}", params)[0]["n"]
    rows = store.fetch(
        f"""
        SELECT scenario, status, run_id, repeat, gpu, platform, started_at, seconds, signature, blamed_library
        FROM outcomes_v{where}
        ORDER BY status IN ({clauses.FAILING}) DESC, status = '{Status.PASS}', scenario, run_id, repeat LIMIT {int(limit)}
        """,
        params,
    )
    return {"tests": int(total), "rows": rows}


def test_diff(store: SqlResultsFile, a: str, b: str, search: str = "", *, limit: int = 500) -> dict[str, Any]:
    """Tests whose status (worst over repeats and runs) or signature differs between cells `a` and `b`:
    `tests` (compared: run in either), `differ` (how many differ), `groups` (per group: tests that
    differ) and `rows` (the first `limit` that differ: each side's status and signature).

    A test is matched by its identity across the suite's releases (`test_id`), so two releases
    of a package's own suite compare the same tests; `scenario` shows cell A's node id (else B's).
    The per-test comparison is computed once into a temporary table, then counted, grouped and
    listed from it (computed for each of the three, it took 1 s each over two cells of a
    100,000-test suite)."""
    where, params = _test_where({"cell_id": [a, b]}, search)
    differs = '"A" <> "B" OR "A signature" <> "B signature"'
    identity = clauses.identity_column(store)
    table = f"harness_diff_{uuid.uuid4().hex[:12]}"
    with store.reading():  # one snapshot, and the temporary table lives on its connection
        store.fetch(
            f"""
            CREATE TEMP TABLE {table} AS
            WITH t AS (
                SELECT {identity} AS test, scenario AS node, {_LEVELS["group"]} AS grp, cell_id, {_WORST} AS worst,
                       COALESCE(mode(signature) FILTER (WHERE signature <> '' AND status IN ({clauses.FAILING})), '') AS signature
                FROM outcomes_v{where} GROUP BY ALL
            )
            SELECT COALESCE(any_value(node) FILTER (WHERE cell_id = ?), any_value(node)) AS scenario, grp,
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "A",
                   COALESCE(any_value(worst) FILTER (WHERE cell_id = ?), '—') AS "B",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "A signature",
                   COALESCE(any_value(signature) FILTER (WHERE cell_id = ?), '') AS "B signature"
            FROM t GROUP BY test, grp
            """,
            [*params, a, a, b, a, b],
        )
        try:
            tests = store.fetch(f"SELECT count(*) AS n, count(*) FILTER ({differs}) AS differ FROM {table}")[0]
            groups = store.fetch(f'SELECT grp AS "group", count(*) AS tests FROM {table} WHERE {differs} GROUP BY 1 ORDER BY 2 DESC, 1')
            shown = 'scenario, "A", "B", "A signature", "B signature"'
            rows = store.fetch(f"SELECT {shown} FROM {table} WHERE {differs} ORDER BY scenario LIMIT {int(limit)}")
        finally:
            store.fetch(f"DROP TABLE IF EXISTS {table}")
    return {"tests": int(tests["n"]), "differ": int(tests["differ"] or 0), "groups": groups, "rows": rows}


def holds_tests(store: SqlResultsFile) -> bool:
    """Whether the file holds pytest node ids (`harness sweep --tests`): a scenario's name never holds `::`."""
    return bool(store.fetch("SELECT EXISTS (SELECT 1 FROM outcomes WHERE contains(scenario, '::')) AS found")[0]["found"])


def test_group_tallies(
    store: SqlResultsFile,
    filters: Filters | None = None,
    search: str = "",
    *,
    level: str = "file",
    within: Mapping[str, str] | None = None,
    failing_only: bool = False,
    by_gpu: bool = False,
) -> list[dict[str, Any]]:
    """`test_group_counts`' rows without their `signature`: one row per (group at `level`, cell[, gpu]),
    `tests`, and how many tests had each status there (a test's repeats and runs count once, by
    their worst status). Read from `outcomes` and the (run, cell) pairs the filters admit, not
    through `outcomes_v`: the grid of a suite's first page costs half as much. Where no filter is
    a run's or a cell's (`narrows_pairs`) and no GPU is asked for, every pair is admitted: the
    outcomes are read alone, without joining each of 2,000,000 to its pair by two strings."""
    if level not in ("file", "group"):
        raise ValueError(level)
    ctes, params, where, outcome_params = clauses.admitted_pairs(filters)
    joined = by_gpu or narrows_pairs(filters)
    admitted = " SEMI JOIN admitted USING (run_id, cell_id)" if joined else ""
    conditions = [where.removeprefix(" WHERE ")] if where else []
    found = [*outcome_params]
    if search:
        conditions.append("strpos(lower(scenario), lower(?)) > 0")  # a substring, never a pattern
        found.append(search)
    for name, value in sorted((within or {}).items()):
        conditions.append(f"{_LEVELS[name]} = ?")  # name is one of a fixed set, never user text
        found.append(value)
    if failing_only:
        inner = " AND ".join([*([where.removeprefix(" WHERE ")] if where else []), f"status IN ({clauses.FAILING})"])
        conditions.append(f"scenario IN (SELECT scenario FROM outcomes{admitted} WHERE {inner})")
        found += outcome_params
    narrowed = (" WHERE " + " AND ".join(conditions)) if conditions else ""
    gpu = ", COALESCE(a.gpu, '') AS gpu" if by_gpu else ""
    counts = ", ".join(f"count(*) FILTER (WHERE worst = '{s}') AS {s}" for s in Status)
    with store.reading():  # one snapshot for both reads
        if joined:
            shape = store.fetch(f"WITH {ctes} SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeats), 0) AS r FROM admitted", params)[
                0
            ]
        else:  # the same two numbers: every pair of the filtered outcomes is admitted
            shape = store.fetch(
                f"SELECT count(DISTINCT run_id) AS runs, COALESCE(max(repeat), 0) AS r FROM outcomes{where}", outcome_params
            )[0]
        one_each = shape["runs"] <= 1 and shape["r"] == 0
        # One outcome per test and cell: its status is the test's, with no grouping per test (400,000 groups).
        worst, grouped = ("status", "") if one_each else (_WORST, " GROUP BY ALL")
        name = f"{_LEVELS[level]} AS name, cell_id{gpu}" + ("" if one_each else ", scenario")
        source = "outcomes JOIN admitted a USING (run_id, cell_id)" if joined else "outcomes"
        per_test = f"SELECT {name}, {worst} AS worst FROM {source}{narrowed}{grouped}"
        return store.fetch(
            f"WITH {ctes + ',' if joined else ''} t AS ({per_test}) SELECT name, cell_id{', gpu' if by_gpu else ''}, count(*) AS tests, "
            f"{counts} FROM t GROUP BY ALL ORDER BY ALL",
            [*(params if joined else []), *found],
        )


def narrows_pairs(filters: Filters | None) -> bool:
    """Whether `filters` narrow the (run, cell) pairs (`clauses.admitted_pairs`): a filter with values
    on anything but the outcome's own columns (run, cell, scenario, status): a platform, a GPU, an axis."""
    return any(values for key, values in (filters or {}).items() if key not in clauses._OUTCOME_FILTERS)


def test_pass_counts(store: SqlResultsFile) -> list[dict[str, Any]]:
    """One row per node id (or scenario) and kind of host (`gpu`, `gpu_count`, `platform`: what
    `analysis.rows.machine_class` reads): `passing`, the cells where it passed (every outcome there
    passed, a not_applicable beside them dropped, as `status.fold` words it), and `tested`, the
    cells where it passed or failed. The Pin page's list of a suite's every test, in one grouped read."""
    evidence = f"'{Status.PASS}', {clauses.FAILING}"
    return store.fetch(
        f"""
        WITH per AS (
            SELECT scenario, cell_id, gpu, gpu_count, platform,
                   bool_or(status = '{Status.PASS}') AND bool_and(status IN ('{Status.PASS}', '{Status.NOT_APPLICABLE}')) AS passed,
                   bool_or(status IN ({evidence})) AS judged
            FROM outcomes_v GROUP BY ALL
        )
        SELECT scenario, gpu, gpu_count, platform, count(*) FILTER (WHERE passed) AS passing, count(*) FILTER (WHERE judged) AS tested
        FROM per GROUP BY ALL ORDER BY ALL
        """
    )
