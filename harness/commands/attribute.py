"""`harness attribute`: the face of `workflows.attributing`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.commands import flags
from harness.errors import EXIT_OK
from harness.workflows.attributing import attribute_file


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="for each failure and library, the release that introduced it and the one that fixed it (others held fixed)",
        description="For every failure signature and every axis, the transitions while the other axes stay fixed: "
        "'introduced in transformers X, fixed in Y'. Stored in the file's `transitions` table; see docs/attribution.md.",
    )
    flags.add_db(p)
    p.add_argument("--run-id", default="", help="only this run's outcomes (default: every run in the file)")
    p.add_argument("--scenario", action="append", default=[], help="only this scenario (repeatable)")
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per transition and flaky cell instead of the tables (a suite's are grouped per test file in the text)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not ask the index for the releases between tested versions (use those stored with the runs)",
    )


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.render.summary import render_transitions

    db = flags.existing_duckdb(args.db)
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
