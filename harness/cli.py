"""`harness`: a thin command line over the library. Errors become one line and an exit code."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from harness import __version__
from harness.analysis.refine import Plan
from harness.commands import changes, compact
from harness.commands.progress import ProgressReporter
from harness.commands.summary import WIDTH, render_answer
from harness.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_TERMINATED, BadInput, HarnessError
from harness.inputs.matrix import load_matrix
from harness.inputs.scenarios import select
from harness.running import kept
from harness.running.gpus import MAX_CPU_JOBS, default_jobs
from harness.storage.opening import open_results

if TYPE_CHECKING:
    from harness.analysis.bisect import Probe
    from harness.commands.bisect import Step
    from harness.commands.wheelhouse import WheelhouseReport
    from harness.running.sweep import SweepOptions, SweepPlan

DEFAULT_MATRIX = Path("matrix.toml")
DEFAULT_DB = Path("results/compat.duckdb")


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help="DuckDB results file (default: results/compat.duckdb)")


def _add_suite(p: argparse._ActionsContainer) -> None:
    """A team's pytest suite as the checks: what `sweep` runs and what `wheelhouse` prepares for."""
    p.add_argument(
        "--tests",
        nargs="+",
        default=[],
        metavar="PATH",
        help="run this pytest suite's tests, each node id one outcome (paths under --tests-root)",
    )
    p.add_argument("--tests-root", default="", help="the folder where you run pytest (its conftest.py and configuration apply; default .)")
    p.add_argument("--test-requirement", action="append", default=[], help="with --tests: a test dependency for every cell (repeatable)")
    p.add_argument(
        "--tests-of",
        default="",
        metavar="PACKAGE",
        help="run PACKAGE's own tests, from --tests-git at the tag of each cell's installed version",
    )
    p.add_argument(
        "--tests-git", default="", metavar="PATH_OR_URL", help="with --tests-of: the package's git repository (a clone, a mirror or a URL)"
    )


def _add_allow_empty(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="with a suite: a cell where -k/-m selects none of the collected tests does not fail the run "
        '(default: exit 1, "selects 0 of N collected tests"; the [tests] table\'s allow_empty = true)',
    )


def _ran_no_test(empty: list[str], uncollected: list[str], allowed: bool) -> int:
    """One line on stderr per cell whose suite ran no test; EXIT_RUN_FAILED unless each is an empty selection allowed."""
    for line in empty:
        fix = "allowed (--allow-empty)" if allowed else "no test ran there; pass --allow-empty (or [tests] allow_empty = true) if expected"
        print(f"harness: {line}: {fix}", file=sys.stderr)
    for line in uncollected:
        print(f"harness: {line}", file=sys.stderr)
    return EXIT_RUN_FAILED if uncollected or (empty and not allowed) else EXIT_OK


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="build every cell's env, run every scenario, store and summarise the outcomes")
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    _add_db(p)
    p.add_argument("--cell", action="append", default=[], help="run only this cell id (repeatable; see `harness list`)")
    p.add_argument("--scenario", action="append", default=[], help="scenario name or path to a .py file (repeatable; overrides the matrix)")
    _add_suite(p)
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    _add_allow_empty(p)
    p.add_argument(
        "--run-id", default="", help="store under this run id (default: derived from the matrix and scenario files, so a rerun resumes)"
    )
    p.add_argument("--fresh", action="store_true", help="start a new run (its id gets a timestamp) so every outcome is computed again")
    _add_run_tag(p)
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
    _add_durations(p)
    p.add_argument(
        "--no-refine", action="store_true", help="keep ranges as ranges: do not build the releases between tested ones (default: refine)"
    )
    p.add_argument(
        "--refine-limit", type=int, default=None, help="build at most this many probe cells to refine ranges (default: the matrix's)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    p.add_argument("--json", action="store_true", help="print the outcomes as JSON lines instead of the table")
    p.add_argument("--wide", action="store_true", help="end with the full grid (cells × scenarios, one word each) and every line's answer")


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


def options_gpus(selected: str | None) -> int:
    """How many GPUs a sweep would use: those --gpus names, else every one nvidia-smi sees."""
    from harness.running import hostinfo

    return len([g for g in selected.split(",") if g.strip()]) if selected else len(hostinfo.gpus())


def _sweep_options(args: argparse.Namespace) -> SweepOptions:
    from harness.running.sweep import SweepOptions

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
    return _suite_options(args, options)


def _add_run_tag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--run-tag",
        default="",
        help="a scheduled run's own tag (the CI run's number), added to the default run id: each night runs afresh, its shards share it",
    )


def _suite_options(args: argparse.Namespace, options: SweepOptions | None = None) -> SweepOptions:
    """`_add_suite`'s flags onto `options` (new ones for `args.matrix` when None)."""
    from harness.running.sweep import SweepOptions

    options = options or SweepOptions(args.matrix, Path())
    options.tests, options.tests_root, options.test_requirements = args.tests, args.tests_root, args.test_requirement
    options.tests_of, options.tests_git = args.tests_of, args.tests_git
    return options


def _cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.sweep import run_sweep

    def started(plan: SweepPlan) -> None:
        console.print(f"run [bold]{plan.run_id}[/]: {len(plan.cells)} cell(s) × {len(plan.scenarios)} scenario(s) -> {args.db}")

    progress = None if args.no_progress or args.json else ProgressReporter(console)
    on_start, on_round = (None, None) if args.json else (started, _print_round(console))
    options = _sweep_options(args)
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
    _print_history(args.db, console)
    render_answer(done.answer, console, title=f"run {done.plan.run_id}", wide=args.wide)
    return _ran_no_test(done.empty, done.uncollected, done.allow_empty)  # a run of no test is no pass


def _print_history(db: Path, console: Console) -> None:
    """What changed since the run before this one, and how deep the file's history is (a file of more than one run)."""
    if not db.is_file():
        return
    from harness.commands.summary import emit_plain, hang_plain

    with open_results(db, read_only=True) as store:
        found = changes.history_lines(store)
    emit_plain(console, [piece for line in found for piece in hang_plain(line, console.width)])  # fitted as the summary's lines are


def _print_round(console: Console) -> Callable[[int, Plan], None]:
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


def parse_shard(text: str) -> tuple[int, int]:
    """ "2/4" -> (2, 4); anything else is bad input that names the fix."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise BadInput(f"--shard {text!r} must look like i/n, e.g. 1/4") from None
    if not 1 <= index <= count:
        raise BadInput(f"--shard {text!r}: i must be between 1 and n, e.g. 1/{max(count, 1)}")
    return index, count


def _add_durations(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--durations",
        type=Path,
        default=None,
        metavar="FILE",
        help="with a suite: the results file (.duckdb or .jsonl) whose stored test seconds balance the shards, as pytest-split's "
        "durations do (default: the --db file; its runs other than this one; by count where none is stored)",
    )


def _cmd_plan(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.sweep import plan_shards
    from harness.running.sweep import SweepOptions

    options = _suite_options(args, SweepOptions(args.matrix, args.db, scenarios=args.scenario, run_id=args.run_id, env_root=args.env_root))
    options.keyword, options.marker, options.durations, options.run_tag = args.keyword, args.marker, args.durations, args.run_tag
    shards, whole = plan_shards(options, args.shards)
    timed = shards[0].expected is not None
    for shard in shards:  # for people; stdout is the scheduler's
        seconds = f"expected {shard.expected:.1f} s" if shard.expected is not None else "no stored durations: split by count"
        cut = f" ({shard.cut} a slice of its tests)" if shard.cut else ""
        print(f"harness: shard {shard.name}: {len(shard.cells)} cell(s){cut}, {seconds}", file=sys.stderr)
    if timed and shards:
        longest, mean = max(s.expected or 0.0 for s in shards), sum(s.expected or 0.0 for s in shards) / len(shards)
        print(f"harness: longest shard {longest:.1f} s, {longest / mean if mean else 1.0:.2f}x the mean {mean:.1f} s", file=sys.stderr)
        if args.keyword or args.marker:
            # the plan does not collect: a cell weighs every test stored for it, not only what -k/-m selects
            print(
                "harness: the expected seconds count every stored test of each cell, not only those -k/-m select "
                "(the tests are cut after collection, exactly); for seconds of the selection, pass --durations a file of it",
                file=sys.stderr,
            )
    if args.format == "github-actions":
        include = []
        for shard in shards:
            entry: dict[str, Any] = {"shard": shard.name, "results": f"results/shard-{shard.index}.jsonl", "cells": len(shard.cells)}
            entry["cut"] = shard.cut
            if timed:
                entry["expected_seconds"] = round(shard.expected or 0.0, 1)
            include.append(entry)
        print(json.dumps({"include": include}))
    else:
        print(slurm_script(args, shards, len(whole.cells)), end="")
    return EXIT_OK


def slurm_script(args: argparse.Namespace, shards: list[Any], cells: int) -> str:
    """The array job of `harness plan --format slurm`: task i sweeps shard i/n into its own file; the
    first task of each submission submits the dependent job (afterany: after every task, whatever
    its end) that merges the shards and refines the ranges, so one `sbatch` does it all, and a
    resubmitted task (`sbatch --array=3 FILE`) merges and refines again once it is done."""
    n = len(shards)
    flags: list[str] = ["--matrix", str(args.matrix)]
    for value, flag in ((args.tests_root, "--tests-root"), (args.keyword, "-k"), (args.marker, "-m")):
        flags += [flag, value] if value else []
    flags += ["--tests", *args.tests] if args.tests else []
    flags += [x for r in args.test_requirement for x in ("--test-requirement", r)]
    flags += ["--tests-of", args.tests_of] if args.tests_of else []
    flags += ["--tests-git", args.tests_git] if args.tests_git else []
    flags += ["--env-root", str(args.env_root)] if args.env_root else []
    flags += ["--run-id", args.run_id] if args.run_id else []
    flags += ["--run-tag", args.run_tag] if args.run_tag else []
    scenarios = [x for name in args.scenario for x in ("--scenario", name)]
    durations = args.durations or (args.db if args.db.is_file() else None)
    shard_flags = ["--durations", str(durations)] if durations is not None else []
    merged = shlex.quote(str(args.merged))
    refine = shlex.join(["harness", "refine", "--db", str(args.merged), "--matrix", str(args.matrix), *scenarios])
    refine += " " + shlex.join(["--env-root", str(args.env_root)]) if args.env_root else ""
    lines = [
        f"#   shard {s.index}/{n}: {len(s.cells)} cell(s)"
        + (f", {s.cut} cut" if s.cut else "")
        + (f", expected {s.expected:.1f} s" if s.expected is not None else "")
        for s in shards
    ]
    return SLURM_TEMPLATE.format(
        n=n,
        cells=cells,
        matrix=args.matrix,
        gres="#SBATCH --gres=gpu:1\n" if args.gpus_per_task else "",
        shards="\n".join(lines),
        sweep=shlex.join(["harness", "sweep", *flags, *scenarios, *shard_flags]),
        merged=merged,
        refine=refine,
    )


SLURM_TEMPLATE = """#!/usr/bin/env bash
#SBATCH --job-name=compat-sweep
#SBATCH --array=1-{n}
{gres}#SBATCH --output=slurm-compat-%A_%a.log
# {cells} cells of {matrix} over {n} array tasks (harness plan's layout):
{shards}
# Each task writes its own shard, results/shard-<task>.jsonl; a rerun of a task resumes it. A shard
# sees only part of the matrix, so the ranges are refined once, after the merge, by the job the
# first task of this submission submits (afterany: it runs however the tasks end).
# Submit: sbatch THIS_FILE; resubmit one task: sbatch --array=3 THIS_FILE
set -euo pipefail
mkdir -p results
if [ "$SLURM_ARRAY_TASK_ID" = "${{SLURM_ARRAY_TASK_MIN:-1}}" ]; then
  sbatch --job-name=compat-merge --dependency="afterany:$SLURM_ARRAY_JOB_ID" --output="slurm-compat-%j-merge.log" \\
    --wrap "harness merge --db {merged} results/shard-*.jsonl && {refine}"
fi
exec {sweep} --shard "$SLURM_ARRAY_TASK_ID/{n}" --db "results/shard-$SLURM_ARRAY_TASK_ID.jsonl" --no-progress --no-refine
"""


def _existing_duckdb(path: Path) -> str:
    """The --db of a command that reads outcomes: an existing DuckDB file, not a shard."""
    db = str(path)
    if path.suffix == ".jsonl":
        raise BadInput(f"--db {db!r} is a JSON-lines shard; bring it into a DuckDB store first: harness merge {db} --db store.duckdb")
    if not path.exists():
        raise BadInput(f"database {db!r} does not exist; run a sweep first or pass --db with an existing results file")
    return db


def _cmd_list(args: argparse.Namespace, console: Console) -> int:
    from harness.inputs.candidates import resolve_matrix

    resolved = resolve_matrix(load_matrix(args.matrix, lenient=True))
    for cell in resolved.cells:
        print(cell.id if not args.verbose else f"{cell.id}\t{cell}")
    return EXIT_OK


def _cmd_scenarios(args: argparse.Namespace, console: Console) -> int:
    from harness.inputs import bundled
    from harness.inputs.scenarios import PACK_PREFIX, available, project_dir

    chosen = select([f"{PACK_PREFIX}{args.pack}"]) if args.pack else select([]) if available() else []
    for scenario in chosen:
        needs = ", ".join(f"{n}{s}" for n, s in scenario.requires.packages)
        gpus = f", {scenario.requires.gpus} GPU" if scenario.requires.gpus else ""
        first = scenario.doc.splitlines()[0] if scenario.doc else ""
        print(f"{scenario.name}\t{needs}{gpus}\t{first}")
    if not args.pack:
        if not chosen:
            print(f"no scenarios in {project_dir()} (`harness init` writes examples)", file=sys.stderr)
        for pack in sorted(bundled.PACKS):
            if bundled.pack_dir(pack).resolve() != project_dir().resolve():
                count = len(available(bundled.pack_dir(pack)))
                print(f"{PACK_PREFIX}{pack}\t{count} built-in scenario(s): harness scenarios --pack {pack}")
    return EXIT_OK


def _cmd_summary(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.answer import answer

    args.db = args.db_file or args.db
    with open_results(args.db, read_only=True) as store:
        found = answer(store, args.run_id or None)
    if not args.json and not args.run_id:
        _print_history(Path(args.db), console)
    if args.json:
        for row in found.rows:
            print(json.dumps(row, default=str))
        return EXIT_OK
    render_answer(found, console, title=f"{args.db}" + (f" run {args.run_id}" if args.run_id else ""), wide=args.wide)
    return EXIT_OK


def _add_attribute(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="for each failure and library, the release that introduced it and the one that fixed it (others held fixed)",
        description="For every failure signature and every axis, the transitions while the other axes stay fixed: "
        "'introduced in transformers X, fixed in Y'. Stored in the file's `transitions` table; see docs/attribution.md.",
    )
    _add_db(p)
    p.add_argument("--run-id", default="", help="only this run's outcomes (default: every run in the file)")
    p.add_argument("--scenario", action="append", default=[], help="only this scenario (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object per transition and flaky cell instead of the tables")
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not ask the index for the releases between tested versions (use those stored with the runs)",
    )


def _cmd_attribute(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.attribute import attribute_file
    from harness.commands.summary import render_transitions

    db = _existing_duckdb(args.db)
    done = attribute_file(Path(db), args.run_id, args.scenario, offline=args.offline)
    result = done.result
    if args.json:
        items = [*(t.to_dict() for t in result.transitions), *(m.to_dict() for m in result.machines), *(f.to_dict() for f in result.flaky)]
        items += [r.to_dict() for r in done.requirements]  # kind "requirement": what two exact answers state together
        for item in items:
            print(json.dumps(item))
        return EXIT_OK
    render_transitions(result.transitions, console, result.flaky, result.machines)
    if not result.transitions:
        console.print("no transitions: no failure changes between neighbouring versions of an axis with the other axes held fixed")
    if done.unlisted:
        console.print(f"the index's releases of {', '.join(done.unlisted)} could not be listed: changes along them are ranges")
    for stated in done.requirements:
        console.print(
            f"missing requirement: [bold]{escape(stated.text())}[/] on {stated.machine or 'an unrecorded machine'}", highlight=False
        )
        console.print(f"  {escape(', '.join(stated.scenarios))}: {escape(stated.signature)}", highlight=False)
        for line in stated.lines():
            console.print(f"  {escape(line)}", highlight=False)
        console.print(f"  cells: {'; '.join(f'{c} {w}' for c, w in stated.cells())}", highlight=False)
    exact = sum(t.exact for t in result.transitions)
    console.print(
        f"{len(result.transitions)} transition(s) ({exact} exact, {len(result.transitions) - exact} range(s)), "
        f"{len(result.machines)} machine difference(s), {len(result.flaky)} flaky cell(s) from {done.outcomes} outcome(s); "
        f"stored in {db} (table transitions)"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness", description="Version-matrix compatibility harness for torch, transformers, accelerate, peft and bitsandbytes."
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_sweep(sub)
    p = sub.add_parser("servers", help="the fork servers `sweep --keep-servers` kept on this machine, waiting for the next sweep")
    p.add_argument("--stop", action="store_true", help="end them now")
    p = sub.add_parser("list", help="list the matrix's cells (one id per line)")
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    p.add_argument("--verbose", "-v", action="store_true", help="also print each cell's versions")
    p = sub.add_parser("scenarios", help="list the scenarios in scenarios/ (of the current directory) with what they require")
    p.add_argument("--pack", default="", help="list a built-in pack instead, e.g. forum (use it as --scenario pack:forum)")
    p = sub.add_parser("summary", help="print the outcome table of a results file")
    _add_db(p)
    p.add_argument("db_file", nargs="?", type=Path, default=None, metavar="DB", help="the results file (the same as --db)")
    p.add_argument("--run-id", default="", help="only this run")
    p.add_argument("--wide", action="store_true", help="the full grid (cells × scenarios, one word each) and every line's answer")
    p.add_argument("--json", action="store_true", help="every outcome row as one JSON object per line")
    changes.add_parser(sub)
    compact.add_parser(sub)
    _add_attribute(sub)
    _add_pin(sub)
    _add_report(sub)
    _add_publish(sub)
    p = sub.add_parser("merge", help="combine results files (.jsonl shards, .duckdb) into one DuckDB store, without duplicates")
    p.add_argument("sources", nargs="+", type=Path, help="results files to bring in")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help="the DuckDB store to merge into (default: results/compat.duckdb)")
    p = sub.add_parser("wheelhouse", help="download every wheel the matrix's cells need on an offline runner")
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    p.add_argument("--out", type=Path, default=Path(".wheelhouse"), help="folder for the wheels (default: .wheelhouse)")
    p.add_argument("--python-version", default="3.12", help="the runner's Python (default: 3.12)")
    p.add_argument(
        "--platform", default="x86_64-manylinux_2_28", help="the runner's platform, as uv names it (default: x86_64-manylinux_2_28)"
    )
    p.add_argument("--base-freeze", type=Path, default=None, help="the runner base interpreter's `pip freeze` (needed for inherit axes)")
    p.add_argument("--base-python", default="", help="path of that interpreter on the runner (recorded only)")
    p.add_argument("--bnb-keep", nargs="*", default=None, help="slim bitsandbytes wheels to these native libraries, e.g. cuda130")
    p.add_argument("--no-tools", action="store_true", help="do not add the harness's own runner tools (uv)")
    p.add_argument(
        "--refine-budget",
        type=float,
        default=0.0,
        metavar="MIB",
        help="also hold the releases a refinement of each range may build, up to MIB of wheels, and the release lists (one trip)",
    )
    _add_suite(
        p.add_argument_group(
            "a pytest suite",
            "the suite the runner's sweep will run (as sweep's flags, or the matrix's [tests]): "
            "pytest, the plugins its configuration names and its requirements join every cell's wheels",
        )
    )
    p = sub.add_parser(
        "plan",
        help="print a scheduler's shards (a GitHub Actions matrix or a Slurm array script); each one's expected seconds on stderr",
    )
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    p.add_argument("--shards", type=int, default=4, help="how many shards (default: 4)")
    p.add_argument("--format", choices=["github-actions", "slurm"], default="github-actions", help="output format")
    p.add_argument(
        "--db",
        type=Path,
        default=DEFAULT_DB,
        help="the results file whose stored durations balance a suite's shards (default: results/compat.duckdb)",
    )
    _add_durations(p)
    _add_suite(p)
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    p.add_argument("--env-root", type=Path, default=None, help="where the shards' cell virtualenvs live (passed on to each shard)")
    p.add_argument("--run-id", default="", help="the shards' run id (passed on; default: derived from the matrix and scenario files)")
    _add_run_tag(p)
    p.add_argument("--scenario", action="append", default=[], help="scenario name or path to a .py file (repeatable; passed on)")
    p.add_argument(
        "--merged",
        type=Path,
        default=DEFAULT_DB,
        help="slurm: the DuckDB file the dependent job merges into and refines (default: results/compat.duckdb)",
    )
    p.add_argument("--gpus-per-task", action="store_true", help="slurm: each array task asks for one GPU (#SBATCH --gres=gpu:1)")
    p = sub.add_parser("bisect", help="find the release or commit of one library that breaks or fixes a scenario or one test")
    p.add_argument("--scenario", default="", help="scenario name or path (or --test)")
    p.add_argument(
        "--test",
        default="",
        metavar="NODEID",
        help="one test of your pytest suite instead, e.g. tests/test_lora.py::test_merge[4bit]: just that node id runs in each probe",
    )
    p.add_argument(
        "--tests-root",
        default="",
        help="with --test: the folder where you run pytest (default: the matrix's [tests] root, else the results file's, else .)",
    )
    p.add_argument("--test-requirement", action="append", default=[], help="with --test: a test dependency for every probe (repeatable)")
    p.add_argument("--axis", required=True, help="the library to bisect, e.g. accelerate")
    p.add_argument("--good", default="", help="a release (or git ref with --git) where the scenario passes")
    p.add_argument("--bad", default="", help="a release (or git ref) where it fails; older than --good to find a fix")
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix for settings and the other axes (default: matrix.toml)")
    p.add_argument("--cell", default="", help="take the other axes from this cell of the matrix (default: its first cell)")
    p.add_argument("--pin", action="append", default=[], help="pin another axis, e.g. --pin transformers=5.6.2 (repeatable)")
    p.add_argument("--git", default="", help="bisect commits of this repository (a local clone or URL) between --good and --bad refs")
    p.add_argument("--repeat", type=int, default=1, help="runs per candidate (flaky scenarios)")
    p.add_argument("--allowed-failures", type=int, default=0, help="a candidate is good if at most this many of its runs fail")
    _add_db(p)
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live")
    _add_refine(sub)
    _add_dashboard(sub)
    _add_init(sub)
    _add_watch(sub)
    return parser


def _cmd_merge(args: argparse.Namespace, console: Console) -> int:
    from harness.storage import queries
    from harness.storage.shardfile import read_records
    from harness.storage.store import Store

    missing = [str(p) for p in args.sources if not p.is_file()]
    if missing:
        raise BadInput(f"no such results file(s): {', '.join(missing)}; pass .jsonl shards or .duckdb files")
    with Store(args.db) as store:
        for source in args.sources:
            added = store.merge_records(read_records(source)) if source.suffix == ".jsonl" else store.merge_database(source)
            console.print(f"{source}: {added} outcome(s) added")
        console.print(f"{args.db}: {queries.row_count(store)} outcome(s), {queries.duplicate_key_count(store)} duplicate key(s)")
    return EXIT_OK


def _cmd_wheelhouse(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.wheelhouse import wheelhouse_for

    report = wheelhouse_for(
        args.matrix,
        args.out,
        python_version=args.python_version,
        platform=args.platform,
        base_freeze=args.base_freeze,
        base_python=args.base_python,
        keep_bnb=args.bnb_keep,
        runner_tools=not args.no_tools,
        refine_budget_mib=args.refine_budget,
        suite=_suite_options(args),
    )
    for cell, status in report.cells.items():
        console.print(f"{cell}: {status}")
    size = report.size_mib()
    console.print(f"{len(report.downloaded)} wheel(s) in {args.out} ({size:.1f} MiB); slimmed: {', '.join(report.slimmed) or 'none'}")
    if args.refine_budget:
        _print_refinement(report, args, console)
    return EXIT_OK


def _parse_pins(pins: list[str]) -> dict[str, str]:
    from harness.errors import BadInput

    out = {}
    for pin in pins:
        if "=" not in pin:
            raise BadInput(f"--pin {pin!r} must look like package=version, e.g. transformers=5.6.2")
        name, version = pin.split("=", 1)
        out[name.strip().lower()] = version.strip().lstrip("=")
    return out


def _print_refinement(report: WheelhouseReport, args: argparse.Namespace, console: Console) -> None:
    """What the runner can refine by itself, which lines the budget left out and by how many MiB, and how to continue."""
    from harness.analysis.lines import shortfalls

    holding = report.holding
    between = {(r.axis, v) for r in holding.ranges for v in r.between}
    used = f"{holding.mib:.3g} of {args.refine_budget:g} MiB"
    axes = f"release lists of {len(holding.listed)} axis(es)" + (f" ({', '.join(sorted(holding.listed))})" if holding.listed else "")
    console.print(
        f"refinement: {len(holding.held)} of {len(between)} release(s) between tested ones held ({used}), "
        f"for {len(holding.ranges)} range(s) on the matrix's lines; {axes}",
        overflow="fold",
    )
    short = shortfalls(holding)
    for line in short:
        console.print(f"  left out: {line.text()}", overflow="fold", highlight=False)
    if holding.left_out:
        whole = holding.to_hold_all()
        needed = (
            f"--refine-budget {whole:g}"
            if whole
            else f"a --refine-budget well over {holding.mib + sum(m or 0 for m in holding.left_out.values()):.3g} (not all weighed)"
        )
        console.print(f"  to hold them all: the same command with {needed}; after the run, `harness refine --plan` goes on")


def _cmd_bisect(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.bisect import BisectOptions, bisect_file, describe

    options = BisectOptions(args.scenario, args.axis, args.good, args.bad, args.matrix, args.db, args.cell, _parse_pins(args.pin))
    options.git, options.repeat, options.allowed_failures, options.env_root = args.git, args.repeat, args.allowed_failures, args.env_root
    options.test, options.tests_root, options.test_requirements = args.test, args.tests_root, args.test_requirement

    def show(p: Probe[Step], remaining: int) -> None:
        console.print(f"  probe {p.candidate}: {p.verdict.value}" + (f" ({p.detail})" if p.detail else "") + f"  [{remaining} left]")

    run = bisect_file(options, on_probe=show)  # every mistake is found before the results file is opened
    console.print(f"[bold]{escape((args.test + ': ') if args.test else '')}{describe(run, args.axis)}[/]", highlight=False)
    console.print(f"{len(run.result.probes)} probe(s), {run.built} environment(s) built; outcomes stored under run {run.run_id}")
    return EXIT_OK


def _add_pin(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pin",
        help="the newest version set on which the chosen scenarios all pass, with evidence; requirements, constraints, pylock.toml",
        description="Among the stored cells of one machine class where every chosen scenario or test passed (every repeat, "
        "every run), the newest by the ranking, with the evidence and the newer versions that were excluded and why. "
        "See docs/pins-and-reports.md.",
    )
    _add_db(p)
    p.add_argument("--scenario", action="append", default=[], help="a scenario (or test node id) that must pass (repeatable)")
    p.add_argument(
        "--test",
        action="append",
        default=[],
        metavar="SELECTION",
        help="tests that must pass: a node id, a file (tests/test_x.py), a class (tests/test_x.py::TestX) or a folder (repeatable)",
    )
    p.add_argument(
        "-m",
        "--marker",
        default="",
        help="tests whose stored pytest markers match this expression, as pytest reads -m (within --test when given)",
    )
    p.add_argument(
        "--machine",
        default="",
        help="the machine class to pin for: cpu, '1x NVIDIA H200', '2x NVIDIA H200' (case, spaces and NVIDIA do not matter), "
        "or any (all pooled); default: the newest run's",
    )
    p.add_argument(
        "--fix", action="append", default=[], help="hold an axis: torch=2.13.0 (also matches 2.13.0+cpu) or transformers<5.20 (repeatable)"
    )
    p.add_argument("--gpu", default="", help="only evidence from runs whose GPU name contains this, e.g. H200 or cpu")
    p.add_argument("--platform", default="", help="only evidence from runs whose platform contains this, e.g. linux-x86_64")
    p.add_argument("--rank", default="", help="axes in order of preference (default: transformers,peft,accelerate,bitsandbytes,torch)")
    p.add_argument("--out", type=Path, default=None, help="write requirements.txt, constraints.txt and pylock.toml into this folder")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument(
        "--constraints",
        action="store_true",
        help="print instead the requirements the results state ('transformers>=5.6.0 needs peft>=0.19.0') as pip constraints "
        "for your own requirements: those of --scenario/--test, or all, on the machine class",
    )


def _cmd_pin(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.pin import pin_file, stated_constraints
    from harness.errors import EXIT_RUN_FAILED

    db = _existing_duckdb(args.db)
    if args.constraints:
        print(stated_constraints(Path(db), args.scenario, args.test, args.machine), end="")
        return EXIT_OK
    flags = {"machine": args.machine, "tests": args.test, "marker": args.marker}
    result, files, sources = pin_file(Path(db), args.scenario, args.fix, args.gpu, args.platform, args.rank, args.out, **flags)
    if not result.found:
        print(json.dumps(result.to_dict()) if args.json else "\n".join(result.describe()))
        return EXIT_RUN_FAILED
    commands = {"pip": result.install_command("pip", sources), "uv": result.install_command("uv", sources)}
    if args.json:
        written = files.files if files else {}
        print(json.dumps({**result.to_dict(), "install": commands, "files": written, "lock_note": files.lock_note if files else ""}))
        return EXIT_OK
    print("\n".join(result.describe()))
    print(commands["pip"])
    print(commands["uv"])
    if files and files.files:
        print(f"wrote {', '.join(files.files.values())}")
    if files and files.lock_note:
        print(files.lock_note)
    return EXIT_OK


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="a markdown issue body for a failure signature or a cell: versions, contrast table, attribution, repro, traceback",
        description="Writes an issue body from stored evidence: where to file it (from the blamed frame), the exact versions, "
        "the cells that pass and fail, which release introduced or fixed it, a repro command and the traceback tail. "
        "See docs/pins-and-reports.md.",
    )
    _add_db(p)
    p.add_argument("--signature", default="", help="the failure: its signature text, its family hash, or a part of it naming one signature")
    p.add_argument("--test", default="", metavar="NODEID", help="the failure of this test (with --signature: the one both name); it leads")
    p.add_argument("--cell", default="", help="a cell id (see `harness summary`)")
    p.add_argument(
        "--repro",
        nargs="?",
        const=_BESIDE,
        default=None,
        metavar="FILE",
        help="also write a one-file PEP 723 repro (`uv run FILE` fails with the signature) and FILE-passing.py beside it; "
        "without FILE: beside --out",
    )
    p.add_argument("--all", action="store_true", help="one report per failure family, and index.md, into --out DIR")
    p.add_argument("--out", type=Path, default=None, help="write the markdown to this file instead of printing it (with --all: a folder)")


def _add_publish(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish",
        help="write the compatibility table as a static site (DIR/index.html): heatmap, answers, known-good sets, support tables",
        description="One self-contained index.html (data and scripts inline, no server, no request to any other host) "
        "that a project can commit or push to GitHub Pages. See docs/dashboard.md.",
    )
    _add_db(p)
    p.add_argument("--out", type=Path, default=Path("site"), help="the folder to write index.html into (default: site)")


def _cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.publish import publish, summary_line

    page, site = publish(args.db, args.out)
    print(summary_line(page, site))
    return EXIT_OK


_BESIDE = "<beside --out>"


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.report import report, report_all

    if args.all:
        if args.signature or args.test or args.cell or args.out is None or args.repro not in (None, _BESIDE):
            raise BadInput("--all writes every failure's report into a folder: pass --out DIR (and --repro, without FILE), nothing else")
        done = report_all(Path(_existing_duckdb(args.db)), args.out, repro=args.repro is not None)
        also = f" and {len(done.scripts)} repro script(s)" if done.scripts else ""
        print(f"wrote {len(done.reports)} report(s){also} into {args.out}; the index: {done.index}")
        return EXIT_OK
    if bool(args.signature or args.test) == bool(args.cell):
        raise BadInput(
            "pass exactly one of --signature (text, family hash or a part of it), --test NODEID and --cell (an id from `harness summary`)"
        )
    repro = None
    if args.repro == _BESIDE:
        if args.out is None:
            raise BadInput("--repro without FILE writes the script beside --out: pass --repro repro.py, or --out issue.md")
        repro = args.out.with_suffix(".py")
    elif args.repro is not None:
        repro = Path(args.repro)
    markdown, scripts = report(Path(_existing_duckdb(args.db)), args.signature, args.cell, test=args.test, repro=repro)
    said = f"wrote {', '.join(map(str, scripts))}: `uv run {scripts[0].name}` reproduces it" if scripts else ""
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown)
        title = next((line for line in markdown.splitlines() if line.startswith("**Suggested title:**")), "")
        print(f"wrote {args.out} ({len(markdown.splitlines())} lines); {title.replace('**', '')}")
        if said:
            print(said)
    else:
        print(markdown, end="")
        if said:
            print(said, file=sys.stderr)  # stdout is the markdown alone
    return EXIT_OK


def _add_dashboard(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="browse a results file in the browser: matrix, failures, one cell, two cells, pin (Streamlit)",
        description="Start the Streamlit dashboard (dashboard/app.py) over a results file, opened read-only. "
        "Without --db: results/compat.duckdb if a sweep wrote it, else the shipped sample results/default.duckdb. "
        "See docs/dashboard.md.",
    )
    p.add_argument("--db", type=Path, default=None, help="results file (default: results/compat.duckdb, else results/default.duckdb)")
    p.add_argument("--port", type=int, default=8501, help="port to serve on (default: 8501)")
    p.add_argument("--address", default="127.0.0.1", help="address to serve on (default: 127.0.0.1; 0.0.0.0 to share it)")
    p.add_argument("--headless", action="store_true", help="do not open a browser (servers, CI)")


def _cmd_dashboard(args: argparse.Namespace, console: Console) -> int:
    import importlib.util
    import os
    import subprocess

    from harness.errors import BadInput
    from harness.inputs import bundled

    db = args.db or (DEFAULT_DB if DEFAULT_DB.exists() else bundled.sample_db())
    if db is None:
        raise BadInput(f"no results file: {str(DEFAULT_DB)!r} does not exist here; run `harness sweep` first or pass --db FILE")
    _existing_duckdb(db)
    app = bundled.dashboard_app()
    if importlib.util.find_spec("streamlit") is None:
        raise BadInput(
            "streamlit is not installed; add the dashboard extra: uv tool install --force 'compat-harness[dashboard]' "
            "(pipx: pipx inject compat-harness streamlit; a checkout: pip install -e '.[dev]')"
        )
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port), "--server.address", args.address]
    command += ["--server.headless", "true" if args.headless else "false", "--browser.gatherUsageStats", "false", "--", "--db", str(db)]
    console.print(f"dashboard over {db} (read-only) at http://{args.address}:{args.port}  (Ctrl+C stops it)")
    sys.stdout.flush()
    if os.name == "posix":
        os.execv(sys.executable, command)  # become the server: a signal to this process reaches it
    try:
        return subprocess.run(command).returncode
    except KeyboardInterrupt:
        return EXIT_OK


def _add_refine(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "refine",
        help="turn a results file's ranges into exact releases: build the releases between tested ones, on this machine",
        description="Bisects every range 'between X (fails) and Z (passes); not built: Y…' of the file whose machine is this one, "
        "building probe cells on the same line (other axes held), stored as ordinary outcomes under run refine-<machine>. "
        "Settings (index, find-links, python) come from --matrix. See docs/attribution.md.",
    )
    _add_db(p)
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix for the index settings and python (default: matrix.toml)")
    p.add_argument("--limit", type=int, default=None, help="build at most this many probe cells (default: the matrix's refine_limit)")
    p.add_argument("--lines", choices=["all", "first"], default=None, help="refine every line of a failure, or only its first")
    p.add_argument("--scenario", action="append", default=[], help="a scenario file the sweep ran from outside scenarios/ (repeatable)")
    p.add_argument(
        "--git",
        action="append",
        default=[],
        help="AXIS=PATH: a clone of that axis' repository with release tags; exact answers are walked down to the commit and its PR",
    )
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live")
    p.add_argument(
        "--plan",
        type=Path,
        default=None,
        help="build nothing: write a matrix of the probe cells the next --rounds rounds may need (for an offline runner)",
    )
    p.add_argument("--rounds", type=int, default=2, help="with --plan: rounds of bisection to prepare for (default: 2)")
    p.add_argument("--machine", default="", help="with --plan: only answers on machines whose label contains this, e.g. H200")
    p.add_argument("--axis", action="append", default=[], help="with --plan: only ranges along this axis (repeatable)")
    p.add_argument(
        "--account",
        action="store_true",
        help="build nothing: say per line of the matrix how each answer of --db (a .jsonl shard too) was reached, "
        "against what the wheelhouse held, and whether a second trip can help (the one trip's closing lines)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="with --account: the wheelhouse folder (default: the matrix's find_links folder with harness-wheelhouse.json)",
    )


def _cmd_refine(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.refine import refine_and_attribute, trip_account, write_probe_matrix
    from harness.commands.summary import render_transitions

    if args.account:  # on the offline runner too: its .jsonl shard, no DuckDB
        for line in trip_account(args.db, args.matrix, args.wheelhouse):
            console.print(line, soft_wrap=True, highlight=False)
        return EXIT_OK
    db = Path(_existing_duckdb(args.db))
    if args.plan:
        plan = write_probe_matrix(db, args.matrix, args.plan, args.rounds, args.machine, args.axis)
        versions = sorted({f"{p.line.axis} {p.value}" for p in plan.probes})
        lines = len({(p.line.machine, p.line.axis, p.line.held) for p in plan.probes})
        console.print(f"wrote {args.plan}: {len(plan.probes)} probe cell(s) on {lines} line(s); releases to prepare: {', '.join(versions)}")
        for line in plan.left_out:
            console.print(f"  left out: {line}", soft_wrap=True, highlight=False)
        return EXIT_OK
    done = refine_and_attribute(
        db,
        args.matrix,
        git=args.git,
        limit=args.limit,
        share=args.lines,
        scenario_files=args.scenario,
        env_root=args.env_root,
        on_round=_print_round(console),
        on_probe=lambda line: console.print(line, highlight=False),
    )
    console.print(f"{done.report.line()}; probes stored under run {done.run_id}")
    for answer in done.commits:
        console.print(answer.line(), highlight=False)
    result = done.answers.result
    render_transitions(result.transitions, console, result.flaky, result.machines)
    return EXIT_OK


def _add_init(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold a project of your own: matrix.toml, scenarios/ with two examples, a CI workflow, a README",
        description="Writes a commented matrix.toml for the torch/transformers/accelerate/peft stack, scenarios/ with a "
        "plain-script example and one that uses the scenario kit, .github/workflows/compat.yml (on demand and nightly: "
        "a sharded sweep, a merge, `harness watch`, the results and the report uploaded), a README and a .gitignore. "
        "Overwrites nothing: if one of the files exists, nothing is written. See docs/tool.md.",
    )
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), help="the project folder (default: the current one; created if missing)")


def _cmd_init(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.init import init_project, next_steps

    print("\n".join(next_steps(init_project(args.dir))))
    return EXIT_OK


def _add_watch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="test the releases newer than the results file holds against the last known-good set; exit 1 names a regression",
        description="Asks the index which releases of each axis are newer than the results file holds, builds the known-good "
        "set with one axis moved to its newest release (an ordinary sweep into the same file), refines what breaks down to the "
        "exact release, and reports: exit 0 nothing new broke, 1 a regression (scenario, signature, the exact release and "
        "the one before it, on this machine), 2 bad input. See docs/tool.md.",
    )
    p.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix for the axes and the index settings (default: matrix.toml)")
    _add_db(p)
    p.add_argument(
        "--exclude-newer",
        default="",
        help="stand-in for now: only releases uploaded before this date (e.g. 2026-11-20), and the new cells resolved as of it "
        "(default: the matrix's exclude_newer, else now)",
    )
    p.add_argument("--axis", action="append", default=[], help="watch only this axis (repeatable; default: every axis with releases)")
    p.add_argument("--scenario", action="append", default=[], help="a scenario file the sweep ran from outside scenarios/ (repeatable)")
    p.add_argument(
        "--tests",
        nargs="+",
        default=[],
        metavar="PATH",
        help="your pytest suite, as `harness sweep --tests` takes it (default: the matrix's [tests] table, else the suite the "
        "results file's newest run recorded); the report groups tests by file and signature",
    )
    p.add_argument("--tests-root", default="", help="with --tests: the folder where you run pytest (default .)")
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    p.add_argument("--test-requirement", action="append", default=[], help="a test dependency for every new cell (repeatable)")
    _add_allow_empty(p)
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text", help="the report on stdout (default: text)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the markdown report here (a CI summary, an issue body)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    p.add_argument("--dry-run", action="store_true", help="say what is new and which cells would be built; build nothing")
    p.add_argument(
        "--no-refine", action="store_true", help="leave a failing release's range as a range (default: build the releases between)"
    )
    p.add_argument("--refine-limit", type=int, default=None, help="build at most this many probe cells (default: the matrix's)")
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live (default: the matrix's env_dir)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI); progress goes to stderr either way")


def _cmd_watch(args: argparse.Namespace, console: Console) -> int:
    from harness.commands.watch import WatchOptions, print_round, watch

    log = Console(stderr=True, width=console.width)
    options = WatchOptions(args.matrix, args.db, args.exclude_newer, args.axis, args.scenario, args.env_root)
    options.refine, options.refine_limit, options.dry_run = not args.no_refine, args.refine_limit, args.dry_run
    options.tests, options.tests_root, options.keyword, options.marker = args.tests, args.tests_root, args.keyword, args.marker
    options.test_requirements, options.allow_empty = args.test_requirement, args.allow_empty
    progress = None if args.no_progress else ProgressReporter(log)
    report = watch(options, progress, print_round(lambda line: log.print(escape(line), highlight=False)))  # a node id has [brackets]
    for path, text in ((args.markdown, report.markdown()), (args.json, report.json() + "\n")):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.format == "markdown":
        print(report.markdown(), end="")
    elif args.format == "json":
        print(report.json())
    else:
        print("\n".join(report.text()))
    return report.exit_status


def _cmd_servers(args: argparse.Namespace, console: Console) -> int:
    """The fork servers kept by `sweep --keep-servers`; with --stop, end them."""
    import time

    from harness.running import kept

    kept.usable_dir()
    servers = kept.parked()
    if not servers:
        console.print("no fork server is kept")
        return EXIT_OK
    for server in servers:
        left = max(0.0, server.parked_at + server.idle - time.time())
        if args.stop:
            done = "stopped" if kept.stop(server.path) else "already gone"
            console.print(f"pid {server.pid} {server.prefix}: {done}", highlight=False)
        else:
            console.print(f"pid {server.pid} {server.prefix}: parked, exits in {left:.0f} s unless a sweep takes it", highlight=False)
    return EXIT_OK


COMMANDS = {
    "sweep": _cmd_sweep,
    "list": _cmd_list,
    "scenarios": _cmd_scenarios,
    "summary": _cmd_summary,
    "changes": changes.run,
    "compact": compact.run,
    "attribute": _cmd_attribute,
    "merge": _cmd_merge,
    "wheelhouse": _cmd_wheelhouse,
    "bisect": _cmd_bisect,
    "plan": _cmd_plan,
    "pin": _cmd_pin,
    "refine": _cmd_refine,
    "report": _cmd_report,
    "publish": _cmd_publish,
    "dashboard": _cmd_dashboard,
    "init": _cmd_init,
    "watch": _cmd_watch,
    "servers": _cmd_servers,
}


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's time limit, `timeout`, a cancelled CI job), raised in the main thread."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def console_width(compact: bool, tty: bool, columns: str) -> int | None:
    """A terminal's own width (None: rich asks it, COLUMNS first). Piped output (CI logs, files):
    the summary fits COLUMNS if it is set, else 100 columns; --wide and other commands get 200."""
    if tty:
        return None
    if not compact:
        return 200
    return int(columns) if columns.isdigit() and int(columns) >= 20 else WIDTH


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The same orderly stop as Ctrl-C: running scenarios are killed (they live in their own
    # sessions, which the scheduler's signal does not reach) and nothing half-done is stored.
    signal.signal(signal.SIGTERM, _terminate)
    # Every temporary folder of this run in one, gone when it ends; dead runs' gone now.
    from harness.running import scratch

    scratch.claim()
    compact = args.command in ("sweep", "summary") and not getattr(args, "wide", False)
    console = Console(width=console_width(compact, sys.stdout.isatty(), os.environ.get("COLUMNS", "")))
    with paced_collector():
        return _run(args, console)


@contextmanager
def paced_collector() -> Iterator[None]:
    """The cycle collector at a command's pace, restored after (for callers in-process).

    A command holds a results file's outcomes, 400,000 dicts for a team's suite, and makes
    thousands of objects more per step of an answer. At the collector's default pace its full
    collections walked them all again and again: 1.2 s of a 20,000-test summary, 0.4 s at this
    one (`gc.callbacks`). They hold no cycles: reference counting frees them.
    """
    pace = gc.get_threshold()
    gc.set_threshold(50_000, 20, 10)
    try:
        yield
    finally:
        gc.set_threshold(*pace)


def _run(args: argparse.Namespace, console: Console) -> int:
    try:
        return COMMANDS[args.command](args, console)
    except HarnessError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("harness: stopped by SIGTERM; rerun the same command to resume", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("harness: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
