"""Where a sweep's time went: its ledger, and the closing line made of it.

`Ledger` sums what the jobs report (env builds, fork-server starts and what they imported,
servers kept from an earlier sweep, tail help, the scenarios' own seconds and their imports');
`Ledger.line` with `zygotes_text` is the sweep's `time:` line (docs/zygote.md, "Where the time goes").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.running.runner import CellRunner
    from harness.running.zygote import ZygotePool


@dataclass
class Ledger:
    """Where a sweep's time went, for its closing line: env builds, fork-server starts, scenarios."""

    env_seconds: float = 0.0
    envs_built: int = 0  # envs built (not reused): what a probe of refinement or bisection costs
    server_start_seconds: float = 0.0
    server_starts: int = 0
    servers_kept: int = 0  # servers an earlier sweep kept, attached instead of started
    kept_seconds: float = 0.0
    cuda_restarts: int = 0  # of those, starts again without modules found to initialise CUDA
    cuda_chains: dict[str, None] = field(default_factory=dict)  # "peft → … → bitsandbytes.cextension", as found
    scenario_seconds: float = 0.0
    scenarios_run: int = 0  # outcomes behind scenario_seconds (not-applicable ones never run)
    # of those, the scenario files' own run (their code, imports included), by the child's
    # clock; the rest is forking, handing over and reading back, per scenario
    scenario_run_seconds: float = 0.0
    # of those, the imports the scenario files made themselves (measured on Python 3.12+ only):
    # their own code is the rest, what a server's start is weighed against
    scenario_import_seconds: float = 0.0
    imports_measured: bool = False
    imports: dict[str, float] = field(default_factory=dict)  # per preloaded module, summed over cells
    helpers: int = 0  # second fork servers an idle job ran a cell's last scenarios on (tail help)
    helpers_ahead: int = 0  # of those, started ahead, before the job was idle
    spares_unused: int = 0  # started ahead and never taken (their start still counts above)
    # cells whose suite ran no test: its -k/-m selects none there ("… selects 0 of N collected
    # tests"; fails the sweep unless allowed), or pytest ended before it collected (always fails)
    suites_empty: list[str] = field(default_factory=list)
    suites_uncollected: list[str] = field(default_factory=list)

    def count_servers(self, runner: CellRunner) -> None:
        """A runner's fork-server starts (a spare's too: it was paid for), and the CUDA chains they found."""
        server = runner.server
        self.server_start_seconds += server.start_seconds
        self.server_starts += server.starts
        self.servers_kept += server.kept_taken
        self.kept_seconds += server.kept_seconds
        self.cuda_restarts += server.cuda_restarts
        self.cuda_chains.update(dict.fromkeys(" → ".join(c) for c in server.cuda_chains))

    def mean_scenario_seconds(self) -> float:
        """Per scenario run so far (0 before the first): the guess for a cell none of whose finished."""
        return self.scenario_seconds / self.scenarios_run if self.scenarios_run else 0.0

    def _imports_in_scenarios(self) -> str:
        if not self.imports_measured:
            return ""
        own = self.scenario_run_seconds - self.scenario_import_seconds
        return f", of which their imports {self.scenario_import_seconds:.1f} s: after their imports {own:.1f} s"

    def line(self, zygotes: str, culprits: str) -> str:
        tail = ""
        if self.servers_kept:
            tail += f", kept from an earlier sweep {self.kept_seconds:.1f} s ({self.servers_kept})"
        if self.helpers or self.spares_unused:
            tail += f", tail help: {self.helpers} server(s) ({self.helpers_ahead} started ahead, {self.spares_unused} unused)"
        return (
            f"time: env builds {self.env_seconds:.1f} s, {zygotes}, fork-server starts {self.server_start_seconds:.1f} s"
            f" ({self.server_starts}, {self.cuda_restarts} for CUDA; slowest imports: {slowest(self.imports)}){tail},"
            f" scenarios {self.scenario_seconds:.1f} s"
            f" (their own code {self.scenario_run_seconds:.1f} s{self._imports_in_scenarios()});"
            f" not preloaded (CUDA at import): {culprits}"
        )


def zygotes_text(pool: ZygotePool | None) -> str:
    """The timing line's part on the zygotes: their starts, refusals and fallbacks."""
    if pool is None:
        return "zygotes off"
    z = pool.stats
    text = f"zygote starts {z.seconds:.1f} s ({z.starts}; slowest imports: {slowest(z.preload_seconds)})"
    if z.waited >= 0.05:
        text += f", servers started ahead waited {z.waited:.1f} s for a scenario's torch imports"
    if z.refusals:
        text += f", refused by a zygote: {'; '.join(f'{n}x {why}' for why, n in z.refusals.most_common(3))}"
    if z.fallbacks:
        text += f", not forked from a zygote: {pool.describe_fallbacks()}"
    return text


def slowest(seconds: dict[str, float]) -> str:
    return ", ".join(f"{m} {s:.1f}" for m, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:3]) or "-"
