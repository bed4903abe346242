"""The runs' and the cells' records: each run's settings and host (oldest first), and each cell's
record (its requested and installed versions, its freeze, how its env was built) of one run or
every run that built it.
"""

from __future__ import annotations

import json
from typing import Any

from harness.storage import clauses
from harness.storage.resultsfile import SqlResultsFile

_CELL_JSON = ("versions", "requirements", "installed", "inherited", "git_commits", "host")


def runs(store: SqlResultsFile) -> dict[str, dict[str, Any]]:
    """run id -> its `runs` row, `settings` and `host` decoded: index settings, matrix path, GPU; oldest first."""
    found = {}
    for row in store.fetch("SELECT * FROM runs ORDER BY started_at, run_id"):
        for column in ("settings", "host"):
            value = json.loads(row[column]) if isinstance(row.get(column), str) else row.get(column)
            row[column] = value if isinstance(value, dict) else {}
        found[row["run_id"]] = row
    return found


def cell_record(store: SqlResultsFile, run_id: str, cell_id: str) -> dict[str, Any] | None:
    """One run's record of one cell (JSON columns decoded)."""
    rows = clauses.decode(store.fetch("SELECT * FROM cells WHERE run_id = ? AND cell_id = ?", [run_id, cell_id]), _CELL_JSON)
    return rows[0] if rows else None


def cell_records(store: SqlResultsFile, cell_id: str) -> list[dict[str, Any]]:
    """Every run's record of one cell (JSON decoded), with that run's host; newest first."""
    rows = store.fetch(
        "SELECT c.*, r.host, r.harness_version, r.matrix_path FROM cells c LEFT JOIN runs r USING (run_id) "
        "WHERE c.cell_id = ? ORDER BY c.built_at DESC, c.run_id DESC",
        [cell_id],
    )
    return clauses.decode(rows, _CELL_JSON)


def all_cell_records(store: SqlResultsFile) -> list[dict[str, Any]]:
    """Every stored cell record (JSON decoded), newest first: a cell rebuilt in a later run comes first."""
    return clauses.decode(store.fetch("SELECT * FROM cells ORDER BY built_at DESC, run_id DESC"), _CELL_JSON)
