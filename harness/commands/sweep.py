"""`harness sweep`'s workflow: plan, sweep, refine, answer.

The command line parses and prints; this driver does the work in between, in the order a
sweep needs it: validate everything (`sweep.plan`, nothing written before it returns), open the
results file (DuckDB, or a runner's JSON-lines shard), run the matrix's cells (`sweep.Sweep`),
narrow the ranges its outcomes leave to exact releases (`refinement.refine_run`, on the same
sweep: its zygotes serve the probes too), and answer the run (`answering.answer`), probes
included, for the summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harness.analysis.answer import Answer
from harness.analysis.outcome import Outcome
from harness.analysis.refine import OnRound
from harness.commands.answer import answer
from harness.errors import BadInput
from harness.inputs.matrix import shard_cells
from harness.running import live
from harness.running.shards import cell_weights
from harness.running.sweep import Reporter, Sweep, SweepOptions, SweepPlan, plan, shard_layout
from harness.storage.opening import open_results
from harness.storage.resultsfile import ResultsFile


@dataclass
class SweepDone:
    """What a sweep did, for its closing lines and summary."""

    plan: SweepPlan
    produced: list[Outcome]  # computed by this sweep (the rest of the run was stored already)
    answer: Answer  # every outcome of the run, refinement's probes included
    refinement: str  # refinement's line, or why it was off
    timing: str  # where the time went (`Sweep.timing_line`)
    cuda_chains: list[str]  # why a module was not preloaded, found in this sweep
    left_journal: str = ""  # the journal another writer kept the file from folding in ("" when none)
    empty: list[str] = field(default_factory=list)  # cells whose suite selection kept no test ("… selects 0 of N collected tests")
    uncollected: list[str] = field(default_factory=list)  # cells where pytest ended before it collected the suite
    allow_empty: bool = False  # --allow-empty, or the [tests] table's allow_empty = true (the CLI's exit status)

    @property
    def resumed(self) -> int:
        """Outcomes of the matrix's cells that were stored before this sweep (a resumed run)."""
        cells = {c.id for c in self.plan.cells}
        return max(0, sum(1 for r in self.answer.rows if r["cell_id"] in cells) - len(self.produced))


def refine_step(
    options: SweepOptions,
    sweep: Sweep,
    store: ResultsFile,
    *,
    refine: bool = True,
    limit: int | None = None,
    on_round: OnRound | None = None,
) -> str:
    """The sweep's last step: narrow its ranges to exact releases (docs/attribution.md), unless told not to.
    Returns refinement's line, or why it was off."""
    if not refine or options.shard or options.cells:
        # A shard or a chosen cell sees only part of the matrix's lines: refine after merging (`harness refine`).
        why = "--no-refine" if not refine else "--shard: refine the merged file" if options.shard else "--cell"
        return f"refinement: off ({why})"
    from harness.commands.refine import refine_run  # only here: a runner's shard never needs it (nor DuckDB)

    if limit is not None:
        sweep.settings.refine_limit = limit
    return refine_run(sweep, store, on_round).line()


def run_sweep(
    options: SweepOptions,
    *,
    refine: bool = True,
    refine_limit: int | None = None,
    progress: Reporter | None = None,
    on_start: Callable[[SweepPlan], None] | None = None,
    on_round: OnRound | None = None,
) -> SweepDone:
    """Plan, sweep, refine (unless `refine` is False) and answer; `on_start` hears the plan once the
    results file is open, before anything runs."""
    if options.jobs < 1:
        raise BadInput(f"--jobs {options.jobs}: give at least 1")
    sweep_plan = plan(options)  # validates everything; nothing is written before this returns
    with open_results(options.db) as store:
        reporter = live.watched(store, progress)  # and the dashboard's progress line: done, running, left
        if on_start is not None:
            on_start(sweep_plan)
        with Sweep(sweep_plan, store, reporter) as sweep:  # its zygotes serve refinement's probes too
            produced = sweep.run()
            refined = refine_step(options, sweep, store, refine=refine, limit=refine_limit, on_round=on_round)
        # The grid is the matrix's cells; the answers come from every cell the run built, probes included.
        found = answer(store, sweep_plan.run_id)
    chains = list(sweep.ledger.cuda_chains)
    allow = options.allow_empty or bool(sweep_plan.spec.tests.get("allow_empty"))
    # Another writer kept its turn until the end: the outcomes are safe in the journal, which
    # every harness reader sees and the next harness command that writes to the file folds in.
    done = SweepDone(sweep_plan, produced, found, refined, sweep.timing_line(), chains, store.left_journal)
    done.empty, done.uncollected, done.allow_empty = list(sweep.ledger.suites_empty), list(sweep.ledger.suites_uncollected), allow
    return done


@dataclass(frozen=True)
class ShardPlan:
    """One shard of `harness plan`: the cells it touches, how many of them it runs only a slice
    of, and its expected seconds (None: no stored durations, the split is by count)."""

    index: int
    count: int
    cells: list[str]
    cut: int
    expected: float | None

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"


def plan_shards(options: SweepOptions, count: int) -> tuple[list[ShardPlan], SweepPlan]:
    """The layout `harness sweep --shard i/count` computes in each shard, for all of them at once
    (`sweep.shard_layout`: the same inputs, so the same layout), and the sweep's plan."""
    if count < 1:
        raise BadInput(f"--shards {count}: give at least 1")
    if options.durations is not None and not options.durations.is_file():
        raise BadInput(
            f"--durations {str(options.durations)!r} does not exist; pass the results file (.duckdb or .jsonl) of an earlier sweep, "
            "or leave it out to balance by count"
        )
    whole = plan(replace(options, shard=None))
    layout, durations = shard_layout(whole, count)
    if layout is not None:
        shards = [
            ShardPlan(i, count, [p.cell for p in layout.shards[i - 1]], sum(not p.whole for p in layout.shards[i - 1]), layout.expected(i))
            for i in range(1, count + 1)
        ]
        if not layout.timed:
            shards = [replace(s, expected=None) for s in shards]
        return shards, whole
    ids = [c.id for c in whole.cells]
    weights, timed = cell_weights(ids, durations)
    seconds = dict(zip(ids, weights))
    dealt = [[c.id for c in shard_cells(whole.cells, i, count)] for i in range(1, count + 1)]
    return [ShardPlan(i, count, cells, 0, sum(seconds[c] for c in cells) if timed else None) for i, cells in enumerate(dealt, 1)], whole
