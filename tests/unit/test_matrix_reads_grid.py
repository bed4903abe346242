"""The Matrix grid of a suite built faster (`grouping.build_grid`, `grouping.fold`) says the same
words, sizes, totals and folds as the rules it replaced, kept here verbatim as `_old_build_grid`
and `_old_fold`: tables of cases, then many random grids (repeated tuples, missing columns,
None counts, a GPU per column, the test level's word and size)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import pytest

from dashboard import grouping, logic
from dashboard.grouping import _FAILING, _PASS, _STATUSES, FOLDED_MORE, FOLDED_PASS, Column, Fold, Grid, _parsed, group_word, short_name


def _old_build_grid(
    counts: Sequence[Mapping[str, Any]],
    cols: Sequence[Column],
    *,
    within: str = "",
    word: Callable[[Mapping[str, int]], str] = group_word,
    size: str = "tests",
) -> Grid:
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


def _old_fold(files: Grid, marked: Iterable[str] = (), limit: int = grouping.FOLD_PAST) -> Fold:
    frame, labels = files.frame, files.labels
    if len(frame) <= limit:
        return Fold(files, {})
    marks = set(marked)
    quiet: list[str] = []
    ranked: list[tuple[int, int, str]] = []
    for record in frame[["name", *labels]].itertuples(index=False):
        name, words = str(record[0]), record[1:]
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
    index = frame.set_index("name")
    lines = []
    for line, names in folded.items():
        part = index.loc[names]
        line_row: dict[str, Any] = {"name": line, "shown": line, "tests": int(part["tests"].sum())}
        for label in labels:
            summed: dict[str, int] = defaultdict(int)
            for w in part[label]:
                for s, n in _parsed(w):
                    summed[s] += n
            line_row[label] = group_word(summed)
        lines.append(line_row)
    kept = frame[frame["name"].isin(shown)]
    out = pd.concat([kept, pd.DataFrame.from_records(lines, columns=list(frame.columns))], ignore_index=True)
    return Fold(Grid(out, files.columns, files.totals), folded)


CELLS = [{"cell_id": c, "torch": v} for c, v in (("a", "1"), ("b", "2"), ("c", "3"))]
COLS = grouping.columns(CELLS)
BY_GPU = grouping.columns(CELLS, {"a": ["cpu", "H200"], "b": ["cpu"], "c": ["H200"]})


def _same(new: Grid, old: Grid) -> None:
    pd.testing.assert_frame_equal(new.frame, old.frame)
    assert new.totals == old.totals and new.columns == old.columns


# rows -> what they test
CASES: list[tuple[list[dict[str, Any]], str]] = [
    ([], "no rows"),
    ([{"name": "t.py", "cell_id": "a", "tests": 2, "pass": 2}], "one square"),
    ([{"name": "t.py", "cell_id": "a", "tests": 2, "pass": None, "fail": 2}], "a None count"),
    ([{"name": "t.py", "cell_id": "a", "tests": 3, "fail": 1, "crash": 2, "pass": 0}], "a zero count is not worded"),
    ([{"name": "t.py", "cell_id": "zz", "tests": 3, "pass": 3}], "a cell with no column is left out"),
    (
        [{"name": "t.py", "cell_id": "a", "tests": 2, "pass": 2}, {"name": "t.py", "cell_id": "b", "tests": 5, "pass": 5}],
        "the biggest size",
    ),
    ([{"name": "", "scenario": "t.py::test_a", "cell_id": "a", "outcomes": 1, "pass": 1}], "the scenario names a row without a name"),
    ([{"name": "b.py", "cell_id": "a", "pass": 1}, {"name": "a.py", "cell_id": "a", "pass": 1}], "name order, no size column"),
]


@pytest.mark.parametrize(("rows", "why"), CASES, ids=[c[1] for c in CASES])
def test_build_grid_says_what_the_old_rule_said(rows: list[dict[str, Any]], why: str) -> None:
    _same(grouping.build_grid(rows, COLS), _old_build_grid(rows, COLS))
    _same(grouping.build_grid(rows, COLS, word=logic.fold, size="outcomes"), _old_build_grid(rows, COLS, word=logic.fold, size="outcomes"))


def _random_rows(seed: int, *, gpu: bool) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    shapes = [{"pass": 5}, {"pass": 4, "fail": 1}, {"pass": 3, "not_applicable": 2}, {"xfail": 1, "pass": 4}]  # repeated tuples
    rows = []
    for f in range(rng.randint(1, 90)):
        for cell in ("a", "b", "c"):
            if rng.random() < 0.15:
                continue  # a file without outcomes in a cell
            counts = (
                dict(rng.choice(shapes)) if rng.random() < 0.6 else {s: rng.choice([0, 0, 1, 3, None]) for s in rng.sample(_STATUSES, 4)}
            )
            row = {"name": f"tests/test_{f:03d}.py", "cell_id": cell, "tests": sum(v or 0 for v in counts.values()), **counts}
            if gpu:
                row["gpu"] = rng.choice(["cpu", "H200"])
            rows.append(row)
    return rows


@pytest.mark.parametrize("seed", range(40))
def test_random_grids_and_their_folds_are_the_old_ones(seed: int) -> None:
    cols = BY_GPU if seed % 4 == 0 else COLS
    rows = _random_rows(seed, gpu=seed % 4 == 0)
    new, old = grouping.build_grid(rows, cols), _old_build_grid(rows, cols)
    _same(new, old)
    names = list(old.frame["name"])
    marked = set(random.Random(seed).sample(names, min(3, len(names))))
    for limit in (0, 1, 5, grouping.FOLD_PAST):
        folded, before = grouping.fold(new, marked, limit), _old_fold(old, marked, limit)
        _same(folded.grid, before.grid)
        assert folded.folded == before.folded


def test_the_comparison_can_fail() -> None:
    """A grid whose word changed is told apart (the helpers above would pass anything otherwise)."""
    rows = [{"name": "t.py", "cell_id": "a", "tests": 2, "pass": 1, "fail": 1}]
    changed = grouping.build_grid(rows, COLS)
    changed.frame.loc[0, "A"] = "pass 1 · fail 1"
    with pytest.raises(AssertionError):
        _same(changed, _old_build_grid(rows, COLS))
