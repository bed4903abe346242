"""`harness report`: the face of `workflows.reporting`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from harness.commands import flags
from harness.errors import EXIT_OK, BadInput
from harness.workflows.reporting import report, report_all

# -- the command ---------------------------------------------------------------------------------
#: `--repro` without FILE: the script goes beside --out (its name with .py).
_BESIDE = "<beside --out>"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="a markdown issue body for a failure signature or a cell: versions, contrast table, attribution, repro, traceback",
        description="Writes an issue body from stored evidence: where to file it (from the blamed frame), the exact versions, "
        "the cells that pass and fail, which release introduced or fixed it, a repro command and the traceback tail. "
        "See docs/pins-and-reports.md.",
    )
    flags.add_db(p)
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


def run(args: argparse.Namespace, console: Console) -> int:

    if args.all:
        if args.signature or args.test or args.cell or args.out is None or args.repro not in (None, _BESIDE):
            raise BadInput("--all writes every failure's report into a folder: pass --out DIR (and --repro, without FILE), nothing else")
        done = report_all(Path(flags.existing_duckdb(args.db)), args.out, repro=args.repro is not None)
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
    markdown, scripts = report(Path(flags.existing_duckdb(args.db)), args.signature, args.cell, test=args.test, repro=repro)
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
