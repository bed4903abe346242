"""A sweep watched while it runs: its progress, told to the readers of its results file.

`LiveReporter` wraps a sweep's reporter and keeps the writer's status file (`journal.py`) up
to date: the outcomes it queued, those it finished, the scenarios running now. `writers(db)`
is what a reader (the dashboard) learns from those files: each writer, whether it still runs
(its journal's flock, which a killed process loses), and how far it got.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from harness.storage import journal

if TYPE_CHECKING:
    from harness.analysis.outcome import Outcome
    from harness.inputs.matrix import Cell
    from harness.running.envs import EnvResult
    from harness.running.sweep import Reporter
    from harness.storage.resultsfile import ResultsFile


@dataclass
class Writer:
    """One process writing to a results file, as its journal's status file describes it."""

    journal: str
    alive: bool
    pid: int = 0
    host: str = ""
    run_id: str = ""
    queued: int = 0  # outcomes this process set out to compute (resumed ones not counted)
    computed: int = 0  # of those, finished and stored
    running: list[tuple[str, str, int, str]] = field(default_factory=list)  # cell, scenario, repeat, since (UTC ISO)
    state: str = ""  # running | finished
    updated_at: str = ""

    @property
    def left(self) -> int:
        return max(0, self.queued - self.computed - len(self.running))

    @property
    def stopped(self) -> bool:
        """Gone before it finished (killed, crashed): its journal is folded by the next writer; rerun to resume."""
        return not self.alive and self.state != "finished"


def writers(db: Path | str) -> list[Writer]:
    """Every writer with a journal beside `db`: running ones first, then those that stopped."""
    found = []
    for path in journal.journals(db):
        status = journal.read_status(path)
        found.append(
            Writer(
                path.name,
                journal.writer_alive(path),
                int(status.get("pid") or 0),
                str(status.get("host") or ""),
                str(status.get("run_id") or ""),
                int(status.get("queued") or 0),
                int(status.get("computed") or 0),
                [(str(c), str(s), int(r), str(t)) for c, s, r, t in status.get("running") or []],
                str(status.get("state") or ""),
                str(status.get("updated_at") or ""),
            )
        )
    return sorted(found, key=lambda w: (not w.alive, w.journal))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")


class LiveReporter:
    """A sweep's `Reporter` that also tells the results file's readers how far the sweep got."""

    def __init__(self, store: ResultsFile, inner: Reporter | None = None) -> None:
        self.store = store
        self.inner = inner
        self.queued = 0
        self.computed = 0
        self.running: dict[tuple[str, str, int], str] = {}

    def _tell(self) -> None:
        running = [[c, s, r, t] for (c, s, r), t in self.running.items()]
        self.store.report(queued=self.queued, computed=self.computed, running=running, state="running")

    def start(self, total: int) -> None:
        self.queued += total  # refinement queues more work after the matrix: it adds up
        self._tell()
        if self.inner:
            self.inner.start(total)

    def cell_started(self, cell: Cell) -> None:
        if self.inner:
            self.inner.cell_started(cell)

    def env_built(self, cell: Cell, env: EnvResult) -> None:
        if self.inner:
            self.inner.env_built(cell, env)

    def scenario_started(self, cell: Cell, scenario: str, repeat: int) -> None:
        self.running[(cell.id, scenario, repeat)] = _now()
        self._tell()
        if self.inner:
            self.inner.scenario_started(cell, scenario, repeat)

    def outcome(self, outcome: Outcome, cell: Cell) -> None:
        self.running.pop((outcome.cell_id, outcome.scenario, outcome.repeat), None)
        self.computed += 1
        self._tell()
        if self.inner:
            self.inner.outcome(outcome, cell)

    def finish(self) -> None:
        self.running.clear()
        self._tell()
        if self.inner:
            self.inner.finish()


def watched(store: ResultsFile, inner: Reporter | None) -> Reporter | None:
    """`inner`, reporting to the readers of `store` too when they can watch it (`watchable`: a
    DuckDB file on disk; a runner writing a JSON-lines shard has no DuckDB and no dashboard)."""
    if store.watchable:
        return LiveReporter(store, inner)
    return inner
