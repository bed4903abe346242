"""A results file without DuckDB: append-only JSON lines, for runners and shards.

A GPU runner with no network gets only the wheels it needs; DuckDB's is 20 MB. A sweep
given `--db something.jsonl` writes one line per run, cell and outcome instead, each flushed
and fsynced, and `harness merge` brings the file into a DuckDB store. A kill -9 can cut
only the last line short; readers skip a line that does not parse.

`ShardStore` is a `resultsfile.ResultsFile`, as `store.Store` is: the sweep, its refinement
step and `harness summary` use either through that one seam.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.analysis.outcome import CellRecord, Collection, Outcome
from harness.analysis.rows import AXIS_ORDER, as_tests
from harness.errors import StoreError


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
    """A results file of JSON lines: what a sweep writes through, and the reads its callers make
    (`resultsfile.ResultsFile`). No one watches it live, and nothing is left in a journal."""

    #: A shard has no journal: every record is in the file when its call returns.
    left_journal = ""

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
                    self._runs[rec["run_id"]] = rec  # its settings say whether it ran a suite (`durations`)
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

    @property
    def watchable(self) -> bool:
        """No: a runner writing a shard has no dashboard (and no DuckDB to read one with)."""
        return False

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

    def record_collection(self, rec: Collection) -> None:
        self._append({"type": "collection", **asdict(rec)})

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

    def report(self, **status: Any) -> None:
        """Nothing: no reader watches a shard while it is written (`watchable`)."""

    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        return {(c, s, r) for run, c, s, r in self._done if run == run_id}

    def outcome_rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
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
        # as the answers read them: `scenario` a test's identity across releases, `node_id` its node id
        return as_tests(sorted(rows, key=lambda r: (r["cell_id"], r["scenario"], r["repeat"])))

    def durations(self, exclude_run: str = "", *, suites: bool = True) -> dict[str, dict[str, float]]:
        """`queries.durations` of this file: cell id -> node id -> mean seconds, every run but `exclude_run`."""
        sums: dict[tuple[str, str], list[float]] = {}
        for rec in read_records(self.path):
            run = self._runs.get(rec.get("run_id", ""), {})
            if rec["type"] != "outcome" or rec["run_id"] == exclude_run or bool((run.get("settings") or {}).get("tests")) != suites:
                continue
            sums.setdefault((rec["cell_id"], rec["scenario"]), []).append(float(rec.get("seconds") or 0.0))
        found: dict[str, dict[str, float]] = {}
        for (cell, node), seconds in sums.items():
            found.setdefault(cell, {})[node] = sum(seconds) / len(seconds)
        return found

    def known_releases(self) -> dict[str, list[str]]:
        """axis -> every release the runs' `releases` lines listed, sorted."""
        found: dict[str, set[str]] = {}
        for rec in read_records(self.path):
            if rec["type"] == "releases":
                found.setdefault(str(rec["axis"]), set()).update(str(v) for v in rec.get("versions", []))
        return {axis: sorted(versions) for axis, versions in found.items()}


# The methods as functions, for the callers that import them from here (cli, refinement).
