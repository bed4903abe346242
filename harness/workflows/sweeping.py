"""A sweep from start to end, as `harness sweep` runs it: plan (every mistake before anything is
written), sweep into the results file, refine the ranges left, answer. The command's flags come
in as `running.plan.SweepOptions`; `SweepDone` is what the command prints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.analysis.answer import Answer
from harness.analysis.outcome import Outcome
from harness.analysis.quiet import weight
from harness.analysis.refine import OnRound
from harness.errors import EXIT_OK, EXIT_RUN_FAILED, BadInput
from harness.running import live
from harness.running.plan import SweepOptions, SweepPlan, plan
from harness.running.sweep import Reporter, Sweep
from harness.storage.opening import open_results
from harness.storage.resultsfile import ResultsFile
from harness.workflows.answering import answer


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
        return max(0, sum(weight(r) for r in self.answer.rows if r["cell_id"] in cells) - len(self.produced))  # a stand-in's many


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
    from harness.workflows.refining import refine_run  # only here: a runner's shard never needs it (nor DuckDB)

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
    every_test: bool = False,
) -> SweepDone:
    """Plan, sweep, refine (unless `refine` is False) and answer; `on_start` hears the plan once the
    results file is open, before anything runs. every_test: the answer reads each test's rows, as
    the full grid (`--wide`) prints every one; else the quiet tests are one stand-in."""
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
        # the loud rows (`queries.loud_rows`): a suite's passes as one stand-in, unless every test is printed (--wide)
        found = answer(store, sweep_plan.run_id, loud=not every_test)
    chains = list(sweep.ledger.cuda_chains)
    allow = options.allow_empty or bool(sweep_plan.spec.tests.get("allow_empty"))
    # Another writer kept its turn until the end: the outcomes are safe in the journal, which
    # every harness reader sees and the next harness command that writes to the file folds in.
    done = SweepDone(sweep_plan, produced, found, refined, sweep.timing_line(), chains, store.left_journal)
    done.empty, done.uncollected, done.allow_empty = list(sweep.ledger.suites_empty), list(sweep.ledger.suites_uncollected), allow
    return done


# -- the command ---------------------------------------------------------------------------------


def ran_no_test(empty: list[str], uncollected: list[str], allowed: bool) -> tuple[list[str], int]:
    """(a line per cell whose suite ran no test, the exit status): EXIT_RUN_FAILED unless each is an empty selection allowed."""
    fix = "allowed (--allow-empty)" if allowed else "no test ran there; pass --allow-empty (or [tests] allow_empty = true) if expected"
    lines = [f"{line}: {fix}" for line in empty] + list(uncollected)
    return lines, EXIT_RUN_FAILED if uncollected or (empty and not allowed) else EXIT_OK
