"""A results file, of either kind: the one seam through which the harness writes and reads results.

Two kinds stand behind it: a DuckDB file (`store.Store`: journals, folds, merges, SQL) and a
JSON-lines shard (`shardfile.ShardStore`: what a runner without DuckDB writes, merged later).
`opening.open_results` is the one place that picks one, by the path's suffix. Code that runs on either
kind (a sweep and its refinement step, `harness summary`, the live progress line) is typed
against `ResultsFile`; the reads in `queries` need SQL, which only DuckDB answers, and are typed
against `SqlResultsFile`. Neither kind subclasses these: mypy checks that each one satisfies them.

This module imports neither DuckDB nor the kinds at import time: a runner's sweep loads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:
    from harness.analysis.outcome import CellRecord, Collection, Outcome


class ResultsFile(Protocol):
    """What a sweep writes and its callers read back, from a DuckDB file or a JSON-lines shard."""

    @property
    def watchable(self) -> bool:
        """Whether readers can watch its writers while they run (`live.watched`): a DuckDB file on disk."""
        ...

    @property
    def left_journal(self) -> str:
        """After close: a journal left unfolded because another writer kept its turn ("" if none)."""
        ...

    # -- writes: every record is kept as it was first stored (outcomes never overwritten)
    def ensure_run(
        self, run_id: str, matrix_path: str, matrix_text: str, settings: dict[str, Any], harness_version: str, host: dict[str, Any]
    ) -> None: ...
    def record_cell(self, rec: CellRecord) -> None: ...
    def add_outcome(self, outcome: Outcome) -> bool:
        """False if its key is already stored."""
        ...

    def record_releases(self, run_id: str, releases: dict[str, list[tuple[str, datetime | None]]]) -> int: ...
    def record_collection(self, rec: Collection) -> None:
        """What a suite's run collected in a cell (the latest record of a run and cell replaces the earlier)."""
        ...

    def report(self, **status: Any) -> None:
        """Tell the file's readers what this writer is doing (best effort; nothing where no one watches)."""
        ...

    # -- reads
    def done_keys(self, run_id: str) -> set[tuple[str, str, int]]:
        """(cell, scenario, repeat) already stored for a run: a rerun computes only the rest."""
        ...

    def outcome_rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Rows shaped like `outcomes_v` (of one run, or all), by cell, scenario and repeat."""
        ...

    def known_releases(self) -> dict[str, list[str]]:
        """axis -> every release any run listed on its index, sorted."""
        ...

    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: object, exc: object, tb: object, /) -> None: ...


class SqlResultsFile(ResultsFile, Protocol):
    """A results file that answers SQL over its tables and `outcomes_v`: what `queries` reads through."""

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts."""
        ...

    def fetch_tuples(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows as tuples, in the query's column order, to be read once."""
        ...

    def fetch_chunks(self, sql: str, params: Sequence[Any] = (), size: int = 50_000) -> Iterator[list[tuple[Any, ...]]]:
        """Rows as tuples, `size` at a time (an export of every row)."""
        ...

    def has_table(self, name: str) -> bool: ...
    def reading(self) -> AbstractContextManager[object]:
        """One consistent view for the reads inside the block."""
        ...
