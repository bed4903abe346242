"""What every read of a results file shares: a page's filters as SQL (`where`; `admitted_pairs`,
the (run, cell) pairs they admit, decided once per pair rather than per outcome), JSON columns
decoded, the columns a file an older harness wrote may lack, and the column that names a test.

Filters are a mapping of column or axis -> allowed values: run_id, cell_id, scenario, status,
platform, gpu, any axis (torch, transformers, …, or another package recorded in a cell's
versions). An empty or missing list means "any".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness.analysis.rows import AXIS_ORDER
from harness.analysis.status import FAILURES, Status
from harness.storage.resultsfile import SqlResultsFile

Filters = Mapping[str, Sequence[str]]
_FILTER_COLUMNS = frozenset({"run_id", "cell_id", "scenario", "status", "platform", "gpu", *AXIS_ORDER})
FAILING = ", ".join(f"'{s}'" for s in sorted(FAILURES))
NOT_A_FAILURE = f"status NOT IN ('{Status.PASS}', '{Status.NOT_APPLICABLE}', '{Status.INCONCLUSIVE}', '{Status.XFAIL}', '{Status.XPASS}')"

#: The machine of an outcome, from its cell (`c`) and its run (`r`): platform, accelerator, GPU
#: count, the cell interpreter's Python (major.minor) and the CUDA runtime of its torch build, as
#: `analysis.rows.machine_of` and `machine_class` read them.
MACHINE_SQL = r"""concat_ws('|',
    COALESCE(r.host->>'platform', ''), COALESCE(r.host->>'gpu', ''), COALESCE(r.host->>'gpu_count', ''),
    COALESCE(NULLIF(regexp_extract(COALESCE(c.python_version, ''), '^\d+\.\d+'), ''),
             NULLIF(regexp_extract(COALESCE(c.python, ''), '^\d+\.\d+'), ''),
             regexp_extract(COALESCE(r.host->>'python', ''), '^\d+\.\d+')),
    COALESCE(NULLIF(c.cuda_runtime, ''),
             regexp_replace(regexp_extract(COALESCE(c.installed->>'torch', ''), '\+cu(\d+)$', 1), '(\d)$', '.\1')))"""
#: A test's identity across the suite's releases (the node id where none was stored), as `outcomes_v.test_id`.
TEST_SQL = "COALESCE(NULLIF({a}.test_id, ''), {a}.scenario)"
#: Before every run: the time of a row whose run the file does not hold.
EPOCH = "TIMESTAMP '1970-01-01'"


def decode(rows: list[dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """`rows` with their JSON text `columns` decoded, in place ("" or NULL: {})."""
    for row in rows:
        for column in columns:
            if isinstance(row.get(column), str):
                row[column] = json.loads(row[column]) if row[column] else {}
    return rows


def where(filters: Filters | None) -> tuple[str, list[Any]]:
    """`filters` as a WHERE clause over `outcomes_v` ("" for none) and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for name, values in sorted((filters or {}).items()):
        chosen = [str(v) for v in values]
        if not chosen:
            continue
        marks = ", ".join("?" for _ in chosen)
        if name in _FILTER_COLUMNS:
            clauses.append(f"{name} IN ({marks})")  # name is one of a fixed set, never user text
        else:
            clauses.append(f"COALESCE(installed->>?, versions->>?) IN ({marks})")
            params += [name, name]
        params += chosen
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def columns(store: SqlResultsFile, table: str) -> set[str]:
    """The columns of `table` (or view) in this file: one an older harness wrote may lack the newer ones."""
    return {r["column_name"] for r in store.fetch("SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table])}


def column_or_null(store: SqlResultsFile, table: str, column: str) -> str:
    """`column`, or `NULL AS column` in a file written before the migration that added it."""
    return column if column in columns(store, table) else f"NULL AS {column}"


def cell_columns(store: SqlResultsFile) -> str:
    """A CTE body: each (run, cell)'s columns as a pin's rows carry them (`queries.loud_pin_rows`,
    `pins.pairs`): its Python, requested versions, CUDA and Python version, and of its installed and
    inherited versions those of its axes only."""
    cuda, version = (column_or_null(store, "cells", c) for c in ("cuda_runtime", "python_version"))
    return f"""
            SELECT run_id, cell_id, python, versions, {cuda}, {version},
                   (SELECT json_group_object(k, installed->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                    WHERE installed->>k IS NOT NULL) AS installed,
                   (SELECT json_group_object(k, inherited->>k) FROM (SELECT unnest(json_keys(versions)) AS k)
                    WHERE inherited->>k IS NOT NULL) AS inherited
            FROM cells
        """


def identity_column(store: SqlResultsFile, alias: str = "") -> str:
    """The column that says which test a row is (`test_id`), or `scenario` in a file read
    without it (written before 0009 and older than the view this harness lays over it)."""
    return alias + ("test_id" if "test_id" in columns(store, "outcomes_v") else "scenario")


#: Filters that are columns of `outcomes` itself; every other filter (platform, gpu, an axis) is a
#: property of an outcome's run and cell, decided once per (run, cell) pair instead of per outcome.
_OUTCOME_FILTERS = frozenset({"run_id", "cell_id", "scenario", "status"})
_PAIR_AXES = ", ".join(f"COALESCE(c.installed->>'{a}', c.versions->>'{a}') AS {a}" for a in AXIS_ORDER)


def admitted_pairs(filters: Filters | None, among: str = "") -> tuple[str, list[Any], str, list[Any]]:
    """Two CTEs, `per` (outcomes, last outcome and highest repeat per run and cell) and `admitted`
    (the (run, cell) pairs the filters admit, with the run's `gpu`), and the WHERE over `outcomes`
    for the outcome-level filters: (ctes, their params, where, its params).

    The same rows as `where(filters)` over `outcomes_v`, whose run- and cell-level columns are
    the view's (platform, gpu, the five axes, any other axis in `installed`/`versions`), without
    joining cells and runs to every one of a suite's 400,000 outcomes.

    among: a table of every (run, cell) pair of `outcomes` (`run_id`, `cell_id`) that a caller
    holds already, read as `per` (without its counts) rather than counting every outcome again;
    only with no outcome-level filter, which it could not apply."""
    outcome = {k: v for k, v in (filters or {}).items() if k in _OUTCOME_FILTERS}
    pair = {k: v for k, v in (filters or {}).items() if k not in _OUTCOME_FILTERS}
    if among and outcome:
        raise ValueError(f"admitted_pairs: the pairs of {among} cannot be narrowed by {', '.join(sorted(outcome))}")
    outcome_where, params = where(outcome)
    pair_where, pair_params = where(pair)
    counted = f"""SELECT run_id, cell_id, count(*) AS outcomes, max(started_at) AS last, max(repeat) AS repeats
            FROM outcomes{outcome_where} GROUP BY run_id, cell_id"""
    ctes = f"""
        per AS (
            {f"SELECT run_id, cell_id FROM {among}" if among else counted}
        ),
        admitted AS (
            SELECT * FROM (
                SELECT per.*, {_PAIR_AXES}, c.versions, c.installed, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu
                FROM per LEFT JOIN cells c USING (run_id, cell_id) LEFT JOIN runs r USING (run_id)
            ){pair_where}
        )"""
    return ctes, [*params, *pair_params], outcome_where, params
