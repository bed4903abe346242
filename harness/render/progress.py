"""What a sweep, a refinement or a watch shows while it works: the progress bar over outcomes,
with an ETA, and refinement's rounds (which probe cells each builds, and why).

The bar is the console's side of `running.sweep.Reporter`: the sweep says when a cell starts,
when its env is built and when each outcome is stored; this turns that into one bar and a line
per environment. `harness sweep` draws it on stdout, `harness watch` on stderr (its stdout is the report).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.analysis.outcome import Outcome
from harness.inputs.matrix import Cell
from harness.running.envs import EnvResult

if TYPE_CHECKING:
    from harness.analysis.refine import Plan


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


def print_rounds(console: Console) -> Callable[[int, Plan], None]:
    """Refinement's rounds as console lines (`harness sweep`, `harness refine`)."""

    def show(number: int, plan: Plan) -> None:
        waiting = f"; {plan.waiting} range(s) wait for another line's answer" if plan.waiting else ""
        if plan.kept:  # refine_lines = "first": the summary infers them from the first line's answer
            waiting += f"; {plan.kept} range(s) on other lines not built (inferred from the first line's answer)"
        console.print(f"refinement round {number}: {len(plan.probes)} probe cell(s){waiting}")
        # Probes that differ only in the held axes read as one line: what is built, for what, why.
        groups: dict[tuple[str, str, tuple[str, ...], str], list[Any]] = {}
        for probe in plan.probes:
            groups.setdefault((probe.line.axis, probe.value, probe.scenarios, probe.why), []).append(probe)
        for (axis, value, scenarios, why), probes in groups.items():
            held = ", ".join(f"{a} {v}" for a, v in probes[0].line.held) if len(probes) == 1 else f"on {len(probes)} lines"
            console.print(f"  {axis} {value} ({held}): {', '.join(scenarios)}; {why}", highlight=False, overflow="fold")

    return show
