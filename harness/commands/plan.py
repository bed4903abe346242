"""`harness plan`: the face of `workflows.planning`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.running.plan import SweepOptions
from harness.workflows.planning import plan_shards, slurm_script


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="print a scheduler's shards (a GitHub Actions matrix or a Slurm array script); each one's expected seconds on stderr",
    )
    flags.add_matrix(p)
    p.add_argument("--shards", type=int, default=4, help="how many shards (default: 4)")
    p.add_argument("--format", choices=["github-actions", "slurm"], default="github-actions", help="output format")
    p.add_argument(
        "--db",
        type=Path,
        default=flags.DEFAULT_DB,
        help="the results file whose stored durations balance a suite's shards (default: results/compat.duckdb)",
    )
    flags.add_durations(p)
    flags.add_suite(p)
    p.add_argument("-k", dest="keyword", default="", help="with --tests: pytest's -k expression")
    p.add_argument("-m", dest="marker", default="", help="with --tests: pytest's -m marker expression")
    p.add_argument("--env-root", type=Path, default=None, help="where the shards' cell virtualenvs live (passed on to each shard)")
    p.add_argument("--run-id", default="", help="the shards' run id (passed on; default: derived from the matrix and scenario files)")
    flags.add_run_tag(p)
    p.add_argument("--scenario", action="append", default=[], help="scenario name or path to a .py file (repeatable; passed on)")
    p.add_argument(
        "--merged",
        type=Path,
        default=flags.DEFAULT_DB,
        help="slurm: the DuckDB file the dependent job merges into and refines (default: results/compat.duckdb)",
    )
    p.add_argument("--gpus-per-task", action="store_true", help="slurm: each array task asks for one GPU (#SBATCH --gres=gpu:1)")


def run(args: argparse.Namespace, console: Console) -> int:
    options = flags.suite_options(
        args, SweepOptions(args.matrix, args.db, scenarios=args.scenario, run_id=args.run_id, env_root=args.env_root)
    )
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
