"""The summary as terminal text (`harness summary`, and the text a sweep ends with): the answers first, then a grid that fits 100 columns.

1. **Answers**: per failure, the releases that introduced or fixed it (exact, or a range that
   names what was not built), on how many lines of the matrix, and on which machine; failures
   that no tested version changes; machine differences; flaky cells.
2. **Known-good set per machine**: per machine class (`cpu`, `1x NVIDIA H200`), the newest version
   set on which every scenario that passes somewhere on that class passes
   (`analysis.knowngood.known_good_sets`, as `harness watch` and `harness pin` choose), or the scenarios
   that keep any set from passing; a scenario that cannot run on a class is not counted there.
3. **Grid**: scenarios as rows, cells as short labels (A, B, …) with a legend that names only
   the versions that vary; scenarios that could not run on this machine folded into one line.

`--wide` prints the old grid (cells × scenarios, one word per outcome) and the signatures.
Every word comes from `harness.analysis` (`status.fold`, `Transition.headline`), so the summary,
`harness attribute`, reports and the dashboard say the same thing.

Every line fits the console's width (rich takes it from COLUMNS, or the terminal): a longer one
wraps at spaces, its continuation lines indented under its start (`hang`), and a grid wider than
the console shortens its scenario names, then splits its cells into blocks (`grid_blocks`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.analysis.answer import Answer
from harness.analysis.attribution import Attribution, Flaky, MachineDifference, Transition
from harness.analysis.grouping import AnswerGroup, answer_groups
from harness.analysis.knowngood import KnownGoodSet, known_good_sets
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet, weight
from harness.analysis.rows import GRID_ROWS, axis_sort, group_of, machine_of
from harness.analysis.shortsignature import without_location
from harness.analysis.status import Status
from harness.analysis.versions import version_key
from harness.render.fit import emit_plain, hang_plain, say, say_all
from harness.render.grid import STYLE, render_grid, render_wide
from harness.render.tally import CELL_ID, SCENARIO, STATUS, Tally, grouped, tally

WIDTH = 100
#: More scenarios than this in a grid (a test suite's node ids): one row per test file or class.


def render(
    rows: Sequence[Mapping[str, Any]],
    console: Console,
    title: str = "",
    attribution: Attribution | None = None,
    *,
    wide: bool = False,
    known_good: Sequence[KnownGoodSet] | None = None,
    machines: Sequence[str] | None = None,
    quiet: Quiet = NO_QUIET,
) -> None:
    """The summary of `rows` (a run's, probes of refinement included; the grid shows the matrix's cells),
    with their answers: `attribution` and `known_good` as `answering.answer` computed them (see `render_answer`).
    quiet: the quiet tests the rows hold as one stand-in (`analysis.quiet`), counted as every one of them."""
    # The passes over every row below are C loops (`map` of an itemgetter) where they can be:
    # a suite's summary reads 400,000 rows a dozen times.
    probed = {cell for cell, group in groupby(rows, CELL_ID) if next(group).get("origin") == "refine"}  # a cell's column: one row each
    refine = [r for r in rows if r["cell_id"] in probed] if probed else []
    grid_rows = ([r for r in rows if r["cell_id"] not in probed] if refine else None) or rows
    probes = len(set(map(CELL_ID, refine)))
    if machines is None:
        machines = sorted({m.label() for m in {machine_of(r) for r in rows}} - {""})  # labels once per machine
    cells = len(set(map(CELL_ID, grid_rows)))
    named = set(map(SCENARIO, grid_rows))
    scenarios = len(named) + (len(quiet) - 1 if STAND_IN in named else 0)
    head = f"{title}: " if title else ""
    where = f" on {'; '.join(machines)}" if machines else ""
    extra = f" (+{probes} refinement probe cell(s))" if probes else ""
    say(console, f"[bold]{escape(head)}{cells} cell(s) × {scenarios} scenario(s){escape(where)}{extra}[/]")
    totals = Counter(map(STATUS, rows))
    if quiet:  # a stand-in row is a pass of every quiet test
        totals[Status.PASS.value] += sum(weight(r) - 1 for r in rows if r["scenario"] == STAND_IN)
    say(console, "  ".join(f"[{STYLE.get(k, 'white')}]{k}: {v}[/]" for k, v in sorted(totals.items())))
    if wide:
        render_wide(grid_rows, console)
        if attribution is not None:
            render_transitions(attribution.transitions, console, attribution.flaky, attribution.machines)
        return
    counted = tally(rows)
    if attribution is not None:
        render_answers(rows, attribution, console, counted)
    render_known_good(rows, console, known_good)
    render_grid(grid_rows, console, counted if grid_rows is rows else None, quiet)


def render_answer(found: Answer, console: Console, title: str = "", *, wide: bool = False) -> None:
    """The summary of an answered read (`answering.answer`): its rows, transitions and known-good sets."""
    machines = sorted({facts.machine.label() for facts in found.cells} - {""})  # the rows' cells are read already
    render(found.rows, console, title, found.attribution, wide=wide, known_good=found.known_good, machines=machines, quiet=found.quiet)


def _blamed(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return tally(rows).blamed


def context(held: Sequence[tuple[tuple[str, str], ...]]) -> str:
    """What the lines of one answer hold: each axis's value, or its values where the lines differ.

    "torch 2.13.0+cpu, transformers 5.6.2|5.23.0, bitsandbytes 0.49.2": an answer names every
    other axis, so nobody reads it as true for versions that were not held.
    """
    values: dict[str, set[str]] = defaultdict(set)
    for line in held:
        for axis, value in line:
            values[axis].add(value)
    return ", ".join(f"{axis} {'|'.join(sorted(values[axis], key=version_key))}" for axis in axis_sort(values))


def render_answers(rows: Sequence[Mapping[str, Any]], attribution: Attribution, console: Console, counted: Tally | None = None) -> None:
    """Per failure: what changed it, in the attribution's words; then what no tested version changes."""
    counted = counted or tally(rows)
    blamed = counted.blamed
    out: list[str] = []  # printed at once: a suite's answers are thousands of lines
    # Tests of one file (or class) with one signature and the same answers are one answer:
    # a suite of thousands of tests prints a line per failure family, never one per test.
    failures = answer_groups(attribution.transitions)
    out.append("\n[bold]Answers[/]")
    if not failures:
        out.append("  no failure changes between two tested versions of an axis (other axes and machine held)")
    for (_, signature), groups in failures:
        who = f" ({blamed[signature]})" if blamed.get(signature) else ""
        names = grouped(t.scenario for g in groups for t in (*g.members, *g.inferred))
        out.append(f"  [bold]{escape(names)}[/]: {escape(without_location(signature))}{who}")
        for g in groups:
            colour = "green" if g.kind == "fixed" else "red"
            out.append(f"    [{colour}]{escape(g.headline)}[/]")
            where = (f"on {g.machine}, " if g.machine else "") + f"{g.lines} line(s)" + (f", {g.tests} tests" if g.tests > 1 else "")
            out.append(f"      {escape(where)}: {escape(context([m.held for m in g.members]))}")
            if g.inferred:
                out.append(f"      {escape(inferred_text(g))}: {escape(context([m.held for m in g.inferred]))}")
    steady: dict[tuple[str, str], list[str]] = defaultdict(list)
    for scenario, signature in never_changes(counted, attribution):
        steady[(group_of(scenario), signature)].append(scenario)
    if steady:
        out.append("  [bold]no tested version changes[/] (fails in every cell where it runs):")
        for (_, signature), failing in sorted(steady.items()):
            who = f" ({blamed[signature]})" if blamed.get(signature) else ""
            out.append(f"    {escape(grouped(failing))}: {escape(without_location(signature))}{who}")
    for m in attribution.machines:
        out.append(f"  [bold]{escape(m.scenario)}[/]: {escape(m.headline())}")
    for f in attribution.flaky:
        out.append(f"  [yellow]{escape(f.scenario)}[/]: {escape(f.describe())}")
    inconclusive = sorted(counted.inconclusive)
    if inconclusive:
        out.append(f"  inconclusive (never reached the state it checks) in some cell: {escape(', '.join(inconclusive))}")
    say_all(console, out)


def inferred_text(group: AnswerGroup) -> str:
    """What the lines inferred from an exact answer are, and that nothing was built there."""
    return f"inferred on {group.inferred_lines} more line(s), not built there (their ends agree with it)"


def never_changes(counted: Tally, attribution: Attribution) -> list[tuple[str, str]]:
    """(scenario, signature) failing in every cell where the scenario gave evidence, and never changed."""
    moved = {(t.scenario, t.signature) for t in attribution.transitions}
    found = []
    for scenario, signatures in sorted(counted.failing.items()):
        if len(signatures) == 1 and scenario not in counted.clean:
            signature = next(iter(signatures))
            if (scenario, signature) not in moved:
                found.append((scenario, signature))
    return found


# -- the known-good set -----------------------------------------------------------------------------
def render_known_good(rows: Sequence[Mapping[str, Any]], console: Console, known_good: Sequence[KnownGoodSet] | None = None) -> None:
    """Per machine class, the newest set on which every scenario that passes there passes; else what keeps one from existing."""
    sets = [k for k in (known_good_sets(rows) if known_good is None else known_good) if k.passing or k.failing]
    if not sets:
        return
    say(console, "\n[bold]Known-good set per machine[/]")
    for known in sets:
        _render_one_known_good(known, console)


def _render_one_known_good(known: KnownGoodSet, console: Console) -> None:
    machine = known.machine or "unknown machine"
    idle = f" ({len(known.not_applicable)} not applicable there)" if known.not_applicable else ""
    result = known.result
    if not result.found:
        why = "no scenario passes in any cell" if not known.passing else "no cell passes the scenarios that pass somewhere"
        say(console, f"  [bold]{escape(machine)}[/]: {why}{escape(idle)}")
        return
    versions = ", ".join(f"{a} {v}" for a, v in result.versions)
    say(console, f"  [bold]{escape(machine)}[/]")
    say(console, f"    {escape(versions)}")
    own = [e for e in result.evidence if e.passed]  # the tests the chosen cell's suite collected (each release has its own)
    if known.kept and not known.dropped and all("::" in s for s in known.kept):
        # A suite's tests (a package's own, at each release's tag): the newest set that passes its own suite.
        others = len(known.passing) - len(own)
        elsewhere = f" ({others:,} more pass elsewhere on it, tests its suite does not collect)" if others else ""
        # "all" of those that pass somewhere: a test that fails in every cell is no part of any set
        never = f" ({len(known.failing):,} more fail in every cell: see the answers)" if known.failing else ""
        say(console, f"    passes all {len(own):,} of its own tests{elsewhere}{never}{escape(idle)}, in cell")
    else:
        say(
            console,
            f"    passes {len(known.kept)} of the {len(known.passing)} scenario(s) that pass somewhere on it{escape(idle)}, in cell",
        )
    say(console, f"    {escape(result.cell_ids[0])}")
    if known.dropped:
        by_group: dict[str, list[str]] = defaultdict(list)
        for name in known.dropped:
            by_group[group_of(name)].append(name)
        named = ", ".join(grouped(names) for _, names in sorted(by_group.items()))
        say(console, f"    no tested set also passes: {escape(named)}")


def render_transitions(
    transitions: Sequence[Transition], console: Console, flaky: Sequence[Flaky] = (), machines: Sequence[MachineDifference] = ()
) -> None:
    """Per scenario and signature, one row per line of the matrix: the answer, what was held, the machine."""
    groups: dict[tuple[str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        groups[(t.scenario, t.signature)].append(t)
    if len(groups) > GRID_ROWS:
        # a suite's thousands (78,000 at 100,000 tests): the summary's answers, per test file and
        # failure, with how many lines and tests give each; every transition is in the file's
        # table and in --json (a line each took longer to print than to attribute)
        render_answers([], Attribution(tuple(transitions), tuple(flaky), tuple(machines)), console, Tally({}, defaultdict(set), set(), {}))
        say(console, f"{len(transitions)} transition(s) of {len(groups)} test(s) and failure(s), grouped: each one with --json")
        return
    if groups:
        say(console, "[bold]transitions[/]")
    for (scenario, signature), items in groups.items():
        say(console, f"[bold]{escape(scenario)}[/]: {escape(signature)}")
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
        table.add_column("failed in", justify="right")  # repeats of a run, or runs (a matrix with repeats = 1 flips across them)
        table.add_column("cell", overflow="fold")
        table.add_column("signature", overflow="fold")
        for f in flaky:
            cell = ", ".join(f"{a} {v}" for a, v in f.versions)
            table.add_row(escape(f.scenario), f.count(), escape(cell), escape(f.signature))
        console.print(table)


def print_history(db: Path, console: Console) -> None:
    """The summary's first lines (`changes.history_lines`) of the file at `db`, fitted as its
    other lines are: `harness summary` and a sweep's closing lines lead with them."""
    if not db.is_file():
        return
    from harness.storage.opening import open_results
    from harness.workflows.changes import history_lines

    with open_results(db, read_only=True) as store:
        found = history_lines(store)
    emit_plain(console, [piece for line in found for piece in hang_plain(line, console.width)])
