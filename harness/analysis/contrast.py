"""The contrast table: where a failure passes and where it fails, one row per cell, the varying axes in bold. Pure.

A row is one cell on one machine class (`CellOnMachine`: outcomes of two machines are never
pooled); each scenario's entry is one word (`outcome_word`: `passes`, `**fails** (error)`,
`flaky: fails 1/3`, …). Too many cells for one table: the ones an attribution compares come
first, then failing cells beside a passing neighbour (one axis apart). A report
(`analysis.report`) shows it under "Where it passes and where it fails", and a cell's report
for the cell and its neighbours.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.markdown import table_cell
from harness.analysis.rows import axis_sort, installed, machine_of
from harness.analysis.status import FAILURES, Status, across_runs
from harness.analysis.versions import version_key

_MAX_CONTRAST_ROWS = 24


@dataclass
class CellOnMachine:
    """One cell's outcomes on one machine class (outcomes of two machines are never pooled)."""

    cell_id: str
    versions: dict[str, str]
    machine: str = ""
    rows: dict[str, list[Mapping[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    def all_rows(self) -> list[Mapping[str, Any]]:
        return [r for rows in self.rows.values() for r in rows]

    def sort_key(self) -> tuple[Any, ...]:
        return (*(version_key(self.versions.get(a)) for a in axis_sort(self.versions)), self.machine, self.cell_id)


def cells_on_machines(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], CellOnMachine]:
    """(cell id, machine label) -> the cell's outcomes there."""
    cells: dict[tuple[str, str], CellOnMachine] = {}
    for row in rows:
        key = (str(row.get("cell_id") or ""), machine_of(row).label())
        if key not in cells:
            cells[key] = CellOnMachine(key[0], installed(row), key[1])
        cells[key].rows[str(row["scenario"])].append(row)
    return cells


def outcome_word(rows: Sequence[Mapping[str, Any]], signature: str | None = None) -> str:
    """One scenario in one cell as a table entry: `passes`, `**fails** (error)`, `flaky: fails 1/3`,
    `flaky across runs: fails in 1 of 2 runs`, …

    With `signature`, a failure with another signature is `other failure`; without, every
    failure is named by its exception type. A cell whose history flipped with nothing changed
    (`queries.mark_flaky`) is flaky across runs, whatever its current outcomes say.
    """
    if not rows:
        return "not run"
    n = len(rows)
    count = f" {n}/{n}" if n > 1 else ""
    statuses = Counter(str(r["status"]) for r in rows)
    marked = any("flaky_across" in r and signature in (None, r.get("flaky_signature")) for r in rows)
    if statuses[Status.PASS] == n and not marked:
        return f"passes{count}"
    if signature is not None:
        hits = [r for r in rows if r["status"] in FAILURES and (r.get("signature") or r["status"]) == signature]
        if len(hits) == n and not marked:
            return f"**fails** ({hits[0]['status']}){count}"
        if hits or marked:
            return _flaky_word(rows, hits, marked)
    failing = [r for r in rows if r["status"] in FAILURES]
    if (failing and statuses[Status.PASS]) or (marked and (failing or statuses[Status.PASS] == n)):
        return _flaky_word(rows, failing, marked)
    if failing:
        status, kind = str(failing[0]["status"]), str(failing[0].get("exception_type") or "")
        if signature is not None:
            return f"other failure: {kind or status}"
        return f"**{status}**{count}" + (f": {kind}" if kind else "")
    status = statuses.most_common(1)[0][0]
    return status.replace("_", " ")


def _flaky_word(rows: Sequence[Mapping[str, Any]], failing: Sequence[Mapping[str, Any]], marked: bool) -> str:
    """`flaky across runs: fails in 1 of 2 runs` where each run agreed with itself, else `flaky: fails 1/3` (its repeats)."""
    mine = {id(r) for r in failing}
    split = across_runs(rows, lambda r: id(r) in mine, marked)
    return f"flaky across runs: fails in {split[0]} of {split[1]} runs" if split else f"flaky: fails {len(failing)}/{len(rows)}"


def contrast_table(
    cells: Sequence[CellOnMachine],
    scenarios: Sequence[str],
    signature: str | None,
    focus: Iterable[str] = (),
    mark: str = "",
    evidence: Iterable[str] = (),
) -> list[str]:
    """The markdown table: one row per cell, every axis, the varying axes in bold.

    focus: cells to keep and mark (`← this cell`). evidence: cells to keep first when there
    are too many to show (the ones the attribution compares).
    """
    if not cells:
        return []
    focus = set(focus)
    shown = _select(cells, scenarios, signature, focus, set(evidence))
    omitted = len(cells) - len(shown)
    axes = axis_sort({a for c in shown for a in c.versions})
    varying = {a for a in axes if len({c.versions.get(a) for c in shown}) > 1}
    machines = len({c.machine for c in shown}) > 1  # outcomes of two machines are never compared: say which is which
    header = [f"**{a}**" if a in varying else a for a in axes] + (["**machine**"] if machines else []) + [f"`{s}`" for s in scenarios]
    header += ["cell"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cell in shown:
        values = [f"**{cell.versions.get(a, '')}**" if a in varying else cell.versions.get(a, "") for a in axes]
        words = [outcome_word(cell.rows.get(s, []), signature) for s in scenarios]
        label = f"`{cell.cell_id}`" + (f" {mark}" if mark and cell.cell_id in focus else "")
        where = [f"**{cell.machine}**"] if machines else []
        lines.append("| " + " | ".join(table_cell(v) for v in [*values, *where, *words, label]) + " |")
    if omitted:
        lines.append(
            f"\n{omitted} more cell(s) not shown: the rows above are the ones the attribution compares and failing cells "
            "next to passing ones; `harness summary` lists every cell."
        )
    return lines


def _select(
    cells: Sequence[CellOnMachine], scenarios: Sequence[str], signature: str | None, focus: set[str], evidence: set[str]
) -> list[CellOnMachine]:
    """Every cell when they fit; else the focused and evidence cells, then failing cells with a passing neighbour."""
    ordered = sorted(cells, key=lambda c: c.sort_key())
    if len(ordered) <= _MAX_CONTRAST_ROWS:
        return ordered
    keep = [c for c in ordered if c.cell_id in focus or c.cell_id in evidence]
    if len(keep) < _MAX_CONTRAST_ROWS:

        def fails(cell: CellOnMachine) -> bool:
            return any(outcome_word(cell.rows.get(s, []), signature).startswith(("**", "flaky")) for s in scenarios)

        failing = [c for c in ordered if fails(c)]
        passing_shadows = {key for c in ordered if not fails(c) for key in _shadows(c)}
        contrasts = [c for c in failing if _shadows(c) & passing_shadows]
        # One failing cell and its passing neighbours at a time, until the table is full.
        for cell in contrasts:
            if len(keep) >= _MAX_CONTRAST_ROWS:
                break
            mine = _shadows(cell)
            group = [cell, *(c for c in ordered if not fails(c) and _shadows(c) & mine)]
            keep += [c for c in group if c not in keep][: _MAX_CONTRAST_ROWS - len(keep)]
    chosen = {id(c) for c in keep[: _MAX_CONTRAST_ROWS * 2]}
    return [c for c in ordered if id(c) in chosen]


def _shadows(cell: CellOnMachine) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The cell with one axis left out, for every axis: two cells one axis apart share exactly one."""
    items = sorted(cell.versions.items())
    return {(axis, tuple(i for i in items if i[0] != axis)) for axis, _ in items}
