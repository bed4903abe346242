"""The text a sweep ends with: cells × scenarios, one word per outcome, the failures, the answers.

Everything here is printing: the words come from `harness.analysis` (`status.fold` for
repeats, `Transition.headline` for answers), so the summary, `harness attribute`, reports and
the dashboard say the same thing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.attribution import Attribution, Flaky, MachineDifference, Transition
from harness.analysis.status import FAILURES, fold_statuses, status_of

STYLE = {
    "pass": "green",
    "fail": "red",
    "error": "red",
    "crash": "magenta",
    "timeout": "yellow",
    "oom": "magenta",
    "inconclusive": "blue",
    "unresolvable": "dim",
    "install_failed": "dim",
    "not_applicable": "dim",
    "mixed": "yellow",
}


def cell_statuses(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """{cell: {scenario: "pass" | "error 1/3 mixed" | ...}}: repeats folded into one word (`status.fold`)."""
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        grouped[(row["cell_id"], row["scenario"])].append(row["status"])
    table: dict[str, dict[str, str]] = defaultdict(dict)
    for (cell, scenario), statuses in grouped.items():
        table[cell][scenario] = fold_statuses(statuses)
    return dict(table)


def failure_families(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str, int, list[str]]]:
    """(signature, blamed library, outcomes, scenarios) for every failing signature, most frequent first."""
    hits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] in FAILURES and row.get("signature"):
            hits[row["signature"]].append(row)
    families = [(sig, rs[0].get("blamed_library") or "", len(rs), sorted({r["scenario"] for r in rs})) for sig, rs in hits.items()]
    return sorted(families, key=lambda f: (-f[2], f[0]))


def render(rows: list[dict[str, Any]], console: Console, title: str = "", attribution: Attribution | None = None) -> None:
    """The grid, the totals, the failure signatures and, when given, the attribution's answers."""
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
            cells.append(f"[{STYLE.get(status_of(word), 'white')}]{word}[/]")
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
    if attribution is not None:
        render_transitions(attribution.transitions, console, attribution.flaky, attribution.machines)


def render_transitions(
    transitions: Sequence[Transition], console: Console, flaky: Sequence[Flaky] = (), machines: Sequence[MachineDifference] = ()
) -> None:
    """Per scenario and signature, one row per line of the matrix: the answer, what was held, the machine."""
    groups: dict[tuple[str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        groups[(t.scenario, t.signature)].append(t)
    if groups:
        console.print("[bold]transitions[/]")
    for (scenario, signature), items in groups.items():
        console.print(f"[bold]{escape(scenario)}[/]: {escape(signature)}", overflow="fold")
        table = Table()
        table.add_column("answer", overflow="fold")
        table.add_column("with (held fixed)", overflow="fold")
        table.add_column("on", overflow="fold")
        for t in items:
            colour = "red" if t.kind == "introduced" else "green"
            table.add_row(f"[{colour}]{escape(t.headline())}[/]", escape(", ".join(f"{a} {v}" for a, v in t.held)), escape(t.machine))
        console.print(table)
    if machines:
        table = Table(title="differences between machines (no release is blamed)")
        table.add_column("scenario", overflow="fold")
        table.add_column("finding", overflow="fold")
        table.add_column("signature", overflow="fold")
        for m in machines:
            table.add_row(escape(m.scenario), escape(m.describe()), escape(m.signature))
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
