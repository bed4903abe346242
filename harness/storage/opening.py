"""Opening a results file: the one place that picks its kind, by the path's suffix.

Apart from `resultsfile` (the Protocols, which `queries`, `store` and `shardfile` import), so
that no kind of results file imports the module that chooses between them.
"""

from __future__ import annotations

from pathlib import Path

from harness.storage.resultsfile import ResultsFile


def open_results(path: Path | str, *, read_only: bool = False) -> ResultsFile:
    """A JSON-lines shard for `.jsonl`; a DuckDB file for `.duckdb` and any other name."""
    if Path(path).suffix == ".jsonl":
        from harness.storage.shardfile import ShardStore

        return ShardStore(path, read_only=read_only)
    from harness.storage.store import Store  # DuckDB is imported only where it is used

    return Store(path, read_only=read_only)
