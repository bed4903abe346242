"""`harness bisect`: the face of `workflows.bisecting`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.analysis.bisect import Probe
from harness.commands import flags
from harness.errors import EXIT_OK, BadInput
from harness.workflows.bisecting import BisectOptions, Step, bisect_file, describe


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
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
    flags.add_matrix(p, "matrix for settings and the other axes (default: matrix.toml)")
    p.add_argument("--cell", default="", help="take the other axes from this cell of the matrix (default: its first cell)")
    p.add_argument("--pin", action="append", default=[], help="pin another axis, e.g. --pin transformers=5.6.2 (repeatable)")
    p.add_argument("--git", default="", help="bisect commits of this repository (a local clone or URL) between --good and --bad refs")
    p.add_argument("--repeat", type=int, default=1, help="runs per candidate (flaky scenarios)")
    p.add_argument("--allowed-failures", type=int, default=0, help="a candidate is good if at most this many of its runs fail")
    flags.add_db(p)
    p.add_argument("--env-root", type=Path, default=None, help="where cell virtualenvs live")


def run(args: argparse.Namespace, console: Console) -> int:

    options = BisectOptions(args.scenario, args.axis, args.good, args.bad, args.matrix, args.db, args.cell, _parse_pins(args.pin))
    options.git, options.repeat, options.allowed_failures, options.env_root = args.git, args.repeat, args.allowed_failures, args.env_root
    options.test, options.tests_root, options.test_requirements = args.test, args.tests_root, args.test_requirement

    def show(p: Probe[Step], remaining: int) -> None:
        console.print(f"  probe {p.candidate}: {p.verdict.value}" + (f" ({p.detail})" if p.detail else "") + f"  [{remaining} left]")

    run = bisect_file(options, on_probe=show)  # every mistake is found before the results file is opened
    console.print(f"[bold]{escape((args.test + ': ') if args.test else '')}{describe(run, args.axis)}[/]", highlight=False)
    console.print(f"{len(run.result.probes)} probe(s), {run.built} environment(s) built; outcomes stored under run {run.run_id}")
    return EXIT_OK


def _parse_pins(pins: list[str]) -> dict[str, str]:

    out = {}
    for pin in pins:
        if "=" not in pin:
            raise BadInput(f"--pin {pin!r} must look like package=version, e.g. transformers=5.6.2")
        name, version = pin.split("=", 1)
        out[name.strip().lower()] = version.strip().lstrip("=")
    return out
