"""`harness publish`: the compatibility table as a static site (`render.page`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.render.page import publish, summary_line


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish",
        help="write the compatibility table as a static site (DIR/index.html): heatmap, answers, known-good sets, support tables",
        description="One self-contained index.html (data and scripts inline, no server, no request to any other host) "
        "that a project can commit or push to GitHub Pages. See docs/dashboard.md.",
    )
    flags.add_db(p)
    p.add_argument("--out", type=Path, default=Path("site"), help="the folder to write index.html into (default: site)")


def run(args: argparse.Namespace, console: Console) -> int:

    page, site = publish(args.db, args.out)
    print(summary_line(page, site))
    return EXIT_OK
