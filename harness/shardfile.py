"""A results file without DuckDB: append-only JSON lines, for runners and shards.

A GPU runner with no network gets only the wheels it needs; DuckDB's is 20 MB. A sweep
given `--db something.jsonl` writes one line per run, cell and outcome instead, each flushed
and fsynced, and `harness merge` brings the file into a DuckDB store. A kill -9 can cut
only the last line short; readers skip a line that does not parse.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.analysis.rows import AXIS_ORDER
from harness.errors import StoreError
from harness.outcome import CellRecord, Outcome


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            if isinstance(record, dict) and "type" in record:
                yield record


class ShardStore:
    """The subset of `Store` a sweep writes through, backed by a JSON-lines file."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise StoreError(f"results path {str(self.path)!r} is a directory; pass --db path/to/results.jsonl")
        if not self.path.parent.is_dir():
            raise StoreError(f"cannot create {str(self.path)!r}: folder {str(self.path.parent)!r} does not exist")
        if read_only and not self.path.exists():
            raise StoreError(f"results file {str(self.path)!r} does not exist; run a sweep first")
        self._cells: dict[tuple[str, str], dict[str, Any]] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self._done: set[tuple[str, str, str, int]] = set()
        if self.path.exists():
            for rec in read_records(self.path):
                if rec["type"] == "run":
                    self._runs[rec["run_id"]] = rec
                elif rec["type"] == "cell":
                    self._cells[(rec["run_id"], rec["cell_id"])] = rec
                elif rec["type"] == "outcome":
                    self._done.add((rec["run_id"], rec["cell_id"], rec["scenario"], int(rec["repeat"])))
        self._fh = None if read_only else self.path.open("a")

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> ShardStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _append(self, record: dict[str, Any]) -> None:
        assert self._fh is not None, "read-only results file"
        self._fh.write(json.dumps(record, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None:
        self._runs[run_id] = {"host": host}
        self._append(
            {
                "type": "run",
                "run_id": run_id,
                "matrix_path": matrix_path,
                "matrix_text": matrix_text,
                "settings": settings,
                "harness_version": harness_version,
                "host": host,
            }
        )

    def record_cell(self, rec: CellRecord) -> None:
        data = {"type": "cell", **asdict(rec)}
        self._cells[(rec.run_id, rec.cell_id)] = data
        self._append(data)

    def add_outcome(self, outcome: Outcome) -> bool:
        d = outcome.serialize()
        key = (d["run_id"], d["cell_id"], d["scenario"], int(d["repeat"]))
        if key in self._done:
            return False
        self._done.add(key)
        self._append({"type": "outcome", **d})
        return True

    def record_releases(self, run_id: str, releases: dict[str, list[tuple[str, datetime | None]]]) -> int:
        """One line per axis: the releases the run's index offered (merged into `releases`)."""
        for axis, listed in releases.items():
            self._append({"type": "releases", "run_id": run_id, "axis": axis, "versions": [v for v, _ in listed]})
        return sum(len(v) for v in releases.values())

    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        return {(c, s, r) for run, c, s, r in self._done if run == run_id}

    def outcomes(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Rows shaped like `outcomes_v` (the columns the summary and the analysis read)."""
        rows, seen = [], set()
        for rec in read_records(self.path):
            if rec["type"] != "outcome" or (run_id and rec["run_id"] != run_id):
                continue
            key = (rec["run_id"], rec["cell_id"], rec["scenario"], rec["repeat"])
            if key in seen:
                continue
            seen.add(key)
            cell = self._cells.get((rec["run_id"], rec["cell_id"]), {})
            host = self._runs.get(rec["run_id"], {}).get("host") or {}
            freeze = cell.get("freeze", {})
            rows.append(
                {
                    **rec,
                    **{axis: freeze.get(axis) for axis in AXIS_ORDER},
                    **{k: cell.get(k) for k in ("versions", "git_commits", "inherited", "python", "cuda_runtime", "python_version")},
                    "installed": freeze,
                    "origin": cell.get("origin", "matrix"),
                    "platform": host.get("platform"),
                    "gpu": host.get("gpu"),
                    "host_python": host.get("python"),
                }
            )
        return sorted(rows, key=lambda r: (r["cell_id"], r["scenario"], r["repeat"]))


def outcome_rows(store: Any, run_id: str | None = None) -> list[dict[str, Any]]:
    """`queries.outcome_rows` of either kind of results file."""
    if isinstance(store, ShardStore):
        return store.outcomes(run_id)
    from harness import queries

    return queries.outcome_rows(store, run_id)


def known_releases(store: Any) -> dict[str, list[str]]:
    """`queries.known_releases` of either kind of results file."""
    if isinstance(store, ShardStore):
        found: dict[str, set[str]] = {}
        for rec in read_records(store.path):
            if rec["type"] == "releases":
                found.setdefault(str(rec["axis"]), set()).update(str(v) for v in rec.get("versions", []))
        return {axis: sorted(versions) for axis, versions in found.items()}
    from harness import queries

    return queries.known_releases(store)


def open_store(path: Path, *, read_only: bool = False) -> Any:
    """DuckDB for `.duckdb` (and any other name); a JSON-lines shard for `.jsonl`."""
    if path.suffix == ".jsonl":
        return ShardStore(path, read_only=read_only)
    from harness.store import Store  # DuckDB is imported only where it is used

    return Store(path, read_only=read_only)
