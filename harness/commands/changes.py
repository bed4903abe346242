"""`harness changes`: what changed since the last run, per machine: regressed, fixed, flaky, new.

The first question of a nightly report (transformers' CI, crater): which tests started failing
since last night, which were fixed, which flipped with nothing changed (flaky), and which cells
are new (a new release a watch built). It compares the current state of the results file with
its state after the run before the newest sweep, or after `--since RUN`, or with the newest run
before `--since DATE` (`storage.history.baseline`; `analysis.changes` classes each change).
Text (a line per file and signature), `--markdown` (the job summary, the nightly issue) or
`--json` (every change). `harness summary` and `harness publish` lead with its headline.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from harness.analysis.changes import KINDS, Changes, Group, Kind, compare, groups, machine_label
from harness.errors import BadInput

if TYPE_CHECKING:  # DuckDB is imported where a command reads a file, not when the CLI starts
    from harness.storage import history
    from harness.storage.resultsfile import SqlResultsFile

EXIT_OK = 0
#: Lines of one kind shown in text and markdown (`--json` lists every change).
SHOWN = 20
_TITLES = {
    "regressed": "Started failing",
    "fixed": "Fixed",
    "flaky": "Flaky (flipped with nothing changed)",
    "removed": "Removed (not collected by the newest run)",
    "new": "New tests",
}


@dataclass(frozen=True)
class Report:
    """What changed since `baseline.run`, with the history it was read from."""

    baseline: history.Baseline
    changes: Changes
    depth: history.Depth

    def headline(self) -> str:
        """`since r-… (2026-11-25 04:23): +3 failing, −1 fixed, 2 flaky`."""
        return f"since {self.baseline.run.run_id} ({self.baseline.run.started_at:%Y-%m-%d %H:%M}): {self.changes.headline()}"

    def to_dict(self) -> dict[str, Any]:
        run, newest = self.baseline.run, self.baseline.newest
        counts = {kind: self.changes.tests(kind) for kind in KINDS}
        return {
            "since": {"run_id": run.run_id, "started_at": run.started_at.isoformat()},
            "newest": {"run_id": newest.run_id, "started_at": newest.started_at.isoformat()},
            "history": {"runs": self.depth.runs, "described": self.depth.describe(), "kept": self.depth.kept},
            "headline": self.headline(),
            "tests": counts,
            "new_cells": [{"machine": machine_label(m), "cell": c} for m, c in self.changes.new_cells],
            "changes": [{**c.to_dict(), "machine": machine_label(c.machine)} for c in self.changes.items],
        }


def changes_of(store: SqlResultsFile, since: str = "") -> Report | None:
    """The changes since `since` (a run id or a date; default the run before the newest sweep);
    None where the file holds no run before the newest (nothing to compare), or keeps its runs as
    a harness before the history split did (`harness compact` splits it)."""
    from harness.storage import history

    with store.reading():  # one view of the file for every read (each open costs 20 ms)
        if not history.is_split(store):
            return None
        base = history.baseline(store, since)
        if base is None:
            return None
        moment = base.run.started_at
        found = compare(history.spans_since(store, moment), moment, history.depends(store.fetch), history.cells_by(store, moment))
        return Report(base, found, history.depth(store))


def history_lines(store: Any) -> list[str]:
    """The summary's first lines, where the file holds more than one run: `since …: +3 failing, …`
    and how deep the history is; none for a JSON-lines shard or a file of one run."""
    from harness.storage.shardfile import ShardStore

    if isinstance(store, ShardStore):
        return []  # the GPU runner writes shards, and may have no DuckDB to import
    from harness.storage import history

    if not history.is_split(store):
        depth = history.depth(store)
        if depth.runs < 2:
            return []
        return [
            f"History: {depth.describe()}, kept as a harness before the history split kept them: every answer folds all "
            f"their runs; `harness compact --db {store.path}` splits the file once into its current state and what changed"
        ]
    report = changes_of(store)
    if report is None:
        return []
    return [f"Changes {report.headline()}", f"History: {report.depth.describe()} (`harness changes` for what changed)"]


# -- the command ---------------------------------------------------------------------------------
def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "changes",
        help="what changed since the last run, per machine: tests that started failing, fixed, flaky, new cells",
        description=(
            "Compare the results file's current state with its state after the run before the newest sweep "
            "(or after --since RUN, or with the newest run before --since DATE). Exit 0 with the answer; 2 for bad input."
        ),
    )
    p.add_argument("--db", type=Path, default=Path("results/compat.duckdb"), help="the results file (default results/compat.duckdb)")
    p.add_argument("--since", default="", help="a run id of the file, or a date (2026-11-25): compare with the state then")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="print markdown (a job summary, an issue) instead of text")
    fmt.add_argument("--json", action="store_true", help="print every change as JSON")


def run(args: argparse.Namespace, console: Console) -> int:
    from harness.storage.opening import open_results
    from harness.storage.store import Store

    if not args.db.is_file():
        raise BadInput(f"no results file at {str(args.db)!r}; pass --db with the file a sweep wrote")
    from harness.storage import history

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
def _by_machine(report: Report) -> dict[str, list[Group]]:
    found: dict[str, list[Group]] = defaultdict(list)
    for group in groups(report.changes):
        found[machine_label(group.machine)].append(group)
    for machine, _ in report.changes.new_cells:
        found.setdefault(machine_label(machine), [])
    return dict(sorted(found.items()))


def _tests(report: Report, machine: str, kind: Kind) -> int:
    """Distinct tests of one kind on one machine (by its label): a test in two groups counts once."""
    return len({c.test for c in report.changes.of(kind) if machine_label(c.machine) == machine})


def _new_cells(report: Report, machine: str) -> list[str]:
    """Each new cell of a machine with how its tests came out: `torch…-tf5.26.0… (19,500 pass, 300 fail)`."""
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    for c in report.changes.of("new"):
        if machine_label(c.machine) == machine and (c.machine, c.cell_id) in set(report.changes.new_cells):
            tally[c.cell_id][c.after or "—"] += 1
    return [f"{cell} ({', '.join(f'{n:,} {s}' for s, n in sorted(counts.items()))})" for cell, counts in sorted(tally.items())]


def _line(group: Group) -> str:
    tests = len(group.tests)
    what = group.tests[0] if tests == 1 else f"{tests} tests in {group.group}"
    cells = f"{len(group.cells)} cell(s)" if len(group.cells) > 1 else next(iter(group.cells))
    signature = f": {group.signature}" if group.signature else ""
    runs = sorted(group.runs)[0]
    when = "" if group.kind == "new" else f" ({runs[0]} → {runs[1]})" if runs[0] else f" (in {runs[1]})" if runs[1] else ""
    kept = len(group.not_run)
    held = f"; {kept:,} test{'s' if kept != 1 else ''} {'not run' if group.kind == 'regressed' else 'run again'}" if kept else ""
    return f"{what}{signature}, in {cells}{when}{held}"


def sections(report: Report) -> list[tuple[str, str, tuple[str, ...]]]:
    """(machine, what changed, its lines) in report order: the published page's "Since the last run"."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for machine, mine in _by_machine(report).items():
        for kind in KINDS:
            lines = [_line(g) for g in mine if g.kind == kind]
            if lines:
                more = [f"… {len(lines) - SHOWN} more line(s): `harness changes --json` lists every change"] if len(lines) > SHOWN else []
                found.append((machine, f"{_TITLES[kind]}, {_tests(report, machine, kind):,} test(s)", (*lines[:SHOWN], *more)))
        cells = _new_cells(report, machine)
        if cells:
            found.append((machine, f"New cells, {len(cells)}", tuple(cells)))
    return found


def render(report: Report, console: Console) -> None:
    console.print(f"[bold]Changes {escape(report.headline())}[/] (newest run {escape(report.baseline.newest.run_id)})")
    console.print(f"History: {escape(report.depth.describe())}")
    if not report.changes.items:
        console.print("Nothing changed.")
        return
    for machine, found in _by_machine(report).items():
        console.print(f"\n[bold]{escape(machine)}[/]")
        for kind in KINDS:
            mine = [g for g in found if g.kind == kind]
            if mine:
                console.print(f"  {_TITLES[kind]}: {_tests(report, machine, kind):,} test(s)")
                for group in mine[:SHOWN]:
                    console.print(f"    {escape(_line(group))}", soft_wrap=True)
                if len(mine) > SHOWN:
                    console.print(f"    … {len(mine) - SHOWN} more line(s): `harness changes --json` lists every change")
        cells = _new_cells(report, machine)
        if cells:
            console.print(f"  New cells: {len(cells)}")
            for cell in cells:
                console.print(f"    {escape(cell)}", soft_wrap=True)


def markdown(report: Report) -> str:
    """The changes as markdown: a heading with the headline, then per machine a list per kind."""
    out = [f"### Changes {report.headline()}", "", f"Newest run `{report.baseline.newest.run_id}`; history: {report.depth.describe()}.", ""]
    if not report.changes.items:
        return "\n".join([*out, "Nothing changed."])
    for machine, found in _by_machine(report).items():
        out += [f"#### {machine}", ""]
        for kind in KINDS:
            mine = [g for g in found if g.kind == kind]
            if mine:
                out.append(f"**{_TITLES[kind]}** ({_tests(report, machine, kind):,} test(s))")
                out += [f"- {_md(_line(g))}" for g in mine[:SHOWN]]
                if len(mine) > SHOWN:
                    out.append(f"- … {len(mine) - SHOWN} more line(s): `harness changes --json` lists every change")
                out.append("")
        cells = _new_cells(report, machine)
        if cells:
            out += [f"**New cells** ({len(cells)})", *[f"- `{c}`" for c in cells], ""]
    return "\n".join(out).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
