"""`harness list`: the matrix's cells, one id per line (with -v, each cell's versions too).

The ids are what `harness sweep --cell`, `harness bisect --cell` and nox's sessions take.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the matrix's cells (one id per line)")
    flags.add_matrix(p)
    p.add_argument("--verbose", "-v", action="store_true", help="also print each cell's versions")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.inputs.candidates import resolve_matrix
    from harness.inputs.matrix import load_matrix

    resolved = resolve_matrix(load_matrix(args.matrix, lenient=True))
    for cell in resolved.cells:
        print(cell.id if not args.verbose else f"{cell.id}\t{cell}")
    return EXIT_OK
