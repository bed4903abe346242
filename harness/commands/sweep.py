"""`harness sweep`: its flags, its workflow (plan, sweep, refine, answer) and its closing lines.

`add_parser` and `run` are the command line's; `run_sweep` does the work in between, in the
order a sweep needs it: validate everything (`sweep.plan`, nothing written before it returns),
open the results file (DuckDB, or a runner's JSON-lines shard), run the matrix's cells
(`sweep.Sweep`), narrow the ranges its outcomes leave to exact releases (`refinement.refine_run`,
on the same sweep: its zygotes serve the probes too), and answer the run (`answering.answer`),
probes included, for the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from harness.analysis.answer import Answer
from harness.analysis.outcome import Outcome
from harness.analysis.refine import OnRound
from harness.commands import flags
from harness.commands.answer import answer
from harness.commands.progress import ProgressReporter, print_rounds
from harness.commands.publish import keep_support_of
from harness.commands.summary import print_history, render_answer
from harness.errors import EXIT_OK, EXIT_RUN_FAILED, BadInput
from harness.running import kept, live
from harness.running.gpus import MAX_CPU_JOBS, default_jobs
from harness.running.sweep import Reporter, Sweep, SweepOptions, SweepPlan, plan
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


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="build every cell's env, run every scenario, store and summarise the outcomes")
    flags.add_matrix(p)
    flags.add_db(p)
    p.add_argument("--cell", action="append", default=[], help="run only this cell id (repeatable; see `harness list`)")
    p.add_argument("--scenario", action="append", default=[], help="scenario name or path to a .py file (repeatable; overrides the matrix)")
    flags.add_suite(p)
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    flags.add_allow_empty(p)
    p.add_argument(
        "--run-id", default="", help="store under this run id (default: derived from the matrix and scenario files, so a rerun resumes)"
    )
    p.add_argument("--fresh", action="store_true", help="start a new run (its id gets a timestamp) so every outcome is computed again")
    flags.add_run_tag(p)
    p.add_argument("--model", default="", help="real checkpoint (hub id or path) for scenarios instead of the synthetic model")
    p.add_argument("--adapter", default="", help="real adapter (hub id or path) for scenarios")
    p.add_argument("--device", default="", choices=["", "cpu", "cuda"], help="device for scenarios that can run on either")
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live (default: the matrix's env_dir, .nox)")
    p.add_argument(
        "--jobs",
        type=_jobs,
        default="auto",
        help="cells built and run at once; with GPUs each job gets one (CUDA_VISIBLE_DEVICES). Default auto: one job on a machine "
        f"with GPUs (every GPU for the lone job), else one per CPU core, at most {MAX_CPU_JOBS}",
    )
    p.add_argument("--gpus", default=None, help="GPU ids to use, e.g. 0,1 (default: every GPU nvidia-smi sees)")
    p.add_argument(
        "--no-lookahead",
        action="store_true",
        help="prepare each cell only when its turn comes (default: a job builds its next cell's env and fork server while it runs one)",
    )
    p.add_argument(
        "--no-tail-help",
        action="store_true",
        help="with --jobs > 1, an idle job never shares a running cell (default: once no cell is left, an idle job starts a "
        "second fork server for the running cell with the most time left and takes its scenarios too, where that saves time)",
    )
    p.add_argument(
        "--no-zygote",
        action="store_true",
        help="every cell's fork server imports torch and the matrix's preload itself (default: forked from one process per torch "
        "build that has imported torch, preloading what the cell's scenarios imported last time; matrix key `zygote`)",
    )
    p.add_argument(
        "--keep-servers",
        type=_seconds,
        default=os.environ.get(kept.KEEP_ENV, "auto"),
        metavar="SECONDS",
        help="keep each cell's fork server, with its imports, for the next sweep of the same cell on this machine, parked for "
        f"up to SECONDS idle (0: they exit with the sweep). Default auto: {kept.KEEP_WITH_GPUS:.0f} s on a machine with GPUs, "
        f"0 without (the default's default: {kept.KEEP_ENV}); see `harness servers`",
    )
    p.add_argument(
        "--shard",
        default="",
        help="run only slice i of n, e.g. 2/4 (deterministic; merge the shards' files): cells round robin, or with a suite "
        "whole cells and slices of cells' tests balanced by stored durations (see --durations)",
    )
    flags.add_durations(p)
    p.add_argument(
        "--no-refine", action="store_true", help="keep ranges as ranges: do not build the releases between tested ones (default: refine)"
    )
    p.add_argument(
        "--refine-limit", type=int, default=None, help="build at most this many probe cells to refine ranges (default: the matrix's)"
    )
    p.add_argument(
        "--exclude-newer",
        default="",
        metavar="DATE",
        help="resolve every cell as the index stood at DATE (e.g. 2026-11-20): replay a night; overrides the matrix's exclude_newer",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.add_argument("--json", action="store_true", help="print the outcomes as JSON lines instead of the table")
    p.add_argument("--wide", action="store_true", help="end with the full grid (cells × scenarios, one word each) and every line's answer")


def run(args: argparse.Namespace, console: Console) -> int:
    def started(plan: SweepPlan) -> None:
        console.print(f"run [bold]{plan.run_id}[/]: {len(plan.cells)} cell(s) × {len(plan.scenarios)} scenario(s) -> {args.db}")

    progress = None if args.no_progress or args.json else ProgressReporter(console)
    on_start, on_round = (None, None) if args.json else (started, print_rounds(console))
    default_results_folder(args.db)
    options = sweep_options(args)
    if options.keep_servers and args.keep_servers != "auto":
        kept.usable_dir()  # a folder others could use is refused before anything runs
    done = run_sweep(
        options, refine=not args.no_refine, refine_limit=args.refine_limit, progress=progress, on_start=on_start, on_round=on_round
    )
    if done.left_journal:  # another writer's turn: the outcomes wait in the journal, which readers see
        print(f"harness: {done.left_journal} waits to be folded into {args.db}; readers see it already", file=sys.stderr)
    if args.json:
        for outcome in done.produced:
            print(json.dumps(outcome.serialize(), default=str))
        return _ran_no_test(done.empty, done.uncollected, done.allow_empty)
    console.print(f"{len(done.produced)} outcome(s) computed, {done.resumed} already stored (resumed)")
    if done.refinement:
        console.print(done.refinement)
    console.print(done.timing, highlight=False, soft_wrap=True)  # one line, for grep
    for chain in done.cuda_chains:  # why a module was not preloaded, found in this sweep
        console.print(f"CUDA at import: {chain}", highlight=False, soft_wrap=True)
    if options.keep_servers:
        parked = len(kept.parked())
        console.print(
            f"{parked} fork server(s) parked on this machine for the next sweep of their cells, each until "
            f"{options.keep_servers:.0f} s idle; `harness servers --stop` ends them",
            highlight=False,
            soft_wrap=True,
        )
    keep_support_of(args.db)  # the Support page's tables, once here rather than on each first render
    print_history(args.db, console)
    render_answer(done.answer, console, title=f"run {done.plan.run_id}", wide=args.wide)
    return _ran_no_test(done.empty, done.uncollected, done.allow_empty)  # a run of no test is no pass


def default_results_folder(db: Path) -> None:
    """The folder of the default --db (`results/`), made where it is missing, as pytest, nox and uv
    make theirs. Only the default's: a --db the user named in a missing folder may be a typo, and
    stays an error that says so."""
    if db is flags.DEFAULT_DB:  # argparse hands the default object itself over when --db is not given
        db.parent.mkdir(parents=True, exist_ok=True)


def sweep_options(args: argparse.Namespace) -> SweepOptions:
    """The sweep's options from its flags, the defaults that depend on the machine (jobs, kept servers) decided."""
    # by keyword: SweepOptions gains fields between these (run_tag did), and a position would shift
    options = SweepOptions(args.matrix, args.db, args.cell, args.scenario, args.run_id, args.fresh)
    options.model, options.adapter, options.device, options.env_root = args.model, args.adapter, args.device, args.env_root
    gpus = options_gpus(args.gpus) if args.jobs == "auto" or args.keep_servers == "auto" else 0
    options.jobs = args.jobs if isinstance(args.jobs, int) else default_jobs(gpus, os.cpu_count() or 1)
    options.lookahead = not args.no_lookahead
    options.zygote = not args.no_zygote
    options.help_tail = not args.no_tail_help
    options.keep_servers = args.keep_servers if isinstance(args.keep_servers, float) else kept.keep_by_default(gpus)
    options.gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    options.shard = parse_shard(args.shard) if args.shard else None
    options.durations = args.durations
    options.keyword, options.marker, options.allow_empty = args.keyword, args.marker, args.allow_empty
    options.run_tag = args.run_tag
    options.exclude_newer = args.exclude_newer
    return flags.suite_options(args, options)


def options_gpus(selected: str | None) -> int:
    """How many GPUs a sweep would use: those --gpus names, else every one nvidia-smi sees."""
    from harness.running import hostinfo

    return len([g for g in selected.split(",") if g.strip()]) if selected else len(hostinfo.gpus())


def parse_shard(text: str) -> tuple[int, int]:
    """ "2/4" -> (2, 4); anything else is bad input that names the fix."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise BadInput(f"--shard {text!r} must look like i/n, e.g. 1/4") from None
    if not 1 <= index <= count:
        raise BadInput(f"--shard {text!r}: i must be between 1 and n, e.g. 1/{max(count, 1)}")
    return index, count


def _seconds(text: str) -> float | str:
    """`--keep-servers SECONDS`: a number of seconds, 0 or more, or auto."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give --keep-servers (or {kept.KEEP_ENV}) seconds between 0 and 604800, e.g. 900, or auto"
        )
    return value


def _jobs(text: str) -> int | str:
    """`--jobs N` or `--jobs auto`."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of jobs, or auto") from None


def _ran_no_test(empty: list[str], uncollected: list[str], allowed: bool) -> int:
    """One line on stderr per cell whose suite ran no test; EXIT_RUN_FAILED unless each is an empty selection allowed."""
    for line in empty:
        fix = "allowed (--allow-empty)" if allowed else "no test ran there; pass --allow-empty (or [tests] allow_empty = true) if expected"
        print(f"harness: {line}: {fix}", file=sys.stderr)
    for line in uncollected:
        print(f"harness: {line}", file=sys.stderr)
    return EXIT_RUN_FAILED if uncollected or (empty and not allowed) else EXIT_OK
