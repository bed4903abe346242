"""The one answering driver: read a results file (or a sweep in progress) and answer.

Every face calls `answer`: the CLI's commands, the summary, `harness attribute`, the report,
the pin, the watch, refinement's rounds and the dashboard. It reads the outcome rows and the
releases the index listed (stored with every run) from either kind of results file, a DuckDB
store or a runner's JSON-lines shard, and hands them to `analysis.answer`, which attributes
with the listed releases *and* the axes nobody listed, knows the refinement state, the
machine classes and each class's known-good set. No face assembles an attribution itself, so
none can leave the unlisted axes out.

`refreshed` asks the index the runs used for the releases of the axes the rows ran several
releases of (what `harness attribute` does unless `--offline`), stores them under run '' for
later readers, and answers again. `failure_answers` is the dashboard's Failures page: the
answers `harness attribute` stored while they are current, else computed fresh as the summary's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from harness.analysis.answer import Answer, Row, answer_rows
from harness.analysis.attribution import release_axes
from harness.analysis.quiet import NO_QUIET
from harness.inputs.candidates import IndexUnreachable, PackageIndex, install_tags, listed_releases, python_version_of
from harness.inputs.matrix import Settings
from harness.storage.resultsfile import ResultsFile, SqlResultsFile

__all__ = ["Answer", "FailureAnswers", "answer", "failure_answers", "index_releases", "refreshed"]


def answer(
    results: ResultsFile,
    run_id: str | None = None,
    *,
    where: Callable[[list[dict[str, Any]]], Iterable[Row]] | None = None,
    loud: bool = False,
) -> Answer:
    """The answers of an open results file (`store.Store` or `shardfile.ShardStore`): of one run's
    outcomes, or of every run's; `where` keeps a part of the rows (one machine's) before answering.

    loud: read the loud tests' rows and the quiet ones as one stand-in (`queries.loud_rows`), for
    a face that prints answers and counts, never each passing test's rows: the summary, attribute,
    pin, report, publish, watch. HARNESS_EVERY_ROW=1 reads every row anyway (the same answers,
    slower: what `tests/unit/test_quiet.py` holds each face to)."""
    quiet = NO_QUIET
    if loud and hasattr(results, "fetch") and not os.environ.get(EVERY_ROW):
        from harness.storage import queries  # DuckDB: only where a results file is read (a shard has no SQL, and few rows)

        rows, quiet = queries.loud_rows(cast(SqlResultsFile, results), run_id)
    else:
        rows = results.outcome_rows(run_id)
    found = answer_rows(where(rows) if where is not None else rows, results.known_releases(), quiet)
    if _HELD is not None:
        _HELD.append(found)
    return found


#: The answers a one-shot command made, kept until its process ends (`hold_until_exit`); None: not kept.
_HELD: list[Answer] | None = None


def hold_until_exit() -> None:
    """Keep every answer made from here on until the process ends: a one-shot command (`cli.ONE_SHOT`)
    ends without freeing them object by object (`cli._exit_now`). Never in a process that goes on
    (the dashboard, a test): they would be held for its life."""
    global _HELD
    _HELD = []


#: Set to read every row where a face would read the loud ones (`answer`'s `loud`).
EVERY_ROW = "HARNESS_EVERY_ROW"


def index_releases(
    index: PackageIndex, axes: Sequence[str], python: str, exclude_newer: datetime | None = None
) -> tuple[dict[str, list[tuple[str, datetime | None]]], list[str]]:
    """({axis: [(release, uploaded)]}, axes that could not be listed) for the cells' Python on this platform."""
    tags = install_tags(python_version_of(python))
    listed: dict[str, list[tuple[str, datetime | None]]] = {}
    failed = []
    for axis in axes:
        try:
            listed[axis] = [(str(r.version), r.upload_time) for r in listed_releases(index, axis, tags, exclude_newer)]
        except IndexUnreachable:
            failed.append(axis)
    return listed, failed


def _index_of(runs: Mapping[str, Mapping[str, Any]]) -> tuple[PackageIndex, str]:
    """The index the runs resolved against (the first run's that named one, else PyPI), and their Python."""
    from harness.inputs.candidates import index_for

    chosen = next((r["settings"] for r in runs.values() if (r.get("settings") or {}).get("index_url")), None)
    python = next(
        (str((r.get("settings") or {}).get("python") or "") for r in runs.values() if (r.get("settings") or {}).get("python")), ""
    )
    settings = Settings(index_url=str((chosen or {}).get("index_url") or ""))
    return index_for(settings), python or "3.11"


def refreshed(store: SqlResultsFile, found: Answer) -> Answer:
    """`found` with the releases the index lists now for every axis its rows ran several releases
    of, stored under run '' (a read-write DuckDB store) for every later reader."""
    from harness.storage import recorded  # DuckDB: only where a results file is read

    index, python = _index_of(recorded.runs(store))
    fetched, _ = index_releases(index, release_axes(found.rows), python)
    if fetched:
        store.record_releases("", fetched)
    return found.relisted(store.known_releases())


@dataclass(frozen=True)
class FailureAnswers:
    """The Failures page's answers: the summary's, of the file's outcomes (all runs)."""

    summary: list[dict[str, Any]]  # `attributed.transition_answer_groups`' shape: one row per distinct answer, with `lines`
    transitions: list[dict[str, Any]]  # `attributed.transitions`' shape (`scope` ""), every signature
    stored: bool  # read from what `harness attribute` stored (current), rather than computed now

    def of(self, signature: str) -> list[dict[str, Any]]:
        """One signature's transitions, machine differences and flaky cells, by scenario in attribution's order."""
        return sorted((t for t in self.transitions if t["signature"] == signature), key=lambda t: t["scenario"])


def failure_answers(store: SqlResultsFile) -> FailureAnswers:
    """For the dashboard (`common.query(answer.failure_answers)`): every answer of the file. The
    ones `harness attribute` stored when they are current (computed after the newest outcome;
    a merge drops them), since a 20,000-test suite takes tens of seconds to answer; else fresh,
    as the summary computes them. Either way, the same rows `attribute` would store now."""
    from harness.storage import attributed  # DuckDB: only where a results file is read

    if attributed.answers_current(store):
        return FailureAnswers(attributed.transition_answer_groups(store, ""), attributed.transitions(store, ""), stored=True)
    found = answer(store, loud=True)
    return FailureAnswers(found.summary_rows(), found.to_rows(""), stored=False)
