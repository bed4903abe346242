"""`harness changes`: what changed since the last run, per machine, and why.

Regressed, fixed, flaky, removed and new, as `workflows.changes` reads them; under each regression
and fix, what moved in its cells between the two runs and the cause `harness explain` found
(`--explain` runs it first). Text (a line per file and signature), `--markdown` (the job summary,
the nightly issue) or `--json` (every change). `harness summary` and `harness publish` lead with
its headline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from harness.analysis.changes import KINDS
from harness.analysis.markdown import plain_text
from harness.errors import EXIT_OK, BadInput
from harness.workflows.changes import SHOWN, TITLES, Report, by_machine, cause_lines, changes_of, line, new_cells, tests_of


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "changes",
        help="what changed since the last run, per machine: tests that started failing, fixed, flaky, removed, new cells; and why",
        description=(
            "Compare the results file's current state with its state after the run before the newest sweep "
            "(or after --since RUN, or with the newest run before --since DATE). Exit 0 with the answer; 2 for bad input."
        ),
    )
    p.add_argument("--db", type=Path, default=Path("results/compat.duckdb"), help="the results file (default results/compat.duckdb)")
    p.add_argument("--since", default="", help="a run id of the file, or a date (2026-11-25): compare with the state then")
    p.add_argument(
        "--explain",
        action="store_true",
        help="first narrow every regression and fix to its cause by running the changed tests (`harness explain`, its defaults)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print markdown (a job summary, an issue) instead of text")
    fmt.add_argument("--json", action="store_true", help="print every change as JSON")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.storage import history
    from harness.storage.opening import open_results
    from harness.storage.store import Store

    if not args.db.is_file():
        raise BadInput(f"no results file at {str(args.db)!r}; pass --db with the file a sweep wrote")
    if args.explain:
        from harness.workflows.explain import ExplainOptions, explain_file

        explain_file(ExplainOptions(args.db, since=args.since), on_line=(lambda text: None) if args.json else console.print)
    with open_results(args.db, read_only=True) as store:
        if not isinstance(store, Store):
            shard = f"{str(args.db)!r} is a JSON-lines shard (one run)"
            raise BadInput(f"{shard}; merge it into a .duckdb file with `harness merge` to compare runs")
        if not history.is_split(store):
            older = f"{str(args.db)!r} keeps its runs as a harness before the history split did"
            raise BadInput(f"{older}; `harness compact --db {args.db}` splits it once, then rerun")
        report = changes_of(store, args.since)
    if report is None:
        text = f"{args.db}: one run, nothing to compare yet (the next run's changes show here)"
        print(json.dumps({"headline": "", "changes": [], "note": text}) if args.json else text)
        return EXIT_OK
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    elif args.markdown:
        print(markdown(report))
    else:
        render(report, console)
    return EXIT_OK


# -- words ---------------------------------------------------------------------------------------
def render(report: Report, console: Console) -> None:
    console.print(f"[bold]Changes {escape(report.headline())}[/] (newest run {escape(report.baseline.newest.run_id)})")
    console.print(f"History: {escape(report.depth.describe())}")
    if not report.changes.items:
        console.print("Nothing changed.")
        return
    for machine, found in by_machine(report).items():
        console.print(f"\n[bold]{escape(machine)}[/]")
        for kind in KINDS:
            mine = [g for g in found if g.kind == kind]
            if mine:
                console.print(f"  {TITLES[kind]}: {tests_of(report, machine, kind):,} test(s)")
                for group in mine[:SHOWN]:
                    console.print(f"    {escape(line(group))}", soft_wrap=True)
                    for said in cause_lines(report, group):
                        console.print(f"      {escape(said)}", soft_wrap=True)
                if len(mine) > SHOWN:
                    console.print(f"    … {len(mine) - SHOWN} more line(s): `harness changes --json` lists every change")
        cells = new_cells(report, machine)
        if cells:
            console.print(f"  New cells: {len(cells)}")
            for cell in cells:
                console.print(f"    {escape(cell)}", soft_wrap=True)


def markdown(report: Report) -> str:
    """The changes as markdown: a heading with the headline, then per machine a list per kind."""
    out = [f"### Changes {report.headline()}", "", f"Newest run `{report.baseline.newest.run_id}`; history: {report.depth.describe()}.", ""]
    if not report.changes.items:
        return "\n".join([*out, "Nothing changed."])
    for machine, found in by_machine(report).items():
        out += [f"#### {machine}", ""]
        for kind in KINDS:
            mine = [g for g in found if g.kind == kind]
            if mine:
                out.append(f"**{TITLES[kind]}** ({tests_of(report, machine, kind):,} test(s))")
                for group in mine[:SHOWN]:
                    out.append(f"- {plain_text(line(group))}")
                    out += [f"  - {plain_text(said)}" for said in cause_lines(report, group)]
                if len(mine) > SHOWN:
                    out.append(f"- … {len(mine) - SHOWN} more line(s): `harness changes --json` lists every change")
                out.append("")
        cells = new_cells(report, machine)
        if cells:
            out += [f"**New cells** ({len(cells)})", *[f"- `{c}`" for c in cells], ""]
    return "\n".join(out).rstrip() + "\n"
