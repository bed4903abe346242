"""Support tables: for one library, its releases as columns and the scenarios (or a suite's test groups) as rows. Pure.

The question projects ask in public ("which transformers releases work with peft 0.20?") is a
table in the style of a browser-support table: one row per feature, one column per release.
Here the row is a scenario and the release is one library's, on the **known-good line** of a
machine class: every other axis held at that machine's known-good set (`knowngood.known_good_sets`),
so a column differs from its neighbour in that library alone. A column is a release that ran
on the line (each square says pass, fail, … as `status.fold` folds it) or the releases the
index lists between two that ran, which were not built. An exact answer of attribution on
that line (both releases ran: `Transition.exact`) is marked on the release that changed it.

>>> from harness.analysis.answer import answer_rows
>>> def row(tf, status):
...     return {"scenario": "load", "status": status, "signature": "E: x" if status != "pass" else "", "repeat": 0,
...             "cell_id": f"tf{tf}", "run_id": "r", "gpu": "cpu", "platform": "linux-x86_64", "python": "3.11",
...             "versions": {"torch": "2.13.0", "transformers": tf}}
>>> found = answer_rows([row("5.6.2", "error"), row("5.8.0", "pass")], {"transformers": ["5.6.2", "5.7.0", "5.8.0"]})
>>> table = [t for t in support_tables(found) if t.library == "transformers"][0]
>>> [c.label for c in table.columns], [table.entry("load", i).word for i in range(3)]
(['5.6.2', '5.7.0', '5.8.0'], ['error', '', 'pass'])
>>> found = answer_rows([row("5.6.2", "error"), row("5.7.0", "pass")], {"transformers": ["5.6.2", "5.7.0"]})
>>> [t for t in support_tables(found) if t.library == "transformers"][0].entry("load", 1).mark
'fixed in transformers 5.7.0 (after 5.6.2)'
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.answer import Answer
from harness.analysis.attribution import Transition
from harness.analysis.knowngood import KnownGoodSet
from harness.analysis.quiet import STAND_IN, by_group
from harness.analysis.rows import CellFacts, axis_sort
from harness.analysis.status import Status, fold
from harness.analysis.versions import release, version_key


@dataclass(frozen=True)
class SupportColumn:
    """A release that ran on the line (`cell_id` set), or the releases between two that ran, not built."""

    release: str = ""
    cell_id: str = ""
    not_built: tuple[str, ...] = ()

    @property
    def built(self) -> bool:
        return bool(self.cell_id)

    @property
    def label(self) -> str:
        """The release, or the range not built: `5.7.0`, `5.7.0 … 5.10.4 (12)`."""
        if self.built or len(self.not_built) == 1:
            return self.release or self.not_built[0]
        return f"{self.not_built[0]} … {self.not_built[-1]} ({len(self.not_built)})"


@dataclass(frozen=True)
class Entry:
    """One square: the folded outcome ("" where nothing ran), and the exact answer that changed it at this release."""

    word: str = ""
    mark: str = ""  # `fixed in transformers 5.11.0 (after 5.10.4)`
    kind: str = ""  # introduced | fixed | ""


@dataclass(frozen=True)
class SupportTable:
    """One library's releases × the rows, on one machine class's known-good line."""

    machine: str  # the machine class: `cpu`, `1x NVIDIA H200`
    library: str
    held: tuple[tuple[str, str], ...]  # the line: every other axis at its known-good value
    known_good: str  # the library's release in the known-good set
    columns: tuple[SupportColumn, ...]
    rows: tuple[str, ...]
    entries: Mapping[tuple[str, int], Entry] = field(default_factory=dict)

    def entry(self, row: str, index: int) -> Entry:
        return self.entries.get((row, index), Entry())

    @property
    def built(self) -> int:
        """How many releases ran on the line: with fewer than two, the table answers nothing about this library."""
        return sum(c.built for c in self.columns)

    @property
    def marked(self) -> int:
        return sum(1 for e in self.entries.values() if e.mark)


@dataclass(frozen=True)
class LineCell:
    """A cell of a machine class (its first run's facts, every run's rows): its id, its axes' values, its machine."""

    cell_id: str
    values: Mapping[str, str]
    machine: str  # `Machine.label()`: the machine an answer marked on it names


@dataclass(frozen=True)
class Line:
    """One table's line: a machine class's cells that differ from its known-good cell in `library` alone, in reading order."""

    machine: str
    library: str
    known_good: str  # the library's release in the known-good set
    cells: tuple[LineCell, ...]


def _cells_by_id(cells: Mapping[CellFacts, Sequence[Mapping[str, Any]]]) -> dict[tuple[str, str], LineCell]:
    """(machine class, cell id) -> the cell, from its first run's facts (one cell runs in several runs: one CellFacts per run)."""
    out: dict[tuple[str, str], LineCell] = {}
    for facts, rows in cells.items():
        if rows:
            cell_id = str(rows[0]["cell_id"])
            out.setdefault((facts.machine_class, cell_id), line_cell(cell_id, facts))
    return out


def line_cell(cell_id: str, facts: CellFacts) -> LineCell:
    return LineCell(cell_id, _values(facts), facts.machine.label())


def _values(facts: CellFacts) -> dict[str, str]:
    return {axis: point.value for axis, point in facts.points.items()}


def _gap(before: str, after: str, listed: Sequence[str]) -> tuple[str, ...]:
    """The releases listed strictly between two that ran (no pre-releases, unless an end is one)."""
    low, high = release(before), release(after)
    if low is None or high is None:
        return ()
    pre = low.is_prerelease or high.is_prerelease
    between = {v: release(v) for v in listed}
    found = [v for v, r in between.items() if r is not None and low < r < high and (pre or not r.is_prerelease)]
    return tuple(sorted(found, key=version_key))


def _columns(built: Mapping[str, str], listed: Sequence[str]) -> list[SupportColumn]:
    """The releases that ran (value -> cell id), oldest first, with the releases not built between each two."""
    values = sorted(built, key=version_key)
    out: list[SupportColumn] = []
    for i, value in enumerate(values):
        if i:
            gap = _gap(values[i - 1], value, listed)
            if gap:
                out.append(SupportColumn(not_built=gap))
        out.append(SupportColumn(value, built[value]))
    return out


def _marks(transitions: Iterable[Transition], library: str, line: set[str], machine: str) -> dict[tuple[str, str], Transition]:
    """(scenario, release) -> the exact answer along `library` between two cells of the line."""
    found: dict[tuple[str, str], Transition] = {}
    for t in transitions:
        if t.axis == library and t.exact and t.after_cell in line and t.before_cell in line and t.machine == machine:
            found.setdefault((t.scenario, t.after), t)
    return found


@dataclass(frozen=True)
class Chosen:
    """A machine class's known-good cell (`KnownGoodSet`, or the same choice made in DuckDB): what a line is drawn through."""

    machine: str
    cell_id: str  # the first of the set's cells
    versions: Mapping[str, str]

    @classmethod
    def of(cls, known: KnownGoodSet) -> Chosen | None:
        if not known.result.found:
            return None
        return cls(known.machine, known.result.cell_ids[0], dict(known.result.versions))


def lines_of(chosen: Iterable[Chosen | None], cells: Mapping[tuple[str, str], LineCell]) -> list[Line]:
    """One line per machine class with a known-good set and per library (axis), in reading order;
    `cells`: (machine class, cell id) -> the cell, in the order the cells were read."""
    out = []
    for known in chosen:
        at = cells.get((known.machine, known.cell_id)) if known is not None else None
        if known is None or at is None:
            continue
        good = at.values
        mine = [cell for (machine, _), cell in cells.items() if machine == known.machine]
        for library in axis_sort(good):
            line = tuple(c for c in mine if library in c.values and all(c.values.get(a) == v for a, v in good.items() if a != library))
            out.append(Line(known.machine, library, known.versions.get(library, ""), line))
    return out


#: cell id -> row -> how many outcomes of each status: a line's squares before they are folded.
Counts = Mapping[str, Mapping[str, Mapping[str, int]]]


def table_of(
    line: Line,
    counts: Counts,
    releases: Mapping[str, Sequence[str]],
    transitions: Iterable[Transition],
    group: Callable[[str], str],
) -> SupportTable:
    """One line's table from its cells' outcomes counted by cell and row (`counts`: the line's cells'
    and any others'), and the answers to mark (`group` maps a marked answer's scenario to its row)."""
    library = line.library
    held_at = line.cells[0].values  # any cell of the line: they differ only in `library`
    by_value = {c.values[library]: c.cell_id for c in line.cells}
    columns = _columns(by_value, releases.get(library, ()))
    index = {c.cell_id: i for i, c in enumerate(columns) if c.built}
    words: dict[frozenset[tuple[str, int]], Entry] = {}  # a suite's 30,000 squares hold a few distinct counts
    entries: dict[tuple[str, int], Entry] = {}
    for cell in line.cells:
        column = index[cell.cell_id]  # one cell a column: a column's release ran in one cell of the line
        for row, n in counts.get(cell.cell_id, {}).items():
            seen = frozenset(n.items())
            word = words.get(seen)
            if word is None:
                word = words[seen] = Entry(fold(n))
            entries[(row, column)] = word
    rows_shown = tuple(sorted({r for r, _ in entries}))  # the rows with outcomes, before any mark is added
    marks = _marks(transitions, library, set(index), line.cells[0].machine)
    at = {c.release: i for i, c in enumerate(columns) if c.built}
    for (scenario, after), t in marks.items():
        if after not in at:
            continue  # an answer between two commits of a git build (`refine --git`): no release column to mark
        key = (group(scenario), at[after])
        entries[key] = Entry(entries.get(key, Entry()).word, t.headline(), t.kind)
    held = tuple((a, held_at[a]) for a in axis_sort(held_at) if a != library)
    return SupportTable(line.machine, library, held, line.known_good, tuple(columns), rows_shown, entries)


def _counts(found: Answer, machine: str, cells: set[str], group: Callable[[str], str]) -> dict[str, dict[str, Counter[str]]]:
    """cell id -> row -> its outcomes by status, of the rows read on one machine class in `cells`;
    a stand-in row is a pass of each quiet test (`analysis.quiet`)."""
    counts: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    quiet = by_group(found.quiet, group)
    named: dict[str, str] = {}  # scenario -> its row: `group` once per test, not once per outcome
    for facts, rows in found.cells.items():
        if facts.machine_class != machine or not rows or str(rows[0]["cell_id"]) not in cells:
            continue
        for row in rows:
            mine = counts[str(row["cell_id"])]
            scenario = str(row["scenario"])
            if scenario == STAND_IN:
                for name, n in quiet.items():
                    mine[name][Status.PASS.value] += n
                continue
            shown = named.get(scenario)
            if shown is None:
                shown = named[scenario] = group(scenario)
            mine[shown][str(row["status"])] += 1
    return counts


def support_tables(
    found: Answer, group: Callable[[str], str] | None = None, transitions: Sequence[Transition] | None = None
) -> list[SupportTable]:
    """One table per machine class with a known-good set and per library (axis), in reading order.

    `group` maps a row's scenario to the table's row (a suite's test group); by default each scenario is a row.
    `transitions`: the answers to mark, when stored ones are at hand (default: `found`'s, attributed now).
    """
    grouping = group or (lambda s: s)
    lines = lines_of(map(Chosen.of, found.known_good), _cells_by_id(found.cells))
    wanted: dict[str, set[str]] = defaultdict(set)  # machine class -> the cells its lines hold
    for line in lines:
        wanted[line.machine].update(c.cell_id for c in line.cells)
    counts = {machine: _counts(found, machine, cells, grouping) for machine, cells in wanted.items()}
    marked = (found.transitions if transitions is None else transitions) if lines else ()
    return [table_of(line, counts[line.machine], found.releases, marked, grouping) for line in lines]


# -- kept in the results file (storage/cached.py): the tables as JSON and back, unchanged ----------
def tables_to_json(tables: Sequence[SupportTable], rows_are: str) -> str:
    """The tables and what a row is, as JSON that `tables_from_json` turns back into equal tables."""
    return json.dumps({"rows_are": rows_are, "tables": [_table_dict(t) for t in tables]}, separators=(",", ":"))


def _table_dict(table: SupportTable) -> dict[str, Any]:
    return {
        "machine": table.machine,
        "library": table.library,
        "held": [list(h) for h in table.held],
        "known_good": table.known_good,
        "columns": [[c.release, c.cell_id, list(c.not_built)] for c in table.columns],
        "rows": list(table.rows),
        "entries": [[row, index, e.word, e.mark, e.kind] for (row, index), e in table.entries.items()],
    }


def tables_from_json(text: str) -> tuple[tuple[SupportTable, ...], str]:
    data = json.loads(text)
    tables = tuple(
        SupportTable(
            machine=t["machine"],
            library=t["library"],
            held=tuple((a, v) for a, v in t["held"]),
            known_good=t["known_good"],
            columns=tuple(SupportColumn(release, cell, tuple(gap)) for release, cell, gap in t["columns"]),
            rows=tuple(t["rows"]),
            entries={(row, index): Entry(word, mark, kind) for row, index, word, mark, kind in t["entries"]},
        )
        for t in data["tables"]
    )
    return tables, str(data["rows_are"])
