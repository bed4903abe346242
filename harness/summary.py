"""The table a sweep ends with: cells × scenarios, one status per outcome, then the failures."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.attribution import Flaky, Transition, attribute

STYLE = {
    "pass": "green",
    "fail": "red",
    "error": "red",
    "crash": "magenta",
    "timeout": "yellow",
    "oom": "magenta",
    "unresolvable": "dim",
    "install_failed": "dim",
    "not_applicable": "dim",
}


def cell_statuses(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{cell: {scenario: "pass" | "fail 2/3" | ...}}: repeats folded into one word."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        grouped[(row["cell_id"], row["scenario"])].append(row["status"])
    table: dict[str, dict[str, str]] = defaultdict(dict)
    for (cell, scenario), statuses in grouped.items():
        counts = Counter(statuses)
        if len(counts) == 1:
            word = statuses[0]
        else:
            worst = next(s for s in STYLE if s in counts and s != "pass")
            word = f"{worst} {counts[worst]}/{len(statuses)} (flaky)"
        table[cell][scenario] = word
    return dict(table)


def failure_families(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str, int, list[str]]]:
    """(signature, blamed library, outcomes, scenarios) for every failing signature, most frequent first."""
    hits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] not in ("pass", "not_applicable") and row.get("signature"):
            hits[row["signature"]].append(row)
    families = [(sig, rs[0].get("blamed_library") or "", len(rs), sorted({r["scenario"] for r in rs})) for sig, rs in hits.items()]
    return sorted(families, key=lambda f: (-f[2], f[0]))


def render(rows: list[dict[str, Any]], console: Console, title: str = "") -> None:
    statuses = cell_statuses(rows)
    scenarios = sorted({r["scenario"] for r in rows})
    table = Table(title=title or "outcomes", show_lines=False)
    table.add_column("cell", overflow="fold")
    for scenario in scenarios:
        table.add_column(scenario, overflow="fold")
    for cell in sorted(statuses):
        cells = []
        for scenario in scenarios:
            word = statuses[cell].get(scenario, "-")
            cells.append(f"[{STYLE.get(word.split()[0], 'white')}]{word}[/]")
        table.add_row(escape(cell), *cells)
    console.print(table)
    totals = Counter(r["status"] for r in rows)
    console.print("  ".join(f"[{STYLE.get(k, 'white')}]{k}: {v}[/]" for k, v in sorted(totals.items())))
    families = failure_families(rows)
    if families:
        fam = Table(title="failure signatures")
        fam.add_column("outcomes", justify="right")
        fam.add_column("blames")
        fam.add_column("signature", overflow="fold")
        fam.add_column("scenarios", overflow="fold")
        for sig, lib, count, scen in families:
            fam.add_row(str(count), lib or "-", escape(sig), escape(", ".join(scen)))
        console.print(fam)
    if rows:
        render_transitions(attribute(rows).transitions, console)


def render_transitions(transitions: Sequence[Transition], console: Console, flaky: Sequence[Flaky] = ()) -> None:
    """Per scenario and signature, one row per transition ("fixed in accelerate", "1.14.0 (after 1.13.0)"); then flaky cells."""
    groups: dict[tuple[str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        groups[(t.scenario, t.signature)].append(t)
    if groups:
        console.print("[bold]transitions[/]")
    for (scenario, signature), items in groups.items():
        console.print(f"[bold]{escape(scenario)}[/]: {escape(signature)}", overflow="fold")
        table = Table()
        table.add_column("change")
        table.add_column("where", overflow="fold")
        table.add_column("with (held fixed)", overflow="fold")
        for t in items:
            where = t.where()
            if t.untested:
                where += f"; untested: {', '.join(t.untested)}"
            if t.inconclusive:
                where += f"; inconclusive: {', '.join(t.inconclusive)}"
            colour = "red" if t.kind == "introduced" else "green"
            table.add_row(f"[{colour}]{t.kind} in {t.axis}[/]", escape(where), escape(", ".join(f"{a} {v}" for a, v in t.held)))
        console.print(table)
    if flaky:
        table = Table(title="flaky cells (no transition uses them)")
        table.add_column("scenario", overflow="fold")
        table.add_column("repeats", justify="right")
        table.add_column("cell", overflow="fold")
        table.add_column("signature", overflow="fold")
        for f in flaky:
            cell = ", ".join(f"{a} {v}" for a, v in f.versions)
            table.add_row(escape(f.scenario), f"{f.failed}/{f.repeats}", escape(cell), escape(f.signature))
        console.print(table)
