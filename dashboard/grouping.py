"""A test suite on the dashboard: node ids grouped by file and class, one word per group and cell. Pure.

A sweep over a team's pytest suite stores one outcome per node id and cell (20,000 × 20 is
400,000), so the pages never draw one square per test: the grid has one row per file, then
per class (or module-level function) of a chosen file, then per test of a chosen class, and
each square says how many tests had each status there. The grouping itself happens in DuckDB
(`harness.storage.suites.test_group_tallies`); this module names the rows and columns and folds the
counts into words.

>>> group_word({"pass": 117, "fail": 3, "not_applicable": 2})
'fail 3 · pass 117 · not_applicable 2'
>>> short_name("tests/test_x.py::TestLora::test_merge[4bit]", "tests/test_x.py::TestLora")
'test_merge[4bit]'
>>> cell_labels(4)
['A', 'B', 'C', 'D']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.analysis.rows import AXIS_ORDER, group_of
from harness.analysis.status import FAILURES, SEVERITY, Status
from harness.analysis.versions import version_key

#: Listed after the failures and problems, in this order: what passed, then what says nothing.
_QUIET = (Status.PASS, Status.NOT_APPLICABLE, Status.XFAIL, Status.XPASS)
#: The order a group's word lists its statuses in: failures and problems worst first, then _QUIET.
WORD_ORDER: tuple[str, ...] = (*(s.value for s in SEVERITY if s not in _QUIET), *(s.value for s in _QUIET))
#: Short axis names for the column legend (the summary's words).
SHORT = {"torch": "torch", "transformers": "tf", "accelerate": "acc", "peft": "peft", "bitsandbytes": "bnb"}
#: The page's levels, outermost first.
LEVELS = ("file", "group", "test")
#: Every status's name, once: `Status.X.value` in a loop over 4,000 rows costs more than the rest of the loop.
_STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


def is_test_suite(scenarios: Iterable[str]) -> bool:
    """Whether the file holds pytest node ids (a scenario name never holds `::`).

    >>> is_test_suite(["gemma4_lora", "tests/test_x.py::test_a"]), is_test_suite(["gemma4_lora"])
    (True, False)
    """
    return any("::" in s for s in scenarios)


def group_word(counts: Mapping[str, int]) -> str:
    """How many tests of a group had each status in one cell, failures first: its first status is its colour.

    >>> group_word({"pass": 40}), group_word({"error": 1, "crash": 2, "pass": 5}), group_word({})
    ('pass 40', 'crash 2 · error 1 · pass 5', '')
    """
    return " · ".join(f"{s} {counts[s]}" for s in WORD_ORDER if counts.get(s))


def short_name(name: str, within: str) -> str:
    """A row's name without the file or group it was chosen in (`within`; "" keeps it whole); a
    file's own group holds its module-level functions.

    >>> short_name("t.py::TestA", "t.py"), short_name("t.py", "t.py"), short_name("t.py::test_a[1]", "t.py")
    ('TestA', '(module-level functions)', 'test_a[1]')
    """
    if name == within and "::" not in name:
        return "(module-level functions)"
    return name.removeprefix(within + "::") if within else name


def cell_labels(count: int) -> list[str]:
    """Column letters for `count` cells: A … Z, then AA, AB, …

    >>> cell_labels(28)[-3:]
    ['Z', 'AA', 'AB']
    """
    labels = []
    for i in range(count):
        label = ""
        i += 1
        while i:
            i, rest = divmod(i - 1, 26)
            label = chr(ord("A") + rest) + label
        labels.append(label)
    return labels


@dataclass(frozen=True)
class Column:
    """One cell of the matrix as a column of the grid."""

    label: str  # "A"
    cell_id: str
    versions: dict[str, str]  # every axis
    varying: str  # only the axes that differ between the shown cells: "tf 5.6.2 acc 1.13.0"
    gpu: str = ""  # with one column per cell and GPU


def columns(cells: Sequence[Mapping[str, Any]], gpus: Mapping[str, Sequence[str]] | None = None) -> list[Column]:
    """The grid's columns from `pages.grid_cells` (or `cell_summaries`) rows: in axis order, oldest versions first,
    labelled A, B, …; with `gpus` (cell -> GPUs) one column per cell and GPU."""
    axes_of: dict[str, dict[str, str]] = {}
    for cell in cells:
        versions = {a: str(v) for a, v in (cell.get("versions") or {}).items()}
        versions.update({a: str(cell[a]) for a in AXIS_ORDER if cell.get(a)})
        axes_of[str(cell["cell_id"])] = versions
    axes = sorted({a for v in axes_of.values() for a in v}, key=lambda a: (AXIS_ORDER.index(a) if a in AXIS_ORDER else 99, a))
    varying = [a for a in axes if len({v.get(a, "") for v in axes_of.values()}) > 1]
    keys = [(c, g) for c in axes_of for g in ((gpus or {}).get(c) or [""])]
    keys.sort(key=lambda k: (tuple(version_key(axes_of[k[0]].get(a)) for a in axes), k))
    out = []
    for label, (cell_id, gpu) in zip(cell_labels(len(keys)), keys):
        words = " ".join(f"{SHORT.get(a, a)} {axes_of[cell_id].get(a, '—')}" for a in varying) or cell_id
        out.append(Column(label, cell_id, axes_of[cell_id], words, gpu))
    return out


@dataclass(frozen=True)
class Grid:
    """Rows (files, groups or tests) × columns (cells): one word per square."""

    frame: pd.DataFrame  # columns: name (the row's key), shown, tests, then one per column label
    columns: tuple[Column, ...]
    totals: dict[str, int]  # status -> tests × cells (outcomes, for a grid of tests)

    @property
    def empty(self) -> bool:
        return self.frame.empty

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.columns]


def build_grid(
    counts: Sequence[Mapping[str, Any]],
    cols: Sequence[Column],
    *,
    within: str = "",
    word: Callable[[Mapping[str, int]], str] = group_word,
    size: str = "tests",
) -> Grid:
    """From `suites.test_group_tallies` rows (`word=group_word`, `size="tests"`) or `test_counts`
    rows (`word=fold`, `size="outcomes"`): one row per name in name order, one column per cell."""
    key_of = {(c.cell_id, c.gpu): c.label for c in cols}
    by_gpu = any(c.gpu for c in cols)
    words: dict[str, dict[str, str]] = defaultdict(dict)
    sizes: dict[str, int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    for row in counts:
        name = str(row.get("name") or row.get("scenario"))
        label = key_of.get((str(row["cell_id"]), str(row.get("gpu") or "") if by_gpu else ""))
        if label is None:
            continue
        statuses = {s: int(row.get(s) or 0) for s in _STATUSES}
        for s, n in statuses.items():
            totals[s] += n
        words[name][label] = word(statuses)
        sizes[name] = max(sizes[name], int(row.get(size) or 0))
    records = [
        {"name": name, "shown": short_name(name, within), "tests": sizes[name], **{c.label: words[name].get(c.label, "") for c in cols}}
        for name in sorted(words)
    ]
    frame = pd.DataFrame.from_records(records, columns=["name", "shown", "tests", *(c.label for c in cols)])
    return Grid(frame, tuple(cols), {s: n for s, n in totals.items() if n})


def failing_share(totals: Mapping[str, int]) -> str:
    """The share of failures (fail, error, crash, timeout, oom) among `totals`, or "" when none failed.

    >>> failing_share({"pass": 97, "fail": 2, "error": 1})
    '3.0% failing'
    """
    total = sum(totals.values())
    bad = sum(n for s, n in totals.items() if s in FAILURES)
    return f"{100 * bad / total:.1f}% failing" if total and bad else ""


def selected(grid: Grid, selection: Mapping[str, Any] | None) -> tuple[str, Column | None] | None:
    """(row name, the chosen column or None) for the grid's selected square or row, else None.

    `selection` is st.dataframe's selection state: {"rows": [...], "cells": [[row, column], ...]}.
    """
    if not selection or grid.empty:
        return None
    by_label = {c.label: c for c in grid.columns}
    for row, column in selection.get("cells") or []:
        if 0 <= int(row) < len(grid.frame):
            return str(grid.frame.iloc[int(row)]["name"]), by_label.get(str(column))
    for row in selection.get("rows") or []:
        if 0 <= int(row) < len(grid.frame):
            return str(grid.frame.iloc[int(row)]["name"]), None
    return None


def group_name(node: str) -> str:
    """A node id's group as the queries group it (`file::Class`, or the file for its module-level
    functions): `analysis.rows.group_of` of the node id without its parameters, which may hold `::`.

    >>> group_name("t.py::test_plain[x::y]"), group_name("t.py::TestA::test_b[1]")
    ('t.py', 't.py::TestA')
    """
    return group_of(node.split("[", 1)[0])  # a path never holds `[`


def name_many(names: Iterable[str], shown: int = 3) -> str:
    """Scenario names joined as before; many test ids as a count with the first few groups.

    >>> name_many(["b", "a"])
    'a, b'
    >>> name_many([f"t.py::TestA::test_{i}" for i in range(5)] + ["u.py::test_b"])
    '6 tests in 2 groups: t.py::TestA (5), u.py (1)'
    """
    unique = sorted(set(names))
    if not any("::" in n for n in unique):
        return ", ".join(unique)
    groups: dict[str, int] = defaultdict(int)
    for n in unique:
        groups[group_name(n)] += 1
    top = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    more = f", … {len(groups) - shown} more" if len(groups) > shown else ""
    return f"{len(unique)} tests in {len(groups)} groups: " + ", ".join(f"{g} ({n})" for g, n in top) + more
