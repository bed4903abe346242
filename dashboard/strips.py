"""The History page's pictures: a strip of one bar per run for each row and cell, and one test's
runs × cells as a chart. Pure: no Streamlit, tested on their own.

A strip is a small SVG (a data URL, drawn by an image column of st.dataframe): one bar per run of
the window, oldest left, coloured by the square's status; a triangle above a bar marks a change
there (red: it started failing, green: fixed, grey: it left the suite); a short grey bar is *not
collected*; no bar, a run that did not run it there. A file's bar is green with a red top as tall
as the share of its (matching) tests failing there (never under 40%, so one failing test shows),
and its triangle says that some of them changed there. Each colour is one path (50 rows × 20 cells
of strips are sent to the browser on every change of the list: a few hundred bytes each).

>>> bars([{"ord": 1, "status": "pass", "change": ""}, {"ord": 2, "status": "fail", "change": "regressed"}], [1, 2])
"<svg xmlns='http://www.w3.org/2000/svg' width='8' height='28'><path stroke='#43a047' stroke-width='3' d='M1.5 8v20'/>\
<path stroke='#e53935' stroke-width='3' d='M5.5 8v20'/><path fill='#b71c1c' d='M3.5 0h4l-2 6z'/></svg>"
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from dashboard import grouping
from harness.analysis.status import NOT_COLLECTED

#: Stronger than the heatmap's pastels: a bar is 3 px wide.
COLOURS = {
    "pass": "#43a047",
    "fail": "#e53935",
    "error": "#c62828",
    "crash": "#8e24aa",
    "oom": "#6a1b9a",
    "timeout": "#fb8c00",
    "inconclusive": "#64b5f6",
    "unresolvable": "#90a4ae",
    "install_failed": "#78909c",
    "not_applicable": "#cfd8dc",
    "xfail": "#bcaaa4",
    "xpass": "#80deea",
    NOT_COLLECTED: "#9e9e9e",
}
#: The marks of a change, by kind.
CHANGE_COLOURS = {"regressed": "#b71c1c", "fixed": "#1b5e20", "flaky": "#f9a825", "removed": "#424242", "not_run": "#424242"}
CHANGE_WORDS = {
    "regressed": "started failing",
    "fixed": "fixed",
    "flaky": "flaky (nothing changed)",
    "removed": "left the suite",
    "not_run": "not run (its file failed to collect)",
}
#: Pixels of one run's bar and the gap after it, and of a strip's height (a change's mark on top).
BAR, GAP, HEIGHT, MARK = 3, 1, 28, 6
_TOP = MARK + 2  # where a bar begins
_SHORT = (HEIGHT + MARK) // 2  # where a short bar (not collected) begins


class _Strip:
    """Bars and marks gathered by colour: one path each."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.bars: dict[str, list[str]] = defaultdict(list)
        self.marks: dict[str, list[str]] = defaultdict(list)

    def bar(self, i: int, colour: str, top: float = _TOP, bottom: float = HEIGHT) -> None:
        self.bars[colour].append(f"M{i * (BAR + GAP) + BAR / 2:g} {top:g}v{bottom - top:g}")

    def mark(self, i: int, colour: str) -> None:
        self.marks[colour].append(f"M{i * (BAR + GAP) - 0.5:g} 0h{BAR + 1}l-{(BAR + 1) / 2:g} {MARK}z")

    def svg(self) -> str:
        width = max(1, self.runs) * (BAR + GAP)
        paths = [f"<path stroke='{c}' stroke-width='{BAR}' d='{''.join(d)}'/>" for c, d in self.bars.items()]
        paths += [f"<path fill='{c}' d='{''.join(d)}'/>" for c, d in self.marks.items()]
        return f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{HEIGHT}'>{''.join(paths)}</svg>"


def bars(squares: Iterable[Mapping[str, Any]], ords: Sequence[int]) -> str:
    """One test's strip in one cell: `strips` squares (`ord`, `status`, `change`) over the runs `ords`."""
    at = {int(o): i for i, o in enumerate(ords)}
    strip = _Strip(len(ords))
    for square in squares:
        i = at.get(int(square["ord"]))
        if i is None:
            continue
        status = str(square["status"])
        strip.bar(i, COLOURS.get(status, COLOURS["not_applicable"]), top=_SHORT if status == NOT_COLLECTED else _TOP)
        if square.get("change"):
            strip.mark(i, CHANGE_COLOURS.get(str(square["change"]), "#212121"))
    return strip.svg()


def file_bars(squares: Iterable[Mapping[str, Any]], ords: Sequence[int], tests: int) -> str:
    """One file's strip in one cell: `strips(level="file")` squares (`failing`, `out`, `other`,
    `status`, `changed`) over the runs `ords`, for a row of `tests` tests (the share's denominator)."""
    at = {int(o): i for i, o in enumerate(ords)}
    strip = _Strip(len(ords))
    tests = max(1, tests)
    for square in squares:
        i = at.get(int(square["ord"]))
        if i is None:
            continue
        failing, out, other = int(square["failing"]), int(square["out"]), int(square["other"])
        rest = COLOURS["pass"] if failing + out + other < tests else COLOURS["not_applicable"]
        if out >= tests:
            strip.bar(i, COLOURS[NOT_COLLECTED], top=_SHORT)
        elif failing:
            split = _TOP + (HEIGHT - _TOP) * max(0.4, min(1.0, failing / tests))
            strip.bar(i, COLOURS.get(str(square["status"]), COLOURS["fail"]), bottom=split)
            if split < HEIGHT:
                strip.bar(i, rest, top=split)
        else:
            strip.bar(i, rest)
        if square["changed"]:
            strip.mark(i, "#212121")
    return strip.svg()


def data_url(svg: str) -> str:
    """An SVG as a data URL an image column draws (`#` and `%` escaped; the rest is safe as it is)."""
    return "data:image/svg+xml;utf8," + svg.replace("%", "%25").replace("#", "%23")


def table(
    listing: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], columns: Sequence[grouping.Column], runs: Sequence[Mapping[str, Any]]
) -> pd.DataFrame:
    """The list as st.dataframe shows it: `name`, the counts, `last change` (its run), then one strip
    per cell (its label) from `timeline.strips` rows."""
    ords = [int(r["ord"]) for r in runs]
    run_of = {int(r["ord"]): str(r["run_id"]) for r in runs}
    by_key = {(str(r["name"]), str(r["cell_id"])): r["squares"] for r in rows}
    files = listing["level"] == "file"
    blank = data_url(_Strip(len(ords)).svg())
    records = []
    for row in listing["rows"]:
        name = str(row["name"])
        record: dict[str, Any] = {
            "name": name,
            "tests": row["tests"],
            "changed": row["changed"],
            "changes": row["changes"],
            "last change": run_of.get(int(row["last_change"]), f"run {row['last_change']}") if row["last_change"] else "",
            "failing now": row["failing"] if listing["level"] == "file" else row["failing_cells"],
            "flaky": row["flaky"] if listing["level"] == "file" else bool(row["flaky"]),
            "gone": row["gone"],
        }
        for column in columns:
            found = by_key.get((name, column.cell_id))
            drawn = (file_bars(found, ords, int(row["tests"])) if files else bars(found, ords)) if found else ""
            record[column.label] = data_url(drawn) if drawn else blank
        records.append(record)
    return pd.DataFrame.from_records(
        records, columns=["name", "tests", "changed", "changes", "last change", "failing now", "flaky", "gone", *(c.label for c in columns)]
    )


def story_spec(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[grouping.Column],
    runs: Sequence[Mapping[str, Any]],
    changes: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One test's runs (x, oldest left) × cells (y) as a Vega-Lite chart: a square per run and cell
    coloured by status (`rows`: `timeline.strips`), a triangle on each change (its kind as `changes`, `timeline.story`, classes
    it: a flip with nothing changed is flaky), the run, cell, status, signature and change in the tooltip."""
    label = {c.cell_id: f"{c.label} · {c.varying}" for c in columns}
    when = {int(r["ord"]): r for r in runs}
    classed = {(str(c["cell_id"]), str(c["after_run"])): str(c["kind"]) for c in changes}
    values = []
    for s in (square | {"cell_id": row["cell_id"]} for row in rows for square in row["squares"]):
        run = when.get(int(s["ord"]))
        if run is None or str(s["cell_id"]) not in label:
            continue
        kind = classed.get((str(s["cell_id"]), str(run["run_id"])), str(s.get("change") or "")) if s.get("change") else ""
        values.append(
            {
                "run": f"{int(s['ord']):03d} {run['run_id']}",
                "run_id": str(run["run_id"]),
                "date": f"{run['started_at']:%Y-%m-%d %H:%M}",
                "cell": label[str(s["cell_id"])],
                "cell_id": str(s["cell_id"]),
                "status": str(s["status"]),
                "signature": str(s.get("signature") or s.get("reason") or ""),
                "repeats": int(s.get("repeats") or 1),
                "change": CHANGE_WORDS.get(kind, ""),
            }
        )
    statuses = [s for s in COLOURS if any(v["status"] == s for v in values)]
    kinds = [k for k in CHANGE_COLOURS if any(v["change"] == CHANGE_WORDS[k] for v in values)]
    order = [f"{int(r['ord']):03d} {r['run_id']}" for r in runs]
    x = {
        "field": "run",
        "type": "ordinal",
        "sort": order,
        "title": "run (oldest left)",
        "axis": {"labelExpr": "substring(datum.value, 4)", "labelAngle": -90, "labelLimit": 120, "labelOverlap": False},
    }
    y = {"field": "cell", "type": "nominal", "sort": [label[c.cell_id] for c in columns], "title": None, "axis": {"labelLimit": 320}}
    tooltip = [{"field": f} for f in ("run_id", "date", "cell_id", "status", "signature", "repeats", "change")]
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "data": {"values": values},
        "width": {"step": 22},
        "height": {"step": 22},
        "layer": [
            {
                "mark": {"type": "rect", "stroke": "white", "strokeWidth": 1},
                "encoding": {
                    "x": x,
                    "y": y,
                    "color": {
                        "field": "status",
                        "type": "nominal",
                        "scale": {"domain": statuses, "range": [COLOURS[s] for s in statuses]},
                        "legend": {"orient": "right", "title": "status"},
                    },
                    "tooltip": tooltip,
                },
            },
            {
                "transform": [{"filter": "datum.change != ''"}],
                "mark": {
                    "type": "point",
                    "shape": "triangle-down",
                    "filled": True,
                    "size": 70,
                    "yOffset": -4,
                    "stroke": "white",
                    "strokeWidth": 1,
                },
                "encoding": {
                    "x": x,
                    "y": y,
                    "fill": {
                        "field": "change",
                        "type": "nominal",
                        "scale": {"domain": [CHANGE_WORDS[k] for k in kinds], "range": [CHANGE_COLOURS[k] for k in kinds]},
                        "legend": {
                            "orient": "right",
                            "title": "change",
                            "symbolType": "triangle-down",
                            "symbolSize": 100,
                            "symbolStrokeWidth": 0,
                        }
                        if kinds
                        else None,
                    },
                    "tooltip": tooltip,
                },
            },
        ],
        "resolve": {"scale": {"color": "independent", "fill": "independent"}},
        "config": {"view": {"stroke": None}},
    }


def changes_table(
    changes: Sequence[Mapping[str, Any]], columns: Sequence[grouping.Column], runs: Sequence[Mapping[str, Any]]
) -> pd.DataFrame:
    """One test's changes (`timeline.story`), newest first: when, where, what, and why."""
    label = {c.cell_id: c.label for c in columns}
    when = {str(r["run_id"]): f"{r['started_at']:%Y-%m-%d}" for r in runs}
    records = []
    for c in changes:
        cause = f"{c['verdict']}: {c['cause']}" if c.get("cause") else ""
        if not cause and c["kind"] in ("regressed", "fixed"):
            cause = "not explained yet (`harness explain` narrows it)"
        records.append(
            {
                "run": f"{c['after_run']} ({when.get(str(c['after_run']), '')})",
                "cell": f"{label.get(str(c['cell_id']), '?')} · {c['cell_id']}",
                "change": CHANGE_WORDS.get(str(c["kind"]), str(c["kind"])),
                "from → to": f"{c['before'] or '—'} → {c['after']}",
                "signature": str(c["signature"]),
                "cause": cause,
                "moved": "; ".join(c.get("moved") or ()) or ("nothing the results file records" if c["kind"] == "flaky" else ""),
                "since": str(c["before_run"]),
            }
        )
    return pd.DataFrame.from_records(records, columns=["run", "cell", "change", "from → to", "cause", "moved", "signature", "since"])


def legend_html() -> str:
    """The strips' key, one line of small coloured bars."""
    items = [("pass", COLOURS["pass"]), ("fail / error", COLOURS["fail"]), ("crash / oom", COLOURS["crash"])]
    items += [("timeout", COLOURS["timeout"]), ("says nothing (n/a, skip, xfail, env)", COLOURS["not_applicable"])]
    items += [("not collected (short)", COLOURS[NOT_COLLECTED])]
    marks = [("▼ started failing", CHANGE_COLOURS["regressed"]), ("▼ fixed", CHANGE_COLOURS["fixed"]), ("▼ left the suite", "#424242")]
    bar = '<span style="display:inline-block;width:4px;height:12px;margin:0 4px 0 10px;background:{}"></span>{}'
    out = "".join(bar.format(colour, word) for word, colour in items)
    out += "".join(f'<span style="color:{colour};margin-left:10px">{word}</span>' for word, colour in marks)
    return f'<div style="font-size:0.8rem;color:#555">{out}</div>'
