"""The summary's grid: scenarios (or test files) as rows, cells as short labels with a legend naming
only the versions that vary, fitted to the console's width; and the wide grid (`--wide`)."""

from __future__ import annotations

import string
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Span, Text

from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet
from harness.analysis.rows import GRID_ROWS, axis_sort, group_of, installed
from harness.analysis.status import SEVERITY, Status, status_of
from harness.analysis.versions import version_key
from harness.render.fit import emit, say
from harness.render.tally import CELL_ID, SCENARIO, Tally, cell_statuses, failure_families, grouped, tally

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
    "xfail": "dim",
    "xpass": "cyan",
    "mixed": "yellow",
}


#: One character per status in the compact grid, as pytest prints them (the legend says what they mean).
MARK = {
    "pass": ".",
    "fail": "F",
    "error": "E",
    "crash": "C",
    "timeout": "T",
    "oom": "M",
    "inconclusive": "?",
    "unresolvable": "U",
    "install_failed": "I",
    "not_applicable": "-",
    "xfail": "x",
    "xpass": "X",
    "mixed": "~",
}


SHORT = {"transformers": "tf", "accelerate": "acc", "bitsandbytes": "bnb"}


#: The grid's scenario names: at most this wide, and no narrower than MIN_NAME before cells move to another block.
NAME_WIDTH, MIN_NAME = 40, 16


def grid_blocks(name_width: int, mark_widths: Sequence[int], width: int) -> tuple[int, list[range]]:
    """(the scenario column's width, the cell columns of each block) for a grid within `width`.

    A column takes its width plus a space each side (none at the table's edges). Where the cells
    do not fit beside the names, the names are shortened (to MIN_NAME at least); where even then
    they do not, the cells go in blocks, one table each, under names up to half the width.
    """
    marks = sum(w + 2 for w in mark_widths)
    if name_width + marks <= width:
        return name_width, [range(len(mark_widths))]
    if width - marks >= MIN_NAME:
        return width - marks, [range(len(mark_widths))]
    name_width = min(name_width, max(MIN_NAME, width // 2))
    blocks: list[range] = []
    first = 0
    while first < len(mark_widths):
        last, used = first, name_width
        while last < len(mark_widths) and (last == first or used + mark_widths[last] + 2 <= width):
            used += mark_widths[last] + 2
            last += 1
        blocks.append(range(first, last))
        first = last
    return name_width, blocks


# -- the grid --------------------------------------------------------------------------------------
def _labels(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str], str]:
    """(cell id -> short label, label -> the versions that vary, the versions every cell shares)."""
    versions: dict[str, dict[str, str]] = {}
    for cell, group in groupby(rows, CELL_ID):  # each cell's first row, the rest skipped in C: rows come by cell
        if str(cell) not in versions:
            versions[str(cell)] = installed(next(group))
    axes = axis_sort({a for v in versions.values() for a in v})
    varying = [a for a in axes if len({v.get(a) for v in versions.values()}) > 1]
    shared = ", ".join(f"{a} {next(iter({v.get(a) for v in versions.values()}))}" for a in axes if a not in varying)
    ordered = sorted(versions, key=lambda c: tuple(version_key(versions[c].get(a)) for a in varying))
    names = [*string.ascii_uppercase, *string.ascii_lowercase]
    label = {cell: (names[i] if i < len(names) else str(i)) for i, cell in enumerate(ordered)}
    legend = {label[c]: " ".join(f"{SHORT.get(a, a)} {versions[c].get(a, '-')}" for a in varying) for c in ordered}
    return label, legend, shared


def render_grid(rows: Sequence[Mapping[str, Any]], console: Console, counted: Tally | None = None, quiet: Quiet = NO_QUIET) -> None:
    """Scenarios × cells in one or two characters each, with a legend; scenarios that never ran here on one line.
    quiet: the quiet tests the rows hold as one stand-in (`analysis.quiet`): each a pass in every cell."""
    counted = counted or tally(rows)
    words = counted.words
    label, legend, shared = _labels(rows)
    scenarios = sorted(set(map(SCENARIO, rows)) - {STAND_IN})
    # a cell's word is not_applicable only when every outcome there was (`status.fold`)
    applicable = counted.applicable
    ran = [s for s in scenarios if s in applicable]
    ran_here = set(ran)  # sets, not lists: 20,000 tests made these checks quadratic
    idle = [s for s in scenarios if s not in ran_here]
    if quiet:
        ran = sorted([*ran, *quiet.tests])
    if len(ran) > GRID_ROWS:  # a test suite: one row per file (or class), its worst status in each cell
        words, ran = _by_group(words, ran, set(quiet.tests))
    elif quiet:  # a few quiet scenarios: each its own row of passes
        words = {cell: {**said, **dict.fromkeys(quiet.tests, Status.PASS.value)} for cell, said in words.items()}
    say(console, f"\n[bold]Grid[/] ({'all cells: ' + escape(shared) if shared else 'cells below'})")
    columns = sorted(label, key=lambda c: (len(label[c]), label[c]))
    names = min(NAME_WIDTH, max(cell_len(n) for n in ["scenario", *ran]))
    name_width, blocks = grid_blocks(names, [cell_len(label[c]) for c in columns], console.width)
    for block in blocks:
        marks = [[status_of(words[columns[i]].get(scenario, "")) for i in block] for scenario in ran]
        emit(console, grid_block([label[columns[i]] for i in block], ran, marks, min(name_width, names)))
    legend_marks = "  ".join(f"{m} {s}" for s, m in MARK.items())
    say(console, f"[dim]{escape(legend_marks)}[/]")
    for name, text in legend.items():
        say(console, f"  {name}  {escape(text)}")
    if idle:
        idle_here = set(idle)
        reasons = Counter(str(r.get("message") or "") for r in rows if r["status"] == Status.NOT_APPLICABLE and r["scenario"] in idle_here)
        why = reasons.most_common(1)[0][0] if reasons else ""
        why = f" ({why.split(';')[0]})" if why else ""
        by_group: dict[str, list[str]] = defaultdict(list)
        for name in idle:
            by_group[group_of(name)].append(name)
        named = ", ".join(grouped(names) for _, names in sorted(by_group.items()))
        say(console, f"not applicable on this machine{escape(why)}: {escape(named)}")


def grid_block(labels: Sequence[str], names: Sequence[str], keys: Sequence[Sequence[str]], width: int) -> list[Text]:
    """One block of the grid as lines: a header, then a name and a mark per cell for each row.

    Laid out as a borderless rich Table with one space each side of a column (none at the
    edges), names cut with an ellipsis, marks centred: the same text, without the table's
    layout per cell, which took 2 s for a suite's 950 groups x 20 cells. Each line is its
    plain text and a span per mark, made at once (appending 64,000 marks one by one to rich
    texts took a second at 3,000 groups).
    keys: per row, each cell's status key (`status.status_of`).
    """
    widths = [max(cell_len(text), 1) for text in labels]
    header = Text("scenario")
    header.truncate(width, overflow="ellipsis", pad=True)
    lines = [_header_line(header, labels, widths)]
    for name, row in zip(names, keys):
        lines.append(_grid_line(name, [(MARK.get(key, " "), STYLE.get(key, "white")) for key in row], widths, width))
    return lines


def _header_line(name: Text, labels: Sequence[str], widths: Sequence[int]) -> Text:
    line = Text(style="bold")
    line.append_text(name)
    for label, cell_width in zip(labels, widths):
        left = (cell_width - cell_len(label)) // 2
        line.append("  " + " " * left + label + " " * (cell_width - cell_len(label) - left))
    return line


def _grid_line(name: str, marks: Sequence[tuple[str, str]], widths: Sequence[int], width: int) -> Text:
    """A row: the name cut or padded to `width`, then each (mark, style) centred in its column."""
    cut = Text(name)
    cut.truncate(width, overflow="ellipsis", pad=True)
    parts, spans, at = [cut.plain], [], len(cut.plain)
    for (mark, style), cell_width in zip(marks, widths):
        left = (cell_width - len(mark)) // 2
        start = at + 2 + left
        parts.append("  " + " " * left + mark + " " * (cell_width - len(mark) - left))
        spans.append(Span(start, start + len(mark), style))
        at += 2 + cell_width
    return Text("".join(parts), spans=spans)


def _by_group(
    words: dict[str, dict[str, str]], ran: list[str], quiet: set[str] | frozenset[str] = frozenset()
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Quiet each cell's tests into their groups: the worst status among them (`status.SEVERITY`),
    the worst of those that gave evidence where any did. `quiet`: tests of `ran` that passed in
    every cell, with no word of their own in `words` (`analysis.quiet`)."""
    members: dict[str, list[str]] = defaultdict(list)
    for name in ran:
        members[group_of(name)].append(name)
    row_of = {name: f"{group} ({len(names)})" for group, names in members.items() for name in names}
    ranks: dict[str, tuple[bool, int, str]] = {}  # a handful of distinct words among 400,000
    folded: dict[str, dict[str, str]] = {}
    passing = {row_of[name] for name in quiet}  # the groups with a quiet test: a pass in every cell
    for cell, statuses in words.items():  # one pass over each cell's words, not one per group
        worst: dict[str, tuple[bool, int, str]] = dict.fromkeys(passing, _rank(Status.PASS))
        for name, word in statuses.items():
            row = row_of.get(name)
            if row is None:  # a test that ran nowhere here: not in the grid
                continue
            rank = ranks.get(word) or ranks.setdefault(word, _rank(status_of(word)))
            if row not in worst or rank < worst[row]:
                worst[row] = rank
        folded[cell] = {row: rank[2] for row, rank in worst.items()}
    return folded, sorted(f"{group} ({len(names)})" for group, names in members.items())


def _rank(status: str) -> tuple[bool, int, str]:
    """Sorts a group's worst status first: any that gave evidence before those that did not, then by severity."""
    return (status in (Status.NOT_APPLICABLE, ""), _severity(status), status)


def _severity(status: str) -> int:
    return _SEVERITY_RANK.get(status, len(_SEVERITY_RANK))


_SEVERITY_RANK = {s.value: k for k, s in enumerate(SEVERITY)}


def render_wide(rows: Sequence[Mapping[str, Any]], console: Console) -> None:
    """The full grid: cells × scenarios, one word per outcome, then the failure signatures."""
    statuses = cell_statuses(rows)
    scenarios = sorted({r["scenario"] for r in rows})
    table = Table(title="outcomes", show_lines=False)
    table.add_column("cell", overflow="fold")
    for scenario in scenarios:
        table.add_column(scenario, overflow="fold")
    for cell in sorted(statuses):
        marks = [f"[{STYLE.get(status_of(w), 'white')}]{w}[/]" for w in (statuses[cell].get(s, "-") for s in scenarios)]
        table.add_row(escape(cell), *marks)
    console.print(table)
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
