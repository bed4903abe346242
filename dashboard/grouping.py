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

import functools
from collections import Counter, defaultdict
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
    sizes: dict[str, int] = {}
    # The first page of a 100,000-test suite is 1,000 files × 20 cells: 20,000 rows. Each row's
    # counts are read once, as a tuple; its word is made and its counts added to the totals once
    # per distinct tuple, not once per row (the files of a suite repeat a few thousand of them).
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    for row in counts:
        name = str(row.get("name") or row.get("scenario"))
        label = key_of.get((str(row["cell_id"]), str(row.get("gpu") or "") if by_gpu else ""))
        if label is None:
            continue
        values = tuple(map(row.get, _STATUSES))
        seen[values] += 1
        words[name][label] = _group_word_of(values) if word is group_word else word(_counted(values))
        sizes[name] = max(sizes.get(name, 0), int(row.get(size) or 0))
    totals: dict[str, int] = defaultdict(int)
    for values, times in seen.items():
        for status, n in _counted(values).items():
            totals[status] += n * times
    records = [
        {"name": name, "shown": short_name(name, within), "tests": sizes[name], **{c.label: words[name].get(c.label, "") for c in cols}}
        for name in sorted(words)
    ]
    frame = pd.DataFrame.from_records(records, columns=["name", "shown", "tests", *(c.label for c in cols)])
    return Grid(frame, tuple(cols), {s: n for s, n in totals.items() if n})


def _counted(values: tuple[Any, ...]) -> dict[str, int]:
    """A row's counts (`values`: one per status of _STATUSES, None where the row has no such column) as a mapping."""
    return {s: int(v or 0) for s, v in zip(_STATUSES, values)}


@functools.lru_cache(maxsize=65536)
def _group_word_of(values: tuple[Any, ...]) -> str:
    return group_word(_counted(values))


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
    unique = set(names)
    if not any("::" in n for n in unique):
        return ", ".join(sorted(unique))
    groups = Counter(map(group_name, unique))  # counted, not sorted: the Pin page names 78,000 chosen tests a rerun
    top = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))[:shown]
    more = f", … {len(groups) - shown} more" if len(groups) > shown else ""
    return f"{len(unique)} tests in {len(groups)} groups: " + ", ".join(f"{g} ({n})" for g, n in top) + more


def word_counts(word: str) -> dict[str, int]:
    """The counts a `group_word` says, back: `group_word(word_counts(w)) == w`.

    >>> word_counts("error 1 · crash 2 · pass 5"), word_counts("")
    ({'error': 1, 'crash': 2, 'pass': 5}, {})
    """
    return dict(_parsed(word))


@functools.lru_cache(maxsize=65536)
def _parsed(word: str) -> tuple[tuple[str, int], ...]:
    """`word_counts` as pairs, once per distinct word: a grid of 1,000 files × 20 cells repeats a few thousand words."""
    return tuple((status, int(n)) for status, _, n in (part.rpartition(" ") for part in word.split(" · ") if part))


#: Past this many files, the Matrix draws the files that say the most and folds the others into a
#: line or two (`fold`): a heatmap of 1,000 files × 20 cells is 20,000 squares, seconds for a browser to draw.
FOLD_PAST = 60
#: The line that folds the files whose every square is a pass (`fold`); FOLDED_MORE: the files past the limit.
FOLDED_PASS, FOLDED_MORE = "… {n:,} file(s) pass in every cell", "… {n:,} more file(s), fewer failures"
_PASS = Status.PASS.value
_FAILING = frozenset(WORD_ORDER) - {s.value for s in _QUIET}


@dataclass(frozen=True)
class Fold:
    """A grid of files as the Matrix draws it past FOLD_PAST files: `grid` has the files that say the most
    (in name order), then a line for the files that pass in every cell and one for the rest, each line
    the sum of its files' counts; `folded` maps each line's name to its files."""

    grid: Grid
    folded: dict[str, list[str]]

    @property
    def files(self) -> int:
        """How many files the grid's rows hold, its lines' included."""
        return len(self.grid.frame) - len(self.folded) + sum(len(v) for v in self.folded.values())


def is_folded(name: str) -> bool:
    """Whether a row of the grid is a line of folded files (a file's name never starts with `…`)."""
    return name.startswith("… ")


def fold(files: Grid, marked: Iterable[str] = (), limit: int = FOLD_PAST) -> Fold:
    """`files` (a grid of files, `build_grid`) with at most `limit` files drawn one row each.

    A file says nothing to fold away when every square of it is a pass (its first status: skips
    and xfails beside passes do not colour it), in every column, with no mark on it (`marked`: the
    files a transition names). The others say something: first those whose squares differ between
    columns (a colour changes, a column lacks it, or a mark), then those that fail the same way
    everywhere, each by how many tests × cells fail or break, most first; past `limit`, the rest are
    folded too. With at most `limit` files in all, nothing is folded.

    >>> cols = columns([{"cell_id": "a", "torch": "1"}, {"cell_id": "b", "torch": "2"}])
    >>> rows = [{"name": n, "cell_id": c, "tests": 2, "pass": p, "fail": 2 - p}
    ...         for n, ps in [("x.py", (2, 2)), ("y.py", (2, 0)), ("z.py", (0, 0)), ("w.py", (2, 2))] for c, p in zip("ab", ps)]
    >>> folded = fold(build_grid(rows, cols), limit=1)
    >>> list(folded.grid.frame["name"])
    ['y.py', '… 2 file(s) pass in every cell', '… 1 more file(s), fewer failures']
    >>> list(folded.folded.values())
    [['w.py', 'x.py'], ['z.py']]
    >>> [str(v) for v in folded.grid.frame.iloc[1][["tests", "A", "B"]]], folded.files
    (['4', 'pass 4', 'pass 4'], 4)
    """
    frame, labels = files.frame, files.labels
    if len(frame) <= limit:
        return Fold(files, {})
    marks = set(marked)
    # Read as lists, not row by row from the frame: iterating 1,000 rows of Arrow-backed strings cost more than the rest.
    names = [str(n) for n in frame["name"].tolist()]
    squares = list(zip(*(frame[label].tolist() for label in labels))) if labels else [() for _ in names]
    quiet: list[str] = []
    ranked: list[tuple[int, int, str]] = []
    for name, words in zip(names, squares):
        colours = {w.partition(" ")[0] for w in words}
        if colours == {_PASS} and name not in marks:
            quiet.append(name)
            continue
        failing = sum(n for w in words for s, n in _parsed(w) if s in _FAILING)
        steady = len(colours) == 1 and "" not in colours and name not in marks
        ranked.append((int(steady), -failing, name))
    ranked.sort()
    shown = {name for _, _, name in ranked[:limit]}
    folded = {}
    if quiet:
        folded[FOLDED_PASS.format(n=len(quiet))] = quiet
    if len(ranked) > limit:
        folded[FOLDED_MORE.format(n=len(ranked) - limit)] = sorted(name for _, _, name in ranked[limit:])
    at = {name: i for i, name in enumerate(names)}
    tests = frame["tests"].tolist()
    lines = [_line(line, [at[n] for n in members], tests, squares, labels) for line, members in folded.items()]
    kept = frame[frame["name"].isin(shown)]
    out = pd.concat([kept, pd.DataFrame.from_records(lines, columns=list(frame.columns))], ignore_index=True)
    return Fold(Grid(out, files.columns, files.totals), folded)


def _line(line: str, rows: Sequence[int], tests: Sequence[Any], squares: Sequence[Sequence[str]], labels: Sequence[str]) -> dict[str, Any]:
    """One line of folded files (`rows`: their positions in the grid): tests summed, each square the sum of their counts."""
    row: dict[str, Any] = {"name": line, "shown": line, "tests": int(sum(int(tests[i]) for i in rows))}
    for column, label in enumerate(labels):
        summed: dict[str, int] = defaultdict(int)
        for i in rows:
            for s, n in _parsed(squares[i][column]):
                summed[s] += n
        row[label] = group_word(summed)
    return row
