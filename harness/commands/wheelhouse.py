"""`harness wheelhouse`: the face of `workflows.wheelhouse`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.workflows.wheelhouse import WheelhouseReport, wheelhouse_for


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("wheelhouse", help="download every wheel the matrix's cells need on an offline runner")
    flags.add_matrix(p)
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
    flags.add_suite(
        p.add_argument_group(
            "a pytest suite",
            "the suite the runner's sweep will run (as sweep's flags, or the matrix's [tests]): "
            "pytest, the plugins its configuration names and its requirements join every cell's wheels",
        )
    )


def run(args: argparse.Namespace, console: Console) -> int:

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
        suite=flags.suite_options(args),
    )
    for cell, status in report.cells.items():
        console.print(f"{cell}: {status}")
    size = report.size_mib()
    console.print(f"{len(report.downloaded)} wheel(s) in {args.out} ({size:.1f} MiB); slimmed: {', '.join(report.slimmed) or 'none'}")
    if args.refine_budget:
        _print_refinement(report, args, console)
    return EXIT_OK


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
