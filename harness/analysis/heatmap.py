"""The whole matrix at a glance: rows (scenarios, or a suite's test groups) × columns (cells), as a Vega-Lite spec. Pure.

The dashboard's Matrix page and `harness publish` draw the same spec. Columns are ordered by
their versions, axis by axis, with one axis (`last`) varying fastest: a release of that axis
that changes a verdict then sits right beside the one before it, so the change shows as an
edge of colour. Above the heatmap, one strip per axis that varies names each column's
version: across its run of columns where it fits, else rotated up it (the strip as tall as
that takes, a version too long for it cut with `…`), the tooltip whole; where attribution found
a transition, a tick on the edge (or, when the two cells are not neighbours in this order, a
triangle in the new side's cell) says which release did it.

>>> cols = [Column("b", "b", (("torch", "2.13.0"), ("peft", "0.21.2"))), Column("a", "a", (("torch", "2.13.0"), ("peft", "0.19.1")))]
>>> [c.key for c in order(cols)]
['a', 'b']
>>> varying(cols)
['peft']
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from harness.analysis.attribution import Transition
from harness.analysis.quiet import NO_QUIET, STAND_IN, Quiet, by_group
from harness.analysis.rows import axis_sort, cell_facts
from harness.analysis.status import Status, fold, status_of
from harness.analysis.versions import version_key

#: Background colour per status (and `mixed`: some repeats passed), shared by every face that draws one.
COLOURS = {
    "pass": "#a5d6a7",
    "fail": "#ef9a9a",
    "error": "#e57373",
    "crash": "#ce93d8",
    "oom": "#ba68c8",
    "timeout": "#ffcc80",
    "inconclusive": "#90caf9",
    "unresolvable": "#cfd8dc",
    "install_failed": "#b0bec5",
    "not_applicable": "#eceff1",
    "xfail": "#d7ccc8",
    "xpass": "#b2ebf2",
    "mixed": "#fff176",
}
KIND_COLOURS = {"introduced": "#b71c1c", "fixed": "#1b5e20"}
#: Short axis names for the strips' titles (the summary's words).
SHORT = {"transformers": "tf", "accelerate": "acc", "bitsandbytes": "bnb"}
#: Pixels: one row of the heatmap, one strip, and the width a row name may take before it is cut (its tooltip has it whole).
ROW, STRIP, LABEL_LIMIT = 18, 14, 330
#: Columns never get wider than this (a small matrix is not stretched into big squares).
MAX_STEP = 28
#: Roughly the width of one character of the 11 px labels: what decides whether a version fits in its run of the strip.
CHAR = 6.2
#: A version that does not fit across its run is written up it, rotated: where the run is this wide (the text's
#: height), in a strip as tall as its longest such version, at most ROTATED_MAX px (a longer one is cut, `…`).
ROTATED_MIN, ROTATED_MAX = 10, 64
#: The selections a click makes: a square (its cell and row), an edge mark (its failure).
PICK, EDGE = "pick", "edge"


@dataclass(frozen=True)
class Column:
    """One column of the heatmap: a cell (and, with one column per cell and GPU, its GPU)."""

    key: str  # unique among the columns: the cell id, or "cell id @ gpu"
    cell_id: str
    versions: tuple[tuple[str, str], ...]  # (axis, value) in reading order
    gpu: str = ""

    def value(self, axis: str) -> str:
        return dict(self.versions).get(axis, "")

    def describe(self) -> str:
        """`torch 2.13.0 · transformers 5.6.2 · … on cpu`: what the tooltip names."""
        text = " · ".join(f"{a} {v}" for a, v in self.versions)
        return f"{text} on {self.gpu}" if self.gpu else text


@dataclass(frozen=True)
class Edge:
    """A transition as the heatmap marks it (`Transition` or a stored `transitions` row, reduced)."""

    row: str  # the scenario, or the test group
    kind: str  # introduced | fixed
    headline: str  # `fixed in transformers 5.11.0 (after 5.10.4)`
    axis: str
    before_cell: str
    after_cell: str
    signature: str


def edges_of(transitions: Iterable[Mapping[str, Any]], group: Any = None) -> list[Edge]:
    """Exact and range transitions (`attributed.transitions` rows or `Transition.to_dict()`), one Edge each;
    `group` maps a scenario to its row (a suite's test group)."""
    out = []
    for t in transitions:
        if t.get("kind") not in KIND_COLOURS or not t.get("after_cell"):
            continue  # flaky cells and machine differences have no edge between two cells
        headline = str(t.get("description") or "").split(" — ")[0] or f"{t['kind']} in {t['axis']} {t['after']}"
        scenario = str(t["scenario"])
        out.append(
            Edge(
                group(scenario) if group else scenario,
                str(t["kind"]),
                headline,
                str(t["axis"]),
                str(t.get("before_cell") or ""),
                str(t["after_cell"]),
                str(t.get("signature") or ""),
            )
        )
    return out


def edges_from(transitions: Iterable[Transition], group: Any = None) -> list[Edge]:
    """`edges_of` the transitions themselves, without a stored row made of each (78,000 at 2,000,000 outcomes)."""
    return [
        Edge(group(t.scenario) if group else t.scenario, t.kind, t.headline(), t.axis, t.before_cell, t.after_cell, t.signature)
        for t in transitions
        if t.kind in KIND_COLOURS and t.after_cell
    ]


def axes_of(columns: Iterable[Column]) -> list[str]:
    return axis_sort({a for c in columns for a, _ in c.versions})


def varying(columns: Sequence[Column]) -> list[str]:
    """The axes whose value differs between the columns, in reading order."""
    return [a for a in axes_of(columns) if len({c.value(a) for c in columns}) > 1]


def busiest_axis(edges: Iterable[Edge], axes: Sequence[str]) -> str:
    """The axis most transitions are along (ties: the later in reading order), else the last axis: the default `last`."""
    return busiest_of(Counter(e.axis for e in edges), axes)


def busiest_of(counts: Mapping[str, int], axes: Sequence[str]) -> str:
    """`busiest_axis` of transitions already counted by axis (the dashboard's edges come grouped, each with
    how many transitions give it: 78,000 at 2,000,000 outcomes, not made one by one to be counted)."""
    along = {a: counts[a] for a in axes if counts.get(a)}
    if not along:
        return axes[-1] if axes else ""
    return max(axes, key=lambda a: (along.get(a, 0), axes.index(a)))


def order(columns: Iterable[Column], last: str = "") -> list[Column]:
    """Columns by version along each axis in reading order, `last` moved to the end (it varies fastest), then GPU."""
    cols = list(columns)
    axes = axes_of(cols)
    if last in axes:
        axes = [a for a in axes if a != last] + [last]
    return sorted(cols, key=lambda c: (tuple(version_key(c.value(a) or None) for a in axes), c.gpu, c.key))


@dataclass(frozen=True)
class Mark:
    """Where the heatmap says which release changed a row: on the edge before column `index`, or inside it."""

    row: str
    index: int  # the column of the new side
    kind: str
    text: str  # every headline at this spot, one per line
    on_edge: bool  # the old side is the column just before
    signature: str  # the first failure's, for a click


def marks(edges: Iterable[Edge], columns: Sequence[Column]) -> list[Mark]:
    """One mark per (row, new side's column) the transitions name, placed on the edge where the old side is its neighbour."""
    where: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(columns):
        where[c.cell_id].append(i)
    found: dict[tuple[str, int], list[Edge]] = defaultdict(list)
    for e in edges:
        for i in where.get(e.after_cell, []):
            found[(e.row, i)].append(e)
    out = []
    for (row, i), here in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        before = {e.before_cell for e in here}
        adjacent = i > 0 and columns[i - 1].cell_id in before
        text = "\n".join(dict.fromkeys(e.headline for e in here))
        out.append(Mark(row, i, here[0].kind, text, adjacent, here[0].signature))
    return out


def square(row: str, index: int, word: str, status: str = "") -> dict[str, Any]:
    """One square of the heatmap's data: a row in a column, with its folded word (`status.fold`) or a group's word,
    and its colour key (from the word when not given)."""
    return {"row": row, "x": index, "x2": index + 1, "word": word, "status": status or status_of(word)}


def runs(columns: Sequence[Column], axis: str) -> list[tuple[int, int, str]]:
    """(first, end, value) for each run of equal values of `axis` along the columns."""
    out: list[tuple[int, int, str]] = []
    for i, c in enumerate(columns):
        value = c.gpu if axis == "GPU" else c.value(axis)
        if out and out[-1][2] == value:
            out[-1] = (out[-1][0], i + 1, value)
        else:
            out.append((i, i + 1, value))
    return out


def _strips(columns: Sequence[Column], axes: Sequence[str], step: float) -> list[dict[str, Any]]:
    """One datum per run of equal versions of each axis: its text across the run (`t`) where it fits,
    else up it (`r`, rotated) where the run is as wide as the text is tall; `m` is the run's middle."""
    data = []
    for axis in axes:
        for n, (first, end, value) in enumerate(runs(columns, axis)):
            width = (end - first) * step
            across = width >= len(value) * CHAR + 4
            up = not across and width >= ROTATED_MIN
            data.append(
                {
                    "a": SHORT.get(axis, axis),
                    "x": first,
                    "x2": end,
                    "m": (first + end) / 2,
                    "v": value,
                    "odd": n % 2,
                    "t": value if across else "",
                    "r": value if up else "",
                }
            )
    return data


def strip_height(data: Sequence[Mapping[str, Any]]) -> int:
    """One strip's height: a line where every version is written across its run, else its longest rotated version's length."""
    longest = max((len(str(d["r"])) for d in data if d["r"]), default=0)
    return STRIP if not longest else int(min(ROTATED_MAX, max(STRIP, longest * CHAR + 6)))


def _strip_view(axis: str, data: Sequence[Mapping[str, Any]], wide: float, x: Mapping[str, Any]) -> dict[str, Any]:
    """The strip of one axis above the heatmap: shaded runs, each with its version across or up it."""
    height = strip_height(data)
    return {
        "data": {"name": "strips"},
        "transform": [{"filter": {"field": "a", "equal": axis}}],
        "width": wide,
        "height": height,
        "encoding": {
            "y": {"field": "a", "type": "nominal", "title": None, "axis": {"labelFontSize": 11, "labelOverlap": False}},
            "x": x,
        },
        "layer": [
            {
                "mark": {"type": "rect", "stroke": "#ffffff", "strokeWidth": 1},
                "encoding": {
                    "x2": {"field": "x2"},
                    "color": {"field": "odd", "type": "nominal", "scale": {"range": ["#e3e7ec", "#c9d1da"]}, "legend": None},
                    "tooltip": [{"field": "a", "title": "axis"}, {"field": "v", "title": "version"}],
                },
            },
            {"mark": {"type": "text", "align": "left", "dx": 2, "fontSize": 10}, "encoding": {"text": {"field": "t"}}},
            {
                "mark": {"type": "text", "angle": 270, "align": "center", "baseline": "middle", "fontSize": 10, "limit": height - 4},
                "encoding": {"x": {**x, "field": "m"}, "text": {"field": "r"}},
            },
        ],
    }


def label_width(rows: Iterable[str]) -> int:
    """About how wide the row names are drawn (at most LABEL_LIMIT)."""
    return int(min(LABEL_LIMIT, max((len(r) for r in rows), default=0) * CHAR + 12))


def step_for(count: int, width: int) -> float:
    """The width of one column: the room shared out, never more than MAX_STEP."""
    return min(MAX_STEP, width / max(count, 1))


def spec(
    rows: Sequence[str], columns: Sequence[Column], squares: Sequence[Mapping[str, Any]], found: Iterable[Mark] = (), *, width: int = 900
) -> dict[str, Any]:
    """The Vega-Lite spec: the axis strips over the heatmap, row names included about `width` px wide; data inline.

    A click selects `pick` (fields `cell`, `row`) on a square, or `edge` (field `sig`) on a mark.
    """
    step = step_for(len(columns), width - label_width(rows))
    wide = round(step * len(columns), 1)
    axes = varying(columns) + (["GPU"] if len({c.gpu for c in columns}) > 1 else [])
    x = {"field": "x", "type": "quantitative", "scale": {"domain": [0, max(len(columns), 1)], "nice": False, "zero": True}, "axis": None}
    cols = [{"x": i, "cell": c.cell_id, "gpu": c.gpu, "versions": c.describe()} for i, c in enumerate(columns)]
    points = [
        {"row": m.row, "x": m.index if m.on_edge else m.index + 0.5, "kind": m.kind, "text": m.text, "sig": m.signature, "edge": m.on_edge}
        for m in found
    ]
    y = {
        "field": "row",
        "type": "nominal",
        "sort": list(rows),
        "title": None,
        "axis": {"labelLimit": LABEL_LIMIT, "labelFontSize": 11, "labelOverlap": False},
    }
    tooltip = [
        {"field": "row", "title": "scenario"},
        {"field": "word", "title": "outcome"},
        {"field": "versions", "title": "cell"},
        {"field": "cell", "title": "cell id"},
    ]
    square = {
        "data": {"name": "heat"},
        "transform": [{"lookup": "x", "from": {"data": {"name": "columns"}, "key": "x", "fields": ["cell", "gpu", "versions"]}}],
        "mark": {"type": "rect", "stroke": "#ffffff", "strokeWidth": 0.3 if step >= 4 else 0},
        "params": [{"name": PICK, "select": {"type": "point", "fields": ["cell", "row"], "on": "click"}}],
        "encoding": {
            "x": x,
            "x2": {"field": "x2"},
            "y": y,
            "color": {
                "field": "status",
                "type": "nominal",
                "title": "outcome",
                "scale": {"domain": list(COLOURS), "range": list(COLOURS.values())},
                "legend": {"orient": "bottom", "direction": "horizontal", "columns": 7, "symbolType": "square"},
            },
            "tooltip": tooltip,
        },
    }
    kinds = {"field": "kind", "type": "nominal", "scale": {"domain": list(KIND_COLOURS), "range": list(KIND_COLOURS.values())}}
    mark_tooltip = [{"field": "row", "title": "scenario"}, {"field": "text", "title": "attribution"}]
    edge_layer = {
        "data": {"name": "marks"},
        "transform": [{"filter": "datum.edge"}],
        "mark": {"type": "tick", "orient": "vertical", "thickness": 3, "bandSize": ROW - 2},
        "params": [{"name": EDGE, "select": {"type": "point", "fields": ["sig"], "on": "click"}}],
        "encoding": {"x": {**x}, "y": y, "color": {**kinds, "title": "changed", "legend": None}, "tooltip": mark_tooltip},
    }
    inside_layer = {
        "data": {"name": "marks"},
        "transform": [{"filter": "!datum.edge"}],
        "mark": {"type": "point", "shape": "triangle-right", "filled": True, "size": 30},
        "encoding": {"x": {**x}, "y": y, "color": {**kinds, "legend": None}, "tooltip": mark_tooltip},
    }
    heatmap = {
        "width": wide,
        "height": {"step": ROW},
        "layer": [square, edge_layer, inside_layer],
        "resolve": {"scale": {"color": "independent"}},  # a mark's kind is no status
    }
    strip_data = _strips(columns, axes, step)
    strips = [_strip_view(a, [d for d in strip_data if d["a"] == a], wide, x) for a in (SHORT.get(a, a) for a in axes)]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",  # an identifier only: nothing fetches it
        "datasets": {"heat": squares, "columns": cols, "marks": points, "strips": strip_data},
        "vconcat": [*strips, heatmap],  # one strip per axis that varies (each as tall as its versions need), the heatmap last
        "spacing": 4,
        "resolve": {"scale": {"color": "independent"}},  # the strips' shades are no status
        "config": {"view": {"stroke": None}, "axis": {"domain": False, "ticks": False}},
    }


def picked(selection: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(cell id, row, failure signature) that a click on the spec selected (Streamlit's `event.selection`); "" where none."""
    if not selection:
        return "", "", ""
    square = next(iter(selection.get(PICK) or []), None) or {}
    edge = next(iter(selection.get(EDGE) or []), None) or {}
    return str(square.get("cell") or ""), str(square.get("row") or ""), str(edge.get("sig") or "")


def layout(
    rows: Sequence[str], columns: Sequence[Column], words: Mapping[tuple[str, str], str], edges: Sequence[Edge], last: str, *, width: int
) -> dict[str, Any]:
    """The spec of `words` ((column key, row) -> word), the columns ordered with `last` varying fastest."""
    ordered = order(columns, last)
    index = {c.key: i for i, c in enumerate(ordered)}
    squares = [square(row, index[key], word) for (key, row), word in words.items() if word and key in index]
    return spec(rows, ordered, squares, marks(edges, ordered), width=width)


def from_rows(
    outcomes: Iterable[Mapping[str, Any]], group: Callable[[str], str] | None = None, quiet: Quiet = NO_QUIET
) -> tuple[list[str], list[Column], dict[tuple[str, str], str]]:
    """(row names, one column per cell, (cell id, row) -> folded word) from outcome rows, every run and machine pooled,
    each cell's versions as attribution reads them (`rows.cell_facts`); `quiet`: the tests a stand-in row passes (`analysis.quiet`)."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    versions: dict[str, tuple[tuple[str, str], ...]] = {}
    quiet_rows = by_group(quiet, group)
    for row in outcomes:
        cell = str(row["cell_id"])
        if cell not in versions:
            versions[cell] = _versions_of(row)
        name = str(row["scenario"])
        if name == STAND_IN:
            for held, n in quiet_rows.items():
                counts[(cell, held)][Status.PASS.value] += n
            continue
        counts[(cell, group(name) if group else name)][str(row["status"])] += 1
    return _worded(counts, versions)


def from_counts(
    counted: Iterable[tuple[Any, Any, Any, int]], outcomes: Iterable[Mapping[str, Any]]
) -> tuple[list[str], list[Column], dict[tuple[str, str], str]]:
    """`from_rows`' answer from (cell id, row, status, outcomes) counted in DuckDB
    (`queries.heat_counts_aside`); `outcomes`: the rows the answers read, in their order, for each
    cell's versions (its first row's) and the columns' order (the cells' first rows')."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for cell, name, status, n in counted:
        counts[(str(cell), str(name))][str(status)] += n
    # the rows come by cell: the first of each is where its id changes (grouped in C, not looked at one by one)
    versions: dict[str, tuple[tuple[str, str], ...]] = {}
    for cell, rows in groupby(outcomes, key=itemgetter("cell_id")):
        if str(cell) not in versions:  # its first rows only, were they ever apart
            versions[str(cell)] = _versions_of(next(rows))
    return _worded(counts, versions)


def _versions_of(row: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    points = cell_facts(row).points
    return tuple((a, points[a].value) for a in axis_sort(points))


def _worded(
    counts: Mapping[tuple[str, str], Counter[str]], versions: Mapping[str, tuple[tuple[str, str], ...]]
) -> tuple[list[str], list[Column], dict[tuple[str, str], str]]:
    # by cell, then by row: the same order whether a stand-in held the quiet tests or not
    column = {cell: k for k, cell in enumerate(versions)}
    words = {key: fold(counts[key]) for key in sorted(counts, key=lambda k: (column[k[0]], k[1]))}
    names = sorted({name for _, name in words})
    return names, [Column(c, c, v) for c, v in versions.items()], words
