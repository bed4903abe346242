"""`harness plan`: a scheduler's shards of the matrix, as a GitHub Actions matrix or a Slurm array script.

`plan_shards` lays the shards out as `harness sweep --shard i/n` will in each of them (the same
inputs, so the same layout): cells round robin, or with a suite whole cells and slices of cells'
tests balanced by stored durations. Stdout is the scheduler's (JSON, or the script filled from
harness/templates/plan/slurm.sbatch); each shard's expected seconds go to stderr, for people.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from harness.errors import BadInput
from harness.inputs.matrix import shard_cells
from harness.running.plan import SweepOptions, SweepPlan, plan, shard_layout
from harness.running.shards import cell_weights

#: The array job's script; `str.format` fills it (`{{`/`}}` are the shell's own braces).
SLURM_TEMPLATE = Path(__file__).resolve().parent.parent / "templates" / "plan" / "slurm.sbatch"


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


def slurm_script(args: argparse.Namespace, shards: list[ShardPlan], cells: int) -> str:
    """The array job of `harness plan --format slurm`: task i sweeps shard i/n into its own file; the
    first task of each submission submits the dependent job (afterany: after every task, whatever
    its end) that merges the shards and refines the ranges, so one `sbatch` does it all, and a
    resubmitted task (`sbatch --array=3 FILE`) merges and refines again once it is done."""
    n = len(shards)
    sweep_flags: list[str] = ["--matrix", str(args.matrix)]
    for value, flag in ((args.tests_root, "--tests-root"), (args.keyword, "-k"), (args.marker, "-m")):
        sweep_flags += [flag, value] if value else []
    sweep_flags += ["--tests", *args.tests] if args.tests else []
    sweep_flags += [x for r in args.test_requirement for x in ("--test-requirement", r)]
    sweep_flags += ["--tests-of", args.tests_of] if args.tests_of else []
    sweep_flags += ["--tests-git", args.tests_git] if args.tests_git else []
    sweep_flags += ["--env-root", str(args.env_root)] if args.env_root else []
    sweep_flags += ["--run-id", args.run_id] if args.run_id else []
    sweep_flags += ["--run-tag", args.run_tag] if args.run_tag else []
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
    return SLURM_TEMPLATE.read_text().format(
        n=n,
        cells=cells,
        matrix=args.matrix,
        gres="#SBATCH --gres=gpu:1\n" if args.gpus_per_task else "",
        shards="\n".join(lines),
        sweep=shlex.join(["harness", "sweep", *sweep_flags, *scenarios, *shard_flags]),
        merged=merged,
        refine=refine,
    )
