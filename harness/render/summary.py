"""The summary as terminal text (`harness summary`, and the text a sweep ends with): the answers first, then a grid that fits 100 columns.

1. **Answers**: per failure, the releases that introduced or fixed it (exact, or a range that
   names what was not built), on how many lines of the matrix, and on which machine; failures
   that no tested version changes; machine differences; flaky cells.
2. **Known-good set per machine**: per machine class (`cpu`, `1x NVIDIA H200`), the newest version
   set on which every scenario that passes somewhere on that class passes
   (`analysis.pin.known_good_sets`, as `harness watch` and `harness pin` choose), or the scenarios
   that keep any set from passing; a scenario that cannot run on a class is not counted there.
3. **Grid**: scenarios as rows, cells as short labels (A, B, …) with a legend that names only
   the versions that vary; scenarios that could not run on this machine folded into one line.

`--wide` prints the old grid (cells × scenarios, one word per outcome) and the signatures.
Every word comes from `harness.analysis` (`status.fold`, `Transition.headline`), so the summary,
`harness attribute`, reports and the dashboard say the same thing.

Every line fits the console's width (rich takes it from COLUMNS, or the terminal): a longer one
wraps at spaces, its continuation lines indented under its start (`hang`), and a grid wider than
the console shortens its scenario names, then splits its cells into blocks (`_grid_blocks`).
"""

from __future__ import annotations

import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress, groupby
from operator import itemgetter
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from harness.analysis.answer import Answer
from harness.analysis.attribution import Attribution, Flaky, MachineDifference, Transition
from harness.analysis.grouping import AnswerGroup, answer_groups
from harness.analysis.pin import KnownGoodSet, known_good_sets
from harness.analysis.rows import axis_sort, group_of, installed, machine_of, signature_of
from harness.analysis.status import FAILURES, SEVERITY, Status, fold_statuses, status_of
from harness.analysis.versions import version_key

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
WIDTH = 100
#: More scenarios than this in a grid (a test suite's node ids): one row per test file or class.
GRID_ROWS = 60
#: A wrapped line's continuation lines start this much deeper than the line itself.
HANG = 4
#: The grid's scenario names: at most this wide, and no narrower than MIN_NAME before cells move to another block.
NAME_WIDTH, MIN_NAME = 40, 16


_CELL_ID, _SCENARIO, _STATUS = itemgetter("cell_id"), itemgetter("scenario"), itemgetter("status")
#: The statuses `tally` reads a row for: failures and inconclusive outcomes, a few of a suite's rows.
_SAYS_LITTLE = frozenset({*FAILURES, Status.INCONCLUSIVE})


# -- fitting the width -------------------------------------------------------------------------
def hang(text: Text, width: int, by: int = HANG) -> list[Text]:
    """`text`'s lines, each within `width` cells: a longer one broken at its last space that fits
    (mid-word where none does), its continuation lines indented `by` more than its own start
    (at most half the width)."""
    if "\n" not in text.plain:  # most lines: no copy of the text to split
        return _hang_line(text, width, by)
    lines: list[Text] = []
    for line in text.split("\n", allow_blank=True):
        lines += _hang_line(line, width, by)
    return lines


def hang_plain(text: str, width: int, by: int = HANG) -> list[str]:
    """`hang` of unstyled text: the same lines, without a rich Text made for each."""
    out: list[str] = []
    for line in text.split("\n"):
        if cell_len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        pad = min(lead + by, width // 2)
        for k, (start, cut) in enumerate(_hang_spans(line, width, lead, width - pad)):
            piece = line[start:cut].rstrip()
            out.append(" " * pad + piece if k else piece)
    return out


def _hang_line(line: Text, width: int, by: int) -> list[Text]:
    plain = line.plain
    if cell_len(plain) <= width:
        return [line]
    lead = len(plain) - len(plain.lstrip(" "))
    pad = min(lead + by, width // 2)
    spans = _hang_spans(plain, width, lead, width - pad)
    # one `divide` at every cut, not a slice per piece: each slice of a Text re-reads all its spans
    pieces = line.divide(offset for span in spans for offset in span)
    out: list[Text] = []
    for k in range(len(spans)):
        piece = pieces[2 * k + 1]
        piece.rstrip()
        if out:
            piece.pad_left(pad)
        out.append(piece)
    return out


def _hang_spans(plain: str, width: int, lead: int, room_after: int) -> list[tuple[int, int]]:
    """(start, end) of each piece of `plain` that `_hang_line` prints: the first within `width`,
    the others within `room_after`; each broken at the last space that fits (mid-word where none
    does), the spaces at a break dropped."""
    narrow = plain.isascii() or all(cell_len(c) == 1 for c in set(plain))  # one cell per character: no width to add up
    spans: list[tuple[int, int]] = []
    start, floor, room = 0, lead, width  # the first line keeps its own indent: no break inside it
    while start < len(plain):
        end = min(start + room, len(plain)) if narrow else _fits(plain, start, room)
        if end == len(plain) or plain[end] == " ":
            cut = end
        else:
            space = plain.rfind(" ", floor, end)
            cut = space if space > floor else max(end, start + 1)  # one word longer than the room: folded
        spans.append((start, cut))
        start = cut
        while start < len(plain) and plain[start] == " ":
            start += 1
        floor, room = start, room_after
    return spans


def _fits(plain: str, start: int, room: int) -> int:
    """Where a piece of `plain` from `start` ends that takes at most `room` cells."""
    end, used = start, 0
    while end < len(plain) and used + cell_len(plain[end]) <= room:
        used += cell_len(plain[end])
        end += 1
    return end


def _say_all(console: Console, markups: Sequence[str]) -> None:
    """`_say` of each, in one print: the same text."""
    width = console.width  # asked once: rich measures the terminal each time
    fitted = [part for markup in markups for part in hang(_text(console, markup), width)]
    if fitted:
        emit(console, fitted)


def _say(console: Console, markup: str) -> None:
    """Print `markup` as `console.print` would, each line fitted to the console's width (`hang`)."""
    emit(console, hang(_text(console, markup), console.width))


def _text(console: Console, markup: str) -> Text:
    """`markup` as `console.print` would read it; highlighted only where colours are shown."""
    return console.render_str(markup, highlight=None if console.color_system else False)


def emit(console: Console, lines: Sequence[Text]) -> None:
    """Print lines already fitted to the width, as they are (`emit_plain` where no colour shows)."""
    if console.color_system is None:
        emit_plain(console, [line.plain for line in lines])
        return
    console.print(Text("\n").join(lines), no_wrap=True, overflow="ignore")


def emit_plain(console: Console, lines: Sequence[str]) -> None:
    """Print unstyled lines already fitted to the width. Without colours (a pipe, a file,
    `NO_COLOR`) rich prints each line's plain text: here handed to it as one segment per line,
    as rich's layout of a suite's thousands of styled pieces took seconds (and one text of them
    all, minutes: rich splits it line by line, copying the rest each time)."""
    fits = all(text.isascii() and len(text) <= console.width for text in lines)  # else rich crops, as before
    console.print(Segments([Segment(text + "\n") for text in lines]), end="", crop=not fits)


def _grid_blocks(name_width: int, mark_widths: Sequence[int], width: int) -> tuple[int, list[range]]:
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


def _grouped(scenarios: Iterable[str]) -> str:
    """One answer for several tests of one group: "34 tests in tests/test_x.py"; a scenario alone by name."""
    names = sorted(set(scenarios))
    groups = {group_of(n) for n in names}
    if len(names) == 1:
        return names[0]
    where = next(iter(groups)) if len(groups) == 1 else f"{len(groups)} groups"
    return f"{len(names)} tests in {where}"


def cell_statuses(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """{cell: {scenario: "pass" | "error 1/3 mixed" | ...}}: repeats folded into one word (`status.fold`)."""
    table: dict[str, dict[str, str]] = defaultdict(dict)
    repeats: dict[tuple[str, str], list[str]] = {}
    for row in rows:  # one pass and no key built per outcome: a suite has 400,000 of them
        cell, scenario = table[row["cell_id"]], row["scenario"]
        if scenario in cell:
            repeats.setdefault((row["cell_id"], scenario), [cell[scenario]]).append(str(row["status"]))
        cell[scenario] = str(row["status"])
    for (cell_id, scenario), statuses in repeats.items():
        table[cell_id][scenario] = fold_statuses(statuses)
    return dict(table)


def failure_families(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, int, list[str]]]:
    """(signature, blamed library, outcomes, scenarios) for every failing signature, most frequent first."""
    hits: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["status"] in FAILURES and row.get("signature"):
            hits[row["signature"]].append(row)
    families = [(sig, rs[0].get("blamed_library") or "", len(rs), sorted({r["scenario"] for r in rs})) for sig, rs in hits.items()]
    return sorted(families, key=lambda f: (-f[2], f[0]))


def render(
    rows: Sequence[Mapping[str, Any]],
    console: Console,
    title: str = "",
    attribution: Attribution | None = None,
    *,
    wide: bool = False,
    known_good: Sequence[KnownGoodSet] | None = None,
    machines: Sequence[str] | None = None,
) -> None:
    """The summary of `rows` (a run's, probes of refinement included; the grid shows the matrix's cells),
    with their answers: `attribution` and `known_good` as `answering.answer` computed them (see `render_answer`)."""
    # The passes over every row below are C loops (`map` of an itemgetter) where they can be:
    # a suite's summary reads 400,000 rows a dozen times.
    probed = {cell for cell, group in groupby(rows, _CELL_ID) if next(group).get("origin") == "refine"}  # a cell's column: one row each
    refine = [r for r in rows if r["cell_id"] in probed] if probed else []
    grid_rows = ([r for r in rows if r["cell_id"] not in probed] if refine else None) or rows
    probes = len(set(map(_CELL_ID, refine)))
    if machines is None:
        machines = sorted({m.label() for m in {machine_of(r) for r in rows}} - {""})  # labels once per machine
    cells = len(set(map(_CELL_ID, grid_rows)))
    scenarios = len(set(map(_SCENARIO, grid_rows)))
    head = f"{title}: " if title else ""
    where = f" on {'; '.join(machines)}" if machines else ""
    extra = f" (+{probes} refinement probe cell(s))" if probes else ""
    _say(console, f"[bold]{escape(head)}{cells} cell(s) × {scenarios} scenario(s){escape(where)}{extra}[/]")
    totals = Counter(map(_STATUS, rows))
    _say(console, "  ".join(f"[{STYLE.get(k, 'white')}]{k}: {v}[/]" for k, v in sorted(totals.items())))
    if wide:
        render_wide(grid_rows, console)
        if attribution is not None:
            render_transitions(attribution.transitions, console, attribution.flaky, attribution.machines)
        return
    counted = tally(rows)
    if attribution is not None:
        render_answers(rows, attribution, console, counted)
    render_known_good(rows, console, known_good)
    render_grid(grid_rows, console, counted if grid_rows is rows else None)


def render_answer(found: Answer, console: Console, title: str = "", *, wide: bool = False) -> None:
    """The summary of an answered read (`answering.answer`): its rows, transitions and known-good sets."""
    machines = sorted({facts.machine.label() for facts in found.cells} - {""})  # the rows' cells are read already
    render(found.rows, console, title, found.attribution, wide=wide, known_good=found.known_good, machines=machines)


# -- answers -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tally:
    """What the summary's and the published page's words need from the rows, read in one pass
    (`tally`): at 50,000 tests x 20 cells each pass over the rows costs 0.2-0.5 s, and the words
    made six of them. Passes and not-applicable outcomes, most of the rows, are counted per cell
    and scenario from `cell_statuses`' words, which the grid reads anyway."""

    blamed: dict[str, str]  # failure signature -> the library it blames
    failing: dict[str, set[str]]  # scenario -> its failures' signatures
    inconclusive: set[str]  # scenarios inconclusive in some cell
    words: dict[str, dict[str, str]]  # cell -> scenario -> its repeats in one word (`cell_statuses`)

    @cached_property
    def clean(self) -> set[str]:
        """Scenarios with evidence that is no failure: a pass somewhere (a cell's word `pass`, or a mixture with passes)."""
        return {s for cell in self.words.values() for s, word in cell.items() if word == Status.PASS or word.endswith("mixed")}

    @cached_property
    def applicable(self) -> set[str]:
        """Scenarios with an outcome that is not `not_applicable` somewhere (a cell's word is only that when all were)."""
        return {s for cell in self.words.values() for s, word in cell.items() if word not in (Status.NOT_APPLICABLE, "")}


def tally(rows: Iterable[Mapping[str, Any]]) -> Tally:
    rows = list(rows)
    found = Tally({}, defaultdict(set), set(), cell_statuses(rows))
    for row in compress(rows, map(_SAYS_LITTLE.__contains__, map(_STATUS, rows))):  # failures and inconclusives only
        status, scenario = row["status"], row["scenario"]
        if status == Status.INCONCLUSIVE:
            found.inconclusive.add(scenario)
            continue
        signature = signature_of(row)
        found.failing[scenario].add(signature)
        found.blamed[signature] = str(row.get("blamed_library") or "")
    return found


def _blamed(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return tally(rows).blamed


def _short_signature(signature: str, limit: int = 120) -> str:
    text = signature.split(" @ ")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _context(held: Sequence[tuple[tuple[str, str], ...]]) -> str:
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
        names = _grouped(t.scenario for g in groups for t in (*g.members, *g.inferred))
        out.append(f"  [bold]{escape(names)}[/]: {escape(_short_signature(signature))}{who}")
        for g in groups:
            colour = "green" if g.kind == "fixed" else "red"
            out.append(f"    [{colour}]{escape(g.headline)}[/]")
            where = (f"on {g.machine}, " if g.machine else "") + f"{g.lines} line(s)" + (f", {g.tests} tests" if g.tests > 1 else "")
            out.append(f"      {escape(where)}: {escape(_context([m.held for m in g.members]))}")
            if g.inferred:
                out.append(f"      {escape(inferred_text(g))}: {escape(_context([m.held for m in g.inferred]))}")
    steady: dict[tuple[str, str], list[str]] = defaultdict(list)
    for scenario, signature in never_changes(counted, attribution):
        steady[(group_of(scenario), signature)].append(scenario)
    if steady:
        out.append("  [bold]no tested version changes[/] (fails in every cell where it runs):")
        for (_, signature), failing in sorted(steady.items()):
            who = f" ({blamed[signature]})" if blamed.get(signature) else ""
            out.append(f"    {escape(_grouped(failing))}: {escape(_short_signature(signature))}{who}")
    for m in attribution.machines:
        out.append(f"  [bold]{escape(m.scenario)}[/]: {escape(m.headline())}")
    for f in attribution.flaky:
        out.append(f"  [yellow]{escape(f.scenario)}[/]: {escape(f.describe())}")
    inconclusive = sorted(counted.inconclusive)
    if inconclusive:
        out.append(f"  inconclusive (never reached the state it checks) in some cell: {escape(', '.join(inconclusive))}")
    _say_all(console, out)


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
    _say(console, "\n[bold]Known-good set per machine[/]")
    for known in sets:
        _render_one_known_good(known, console)


def _render_one_known_good(known: KnownGoodSet, console: Console) -> None:
    machine = known.machine or "unknown machine"
    idle = f" ({len(known.not_applicable)} not applicable there)" if known.not_applicable else ""
    result = known.result
    if not result.found:
        why = "no scenario passes in any cell" if not known.passing else "no cell passes the scenarios that pass somewhere"
        _say(console, f"  [bold]{escape(machine)}[/]: {why}{escape(idle)}")
        return
    versions = ", ".join(f"{a} {v}" for a, v in result.versions)
    _say(console, f"  [bold]{escape(machine)}[/]")
    _say(console, f"    {escape(versions)}")
    own = [e for e in result.evidence if e.passed]  # the tests the chosen cell's suite collected (each release has its own)
    if known.kept and not known.dropped and all("::" in s for s in known.kept):
        # A suite's tests (a package's own, at each release's tag): the newest set that passes its own suite.
        others = len(known.passing) - len(own)
        elsewhere = f" ({others:,} more pass elsewhere on it, tests its suite does not collect)" if others else ""
        # "all" of those that pass somewhere: a test that fails in every cell is no part of any set
        never = f" ({len(known.failing):,} more fail in every cell: see the answers)" if known.failing else ""
        _say(console, f"    passes all {len(own):,} of its own tests{elsewhere}{never}{escape(idle)}, in cell")
    else:
        _say(
            console,
            f"    passes {len(known.kept)} of the {len(known.passing)} scenario(s) that pass somewhere on it{escape(idle)}, in cell",
        )
    _say(console, f"    {escape(result.cell_ids[0])}")
    if known.dropped:
        by_group: dict[str, list[str]] = defaultdict(list)
        for name in known.dropped:
            by_group[group_of(name)].append(name)
        named = ", ".join(_grouped(names) for _, names in sorted(by_group.items()))
        _say(console, f"    no tested set also passes: {escape(named)}")


# -- the grid --------------------------------------------------------------------------------------
def _labels(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str], str]:
    """(cell id -> short label, label -> the versions that vary, the versions every cell shares)."""
    versions: dict[str, dict[str, str]] = {}
    for cell, group in groupby(rows, _CELL_ID):  # each cell's first row, the rest skipped in C: rows come by cell
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


def render_grid(rows: Sequence[Mapping[str, Any]], console: Console, counted: Tally | None = None) -> None:
    """Scenarios × cells in one or two characters each, with a legend; scenarios that never ran here on one line."""
    counted = counted or tally(rows)
    words = counted.words
    label, legend, shared = _labels(rows)
    scenarios = sorted(set(map(_SCENARIO, rows)))
    # a cell's word is not_applicable only when every outcome there was (`status.fold`)
    applicable = counted.applicable
    ran = [s for s in scenarios if s in applicable]
    ran_here = set(ran)  # sets, not lists: 20,000 tests made these checks quadratic
    idle = [s for s in scenarios if s not in ran_here]
    if len(ran) > GRID_ROWS:  # a test suite: one row per file (or class), its worst status in each cell
        words, ran = _by_group(words, ran)
    _say(console, f"\n[bold]Grid[/] ({'all cells: ' + escape(shared) if shared else 'cells below'})")
    columns = sorted(label, key=lambda c: (len(label[c]), label[c]))
    names = min(NAME_WIDTH, max(cell_len(n) for n in ["scenario", *ran]))
    name_width, blocks = _grid_blocks(names, [cell_len(label[c]) for c in columns], console.width)
    for block in blocks:
        marks = [[status_of(words[columns[i]].get(scenario, "")) for i in block] for scenario in ran]
        emit(console, grid_block([label[columns[i]] for i in block], ran, marks, min(name_width, names)))
    legend_marks = "  ".join(f"{m} {s}" for s, m in MARK.items())
    _say(console, f"[dim]{escape(legend_marks)}[/]")
    for name, text in legend.items():
        _say(console, f"  {name}  {escape(text)}")
    if idle:
        idle_here = set(idle)
        reasons = Counter(str(r.get("message") or "") for r in rows if r["status"] == Status.NOT_APPLICABLE and r["scenario"] in idle_here)
        why = reasons.most_common(1)[0][0] if reasons else ""
        why = f" ({why.split(';')[0]})" if why else ""
        by_group: dict[str, list[str]] = defaultdict(list)
        for name in idle:
            by_group[group_of(name)].append(name)
        named = ", ".join(_grouped(names) for _, names in sorted(by_group.items()))
        _say(console, f"not applicable on this machine{escape(why)}: {escape(named)}")


def grid_block(labels: Sequence[str], names: Sequence[str], keys: Sequence[Sequence[str]], width: int) -> list[Text]:
    """One block of the grid as lines: a header, then a name and a mark per cell for each row.

    Laid out as a borderless rich Table with one space each side of a column (none at the
    edges), names cut with an ellipsis, marks centred: the same text, without the table's
    layout per cell, which took 2 s for a suite's 950 groups x 20 cells.
    keys: per row, each cell's status key (`status.status_of`).
    """
    widths = [max(cell_len(text), 1) for text in labels]
    lines = [_grid_line(Text("scenario"), [Text(text) for text in labels], widths, width, "bold")]
    for name, row in zip(names, keys):
        cells = [Text(MARK.get(key, " "), style=STYLE.get(key, "white")) for key in row]
        lines.append(_grid_line(Text(name), cells, widths, width, ""))
    return lines


def _grid_line(name: Text, cells: Sequence[Text], widths: Sequence[int], width: int, style: str) -> Text:
    name.truncate(width, overflow="ellipsis", pad=True)
    line = Text(style=style)
    line.append_text(name)
    for cell, cell_width in zip(cells, widths):
        left = (cell_width - cell.cell_len) // 2
        line.append("  " + " " * left)
        line.append_text(cell)
        line.append(" " * (cell_width - cell.cell_len - left))
    return line


def _by_group(words: dict[str, dict[str, str]], ran: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Fold each cell's tests into their groups: the worst status among them (`status.SEVERITY`),
    the worst of those that gave evidence where any did."""
    members: dict[str, list[str]] = defaultdict(list)
    for name in ran:
        members[group_of(name)].append(name)
    row_of = {name: f"{group} ({len(names)})" for group, names in members.items() for name in names}
    ranks: dict[str, tuple[bool, int, str]] = {}  # a handful of distinct words among 400,000
    folded: dict[str, dict[str, str]] = {}
    for cell, statuses in words.items():  # one pass over each cell's words, not one per group
        worst: dict[str, tuple[bool, int, str]] = {}
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


def _transition_lines(groups: Mapping[tuple[str, str], Sequence[Transition]], console: Console) -> None:
    """Each (scenario, signature) as a line, then each of its transitions as a line under it.

    A table per group laid out by rich took 8 s for 1,585 groups (a 20,000-test suite); these
    lines fit the width as every line of the summary does (`hang`). Names are printed as they
    are (no emoji codes read in them). Where no colour shows, the lines are made as plain text:
    reading 30,000 lines of markup took a second.
    """
    plain = console.color_system is None
    lines = []
    for (scenario, signature), items in groups.items():
        lines.append(f"{scenario}: {signature}" if plain else f"[bold]{escape(scenario)}[/]: {escape(signature)}")
        for t in items:
            colour = "red" if t.kind == "introduced" else "green"
            headline, conditions = t.headline(), t.conditions()
            lines.append(f"  {headline} — {conditions}" if plain else f"  [{colour}]{escape(headline)}[/] — {escape(conditions)}")
    width = console.width  # asked once: rich measures the terminal each time
    if plain:
        emit_plain(console, [piece for line in lines for piece in hang_plain(line, width)])
        return
    # each line on its own, unhighlighted: one 13,695-line text through the highlighter took 5 s
    emit(console, [part for line in lines for part in hang(console.render_str(line, highlight=False, emoji=False), width)])


def render_transitions(
    transitions: Sequence[Transition], console: Console, flaky: Sequence[Flaky] = (), machines: Sequence[MachineDifference] = ()
) -> None:
    """Per scenario and signature, one row per line of the matrix: the answer, what was held, the machine."""
    groups: dict[tuple[str, str], list[Transition]] = defaultdict(list)
    for t in transitions:
        groups[(t.scenario, t.signature)].append(t)
    if groups:
        _say(console, "[bold]transitions[/]")
    if len(groups) > GRID_ROWS:  # a suite's thousands: a line each, as the summary's answers are
        _transition_lines(groups, console)
        groups = {}
    for (scenario, signature), items in groups.items():
        _say(console, f"[bold]{escape(scenario)}[/]: {escape(signature)}")
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
