"""`harness sweep`: its flags, its workflow (plan, sweep, refine, answer) and its closing lines.

`add_parser` and `run` are the command line's; `run_sweep` does the work in between, in the
order a sweep needs it: validate everything (`plan.plan`, nothing written before it returns),
open the results file (DuckDB, or a runner's JSON-lines shard), run the matrix's cells
(`sweep.Sweep`), narrow the ranges its outcomes leave to exact releases (`refining.refine_run`,
on the same sweep: its zygotes serve the probes too), and answer the run (`answering.answer`),
probes included, for the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.render.progress import ProgressReporter, print_rounds
from harness.render.summary import print_history, render_answer
from harness.running import kept
from harness.running.gpus import default_jobs
from harness.running.plan import SweepOptions, SweepPlan
from harness.workflows.support import keep_support_of
from harness.workflows.sweeping import SweepDone, ran_no_test, run_sweep


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
    flags.add_jobs(p)  # --jobs, --gpus, --no-lookahead, --no-tail-help, --no-zygote, --keep-servers
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
    flags.default_results_folder(args.db)
    options = sweep_options(args)
    if options.keep_servers and args.keep_servers != "auto":
        kept.usable_dir()  # a folder others could use is refused before anything runs
    done = run_sweep(
        options,
        refine=not args.no_refine,
        refine_limit=args.refine_limit,
        progress=progress,
        on_start=on_start,
        on_round=on_round,
        every_test=args.wide,
    )
    if done.left_journal:  # another writer's turn: the outcomes wait in the journal, which readers see
        print(f"harness: {done.left_journal} waits to be folded into {args.db}; readers see it already", file=sys.stderr)
    if args.json:
        for outcome in done.produced:
            print(json.dumps(outcome.serialize(), default=str))
        return _no_test(done)
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
    return _no_test(done)  # a run of no test is no pass


def sweep_options(args: argparse.Namespace) -> SweepOptions:
    """The sweep's options from its flags, the defaults that depend on the machine (jobs, kept servers) decided."""
    # by keyword: SweepOptions gains fields between these (run_tag did), and a position would shift
    options = SweepOptions(args.matrix, args.db, args.cell, args.scenario, args.run_id, args.fresh)
    options.model, options.adapter, options.device, options.env_root = args.model, args.adapter, args.device, args.env_root
    gpus = flags.options_gpus(args.gpus) if args.jobs == "auto" or args.keep_servers == "auto" else 0
    options.jobs = args.jobs if isinstance(args.jobs, int) else default_jobs(gpus, os.cpu_count() or 1)
    options.lookahead = not args.no_lookahead
    options.zygote = not args.no_zygote
    options.help_tail = not args.no_tail_help
    options.keep_servers = args.keep_servers if isinstance(args.keep_servers, float) else kept.keep_by_default(gpus)
    options.gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    options.shard = flags.parse_shard(args.shard) if args.shard else None
    options.durations = args.durations
    options.keyword, options.marker, options.allow_empty = args.keyword, args.marker, args.allow_empty
    options.run_tag = args.run_tag
    options.exclude_newer = args.exclude_newer
    return flags.suite_options(args, options)


def _no_test(done: SweepDone) -> int:
    lines, status = ran_no_test(done.empty, done.uncollected, done.allow_empty)
    for line in lines:
        print(f"harness: {line}", file=sys.stderr)
    return status
