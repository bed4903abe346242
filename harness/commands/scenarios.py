"""`harness scenarios [--pack NAME]`: the scenarios of the current folder's scenarios/ (or of a
built-in pack), each with the packages and GPUs it requires and its docstring's first line."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from harness.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scenarios", help="list the scenarios in scenarios/ (of the current directory) with what they require")
    p.add_argument("--pack", default="", help="list a built-in pack instead, e.g. forum (use it as --scenario pack:forum)")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.inputs import bundled
    from harness.inputs.scenarios import PACK_PREFIX, available, project_dir, select

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
