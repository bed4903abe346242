"""The progress bar a sweep or a watch shows while cells build and run: outcomes done of all, with an ETA.

It is the console's side of `running.sweep.Reporter`: the sweep says when a cell starts, when
its env is built and when each outcome is stored; this turns that into one bar and a line per
environment. `harness sweep` draws it on stdout, `harness watch` on stderr (its stdout is the report).
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.analysis.outcome import Outcome
from harness.inputs.matrix import Cell
from harness.running.envs import EnvResult


class ProgressReporter:
    """A rich progress bar with ETA over outcomes; one line per environment built."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = self.progress.add_task("sweep", total=0)

    def start(self, total: int) -> None:
        # Called once for the matrix's cells and once per round of refinement probes.
        self.progress.reset(self.task, total=total)
        self.progress.start()

    def cell_started(self, cell: Cell) -> None:
        self.progress.update(self.task, description=f"building {cell.id}")

    def env_built(self, cell: Cell, env: EnvResult) -> None:
        how = "reused" if env.reused else f"built in {env.seconds:.1f}s"
        line = f"[bold]{cell.id}[/]: env {env.status} ({how})"
        if not env.ready:
            line += f": {env.message.splitlines()[-1] if env.message else ''}"
        self.console.print(line)
        self.progress.update(self.task, description=f"running {cell.id}")

    def scenario_started(self, cell: Cell, scenario: str, repeat: int) -> None:
        self.progress.update(self.task, description=f"running {cell.id}: {scenario}")

    def outcome(self, outcome: Outcome, cell: Cell) -> None:
        self.progress.advance(self.task)

    def finish(self) -> None:
        self.progress.stop()
