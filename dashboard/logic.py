"""What the pages compute from query results: pure functions, no Streamlit, tested on their own.

Statuses, versions and answers come from `harness.analysis` (the one home the CLI uses too);
this module only shapes them for the pages.

>>> fold({"pass": 2, "error": 1})
'error 1/3 mixed'
>>> sort_values(["5.10.4", "5.6.2", "git+https://x@main"])
['5.6.2', '5.10.4', 'git+https://x@main']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard import grouping
from harness.analysis import heatmap
from harness.analysis.attribution import MachineDifference, Transition
from harness.analysis.bisect import Verdict, repeat_verdict, stored_result
from harness.analysis.grouping import inferred_source
from harness.analysis.rows import AXIS_ORDER, axis_sort, distance
from harness.analysis.status import SEVERITY, fold, status_of
from harness.analysis.versions import sort_values, version_key

__all__ = ["SEVERITY", "fold", "sort_values", "status_of", "version_key"]

#: Background colours, one per status (and one for mixed cells: some repeats passed): the heatmap's, shared with `harness publish`.
COLOURS = heatmap.COLOURS
KIND_COLOURS = {"introduced": "#d32f2f", "fixed": "#388e3c", "flaky": "#f9a825"}


def axis_order(axes: Iterable[str]) -> list[str]:
    """The five axes in reading order, then any other axis by name."""
    return axis_sort(axes)


def colour_of(word: str) -> str:
    """CSS for a small Styler (cell and compare tables); the big heatmap uses `tag_colours`."""
    return f"background-color: {COLOURS.get(status_of(word), '#ffffff')}" if word else ""


def tag_colours(words: Iterable[str]) -> tuple[list[str], list[str]]:
    """(options, colours) for st.column_config.MultiselectColumn: each distinct word, its status colour.

    Colouring through the column configuration costs nothing on the server; a pandas Styler
    over 2,000 cells × 14 scenarios costs over a second to serialise.
    """
    options = sorted(set(words) - {""}, key=lambda w: (SEVERITY.index(w.split()[0]) if w.split()[0] in SEVERITY else 99, w))
    return options, [COLOURS.get(status_of(w), "#ffffff") for w in options]


@dataclass(frozen=True)
class Matrix:
    """The heatmap's table: one row per cell (and GPU), axis columns, then one column per scenario."""

    frame: pd.DataFrame  # index: 0..n-1; columns: cell_id, [gpu], axes..., scenarios...
    axes: tuple[str, ...]
    scenarios: tuple[str, ...]
    totals: dict[str, int]  # status -> outcomes

    @property
    def empty(self) -> bool:
        return self.frame.empty


def build_matrix(counts: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]], *, by_gpu: bool = False) -> Matrix:
    """From `Store.dashboard_matrix` rows and `Store.dashboard_cells` rows (same filters).

    Rows are ordered along the axes (oldest versions first), like the matrix file reads.
    """
    axes_of: dict[str, dict[str, str]] = {}
    for cell in cells:
        versions = {a: str(v) for a, v in (cell.get("versions") or {}).items()}
        versions.update({a: str(cell[a]) for a in AXIS_ORDER if cell.get(a)})
        axes_of[str(cell["cell_id"])] = versions
    axes = tuple(axis_order({a for v in axes_of.values() for a in v}))
    scenarios = tuple(sorted({str(r["scenario"]) for r in counts}))
    words: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for row in counts:
        statuses = {s.value: int(row.get(s) or 0) for s in SEVERITY}
        for s, n in statuses.items():
            totals[s] += n
        key = (str(row["cell_id"]), str(row.get("gpu", "")) if by_gpu else "")
        words[key][str(row["scenario"])] = fold(statuses)
    keys = sorted(words, key=lambda k: (tuple(version_key(axes_of.get(k[0], {}).get(a)) for a in axes), k))
    records = []
    for cell_id, gpu in keys:
        record: dict[str, Any] = {"cell_id": cell_id}
        if by_gpu:
            record["gpu"] = gpu
        record.update({a: axes_of.get(cell_id, {}).get(a, "") for a in axes})
        record.update({s: words[(cell_id, gpu)].get(s, "") for s in scenarios})
        records.append(record)
    columns = ["cell_id", *(["gpu"] if by_gpu else []), *axes, *scenarios]
    return Matrix(pd.DataFrame.from_records(records, columns=columns), axes, scenarios, {s: n for s, n in totals.items() if n})


def selected_cell(matrix: Matrix, selection: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(cell_id, scenario or "") for the heatmap's selected cell or row, else None.

    `selection` is st.dataframe's selection state: {"rows": [...], "cells": [[row, column], ...]}.
    """
    if not selection or matrix.empty:
        return None
    for row, column in selection.get("cells") or []:
        if 0 <= int(row) < len(matrix.frame):
            cell_id = str(matrix.frame.iloc[int(row)]["cell_id"])
            return cell_id, str(column) if column in matrix.scenarios else ""
    for row in selection.get("rows") or []:
        if 0 <= int(row) < len(matrix.frame):
            return str(matrix.frame.iloc[int(row)]["cell_id"]), ""
    return None


#: The heatmap's width in pixels, row names included: with the sidebar open, the page's column is ~980 px at 1440 px.
HEAT_WIDTH = 940


#: Every status's name, once: `Status.X.value` in a loop over 30,000 rows costs more than the rest of the loop.
_STATUS_NAMES: tuple[str, ...] = tuple(s.value for s in SEVERITY)


@dataclass(frozen=True)
class Heat:
    """The heatmap's data: one column per cell (and GPU), every (column key, scenario)'s folded word, the totals."""

    columns: tuple[heatmap.Column, ...]
    words: dict[tuple[str, str], str]
    scenarios: tuple[str, ...]
    totals: dict[str, int]  # status -> outcomes

    @property
    def empty(self) -> bool:
        return not self.words


def heat_data(counts: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]], *, by_gpu: bool = False) -> Heat:
    """From `pages.matrix_counts` and `pages.cell_summaries` rows (same filters), folded as `build_matrix` folds
    them, without the table: 2,202 cells × 14 scenarios in a tenth of its time."""
    axes_of: dict[str, tuple[tuple[str, str], ...]] = {}
    for cell in cells:
        versions = {a: str(v) for a, v in (cell.get("versions") or {}).items()}
        versions.update({a: str(cell[a]) for a in AXIS_ORDER if cell.get(a)})
        axes_of[str(cell["cell_id"])] = tuple((a, versions[a]) for a in axis_order(versions))
    words: dict[tuple[str, str], str] = {}
    totals: dict[str, int] = defaultdict(int)
    columns: dict[str, heatmap.Column] = {}
    for row in counts:
        statuses = {s: n for s in _STATUS_NAMES if (n := row.get(s))}
        for status, n in statuses.items():
            totals[status] += n
        cell_id, gpu = str(row["cell_id"]), (str(row.get("gpu") or "") if by_gpu else "")
        key = f"{cell_id} @ {gpu}" if by_gpu else cell_id
        if key not in columns:
            columns[key] = heatmap.Column(key, cell_id, axes_of.get(cell_id, ()), gpu)
        words[(key, str(row["scenario"]))] = fold(statuses)
    scenarios = tuple(sorted({scenario for _, scenario in words}))
    return Heat(tuple(columns.values()), words, scenarios, {s: n for s, n in totals.items() if n})


def stored_edges(transitions: Sequence[Mapping[str, Any]], cells: set[str], group: Any = None) -> list[heatmap.Edge]:
    """The introduced/fixed transitions whose new side is one of `cells` (the filtered ones)."""
    return [e for e in heatmap.edges_of(transitions, group) if e.after_cell in cells]


def edges_within(edges: Sequence[tuple[heatmap.Edge, int]], cells: set[str]) -> list[tuple[heatmap.Edge, int]]:
    """`stored_edges` of `common.edges_if_cheap`'s edges (each with how many transitions give it)."""
    return [(e, n) for e, n in edges if e.after_cell in cells]


def chart_selection(event: Any) -> Mapping[str, Any] | None:
    """A chart's selection state: the event is a VegaLiteState in a server and a plain dict in AppTest."""
    return event.get("selection") if event else None


def heat_spec(heat: Heat, edges: Sequence[heatmap.Edge], last: str) -> dict[str, Any]:
    """The Matrix page's heatmap: every scenario × every column, ordered with `last` varying fastest."""
    return lighter(heatmap.layout(list(heat.scenarios), heat.columns, heat.words, edges, last, width=HEAT_WIDTH))


def lighter(spec: dict[str, Any]) -> dict[str, Any]:
    """`heatmap.spec` as the dashboard sends it: each axis strip without its text layer that has nothing
    to write (`t`, the versions written across their runs, or `r`, written up them: a strip usually
    needs one of the two). The same picture, in fewer marks for Vega to build in a new tab; the squares,
    the ticks and the triangles (and their clicks) are untouched. `harness publish` draws the spec whole."""
    strips = spec.get("datasets", {}).get("strips", [])
    views = []
    for view in spec.get("vconcat", []):
        axis = next((t["filter"].get("equal") for t in view.get("transform", []) if isinstance(t.get("filter"), dict)), None)
        if view.get("data", {}).get("name") != "strips" or axis is None:
            views.append(view)
            continue
        written = {f for d in strips if d["a"] == axis for f in ("t", "r") if d[f]}
        layers = [layer for layer in view["layer"] if layer["encoding"].get("text", {}).get("field", "") in ("", *written)]
        views.append({**view, "layer": layers})
    return {**spec, "vconcat": views}


# -- failures --------------------------------------------------------------------------------
def answer_text(row: Mapping[str, Any]) -> str:
    """A stored transition group's answer without its verb: `accelerate 1.14.0 (after 1.13.0)`, or
    `between accelerate 1.13.0 (fails) and 1.15.0 (passes); not built: 1.14.0` (the CLI's words,
    from the transition's own parts)."""
    t = Transition.from_dict(row)
    return f"{t.axis} {t.where()}" if t.exact else f"between {t.axis} {t.where()}; {t.gaps()}"


def machine_text(row: Mapping[str, Any]) -> str:
    """A stored machine difference's answer, without the axes it held: `fails on 1x NVIDIA H200 and
    passes on cpu with the same versions: …` (`attributed.transition_answer_groups` rows; a file
    written before `other_machine` was stored shows its whole stored description)."""
    if not row.get("other_machine"):
        return str(row.get("description") or "")
    return MachineDifference(
        scenario=str(row.get("scenario") or ""),
        signature=str(row.get("signature") or ""),
        fails_on=str(row.get("machine") or ""),
        passes_on=str(row["other_machine"]),
        axis=str(row.get("axis") or ""),
        fails_with=str(row.get("before") or ""),
        passes_with=str(row.get("after") or ""),
        held=(),
    ).headline()


def transition_columns(summary: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """signature -> {"introduced": …, "fixed": …, "machine": …, "flaky": "3 cell(s)"} from
    `attributed.transition_answer_groups` rows, in the words the CLI prints; the machine each holds on
    is named when the file holds more than one."""
    machines = {str(r.get("machine") or "") for r in summary if r.get("kind") in ("introduced", "fixed")}
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    inferred = _inferred_lines(summary)
    for i, row in enumerate(summary):
        kind = str(row["kind"])
        if kind == "flaky":
            out[row["signature"]]["flaky"].append(f"{row['lines']} cell(s)")
        elif kind == "machine":
            out[row["signature"]]["machine"].append(machine_text(row))
        elif i not in inferred.get("ranges", {}):
            where = f" on {row['machine']}" if len(machines) > 1 and row.get("machine") else ""
            lines = f" ({row['lines']} lines)" if int(row.get("lines") or 1) > 1 else ""
            more = inferred.get("more", {}).get(i, 0)
            also = f"; inferred on {more} more line(s), not built there" if more else ""
            out[row["signature"]][kind].append(answer_text(row) + where + lines + also)
    return {sig: {kind: "; ".join(dict.fromkeys(parts)) for kind, parts in kinds.items()} for sig, kinds in out.items()}


def _inferred_lines(summary: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, int]]:
    """Ranges (row indices) printed as inferred from an exact answer, the summary's rule
    (`analysis.grouping`) over stored answer groups, which keep no held axes: {"ranges": {range:
    its exact row}, "more": {exact row: lines inferred from it}}."""
    moves = [(i, Transition.from_dict(r), r) for i, r in enumerate(summary) if r.get("kind") in ("introduced", "fixed")]
    # the exact answers of each failure, axis and machine, looked up once per range (a suite has thousands)
    exact: dict[tuple[str, str, str, str], list[tuple[int, Transition]]] = defaultdict(list)
    for i, t, r in moves:
        if t.exact:
            exact[(str(r["signature"]), t.kind, t.axis, t.machine)].append((i, t))
    found: dict[str, dict[int, int]] = {"ranges": {}, "more": defaultdict(int)}
    for i, span, row in moves:
        family = exact.get((str(row["signature"]), span.kind, span.axis, span.machine), [])
        source = inferred_source(span, [t for _, t in family]) if family else None
        if source is not None:
            j = next(j for j, t in family if t is source)
            found["ranges"][i] = j
            found["more"][j] += int(row.get("lines") or 1)
    return found


FAILURE_COLUMNS = [
    "signature",
    "blames",
    "status",
    "cells",
    "outcomes",
    "introduced in",
    "fixed in",
    "machine difference",
    "flaky",
    "scenarios",
    "runs",
    "last seen",
]


def failures_frame(failures: Sequence[Mapping[str, Any]], summary: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    columns = transition_columns(summary)
    records = []
    for row in failures:
        sig = str(row["signature"])
        found = columns.get(sig, {})
        records.append(
            {
                "signature": sig,
                "blames": row.get("blamed_library") or "",
                "status": ", ".join(row.get("statuses") or []),
                "cells": int(row["cells"]),
                "outcomes": int(row["outcomes"]),
                "introduced in": found.get("introduced", ""),
                "fixed in": found.get("fixed", ""),
                "machine difference": found.get("machine", ""),
                "flaky": found.get("flaky", ""),
                "scenarios": ", ".join(row.get("scenarios") or []),
                "runs": int(row["runs"]),
                "last seen": row.get("last_seen"),
            }
        )
    return pd.DataFrame.from_records(records, columns=FAILURE_COLUMNS)


def timeline(transitions: Sequence[Mapping[str, Any]], known: Mapping[str, Sequence[str]]) -> dict[str, pd.DataFrame]:
    """axis -> marks for the version timeline of one signature: where it was introduced or fixed.

    One row per (axis, kind, before, after, exact): an exact answer is a point at `after`; a
    range spans `before`..`after` (`order_from`..`order`), so the chart never shows a range as
    a release. `order` is a version's place among the axis's known versions.
    """
    marks: dict[tuple[str, str, str, str, bool], dict[str, Any]] = {}
    for row in transitions:
        if row.get("kind") not in ("introduced", "fixed") or not row.get("axis"):
            continue
        t = Transition.from_dict(row)
        key = (t.axis, t.kind, t.before, t.after, t.exact)
        mark = marks.setdefault(
            key,
            {"axis": t.axis, "kind": t.kind, "before": t.before, "version": t.after, "exact": t.exact, "lines": 0, "scenarios": set()},
        )
        mark["lines"] += 1
        mark["scenarios"].add(t.scenario)
        mark["answer"] = t.headline()
    out: dict[str, pd.DataFrame] = {}
    for axis in axis_order({k[0] for k in marks}):
        versions = sort_values([*known.get(axis, []), *(v for k, m in marks.items() if k[0] == axis for v in (m["before"], m["version"]))])
        rows = []
        for mark_key, m in sorted(marks.items()):
            if mark_key[0] != axis:
                continue
            rows.append(
                {
                    "axis": axis,
                    "kind": m["kind"],
                    "version": m["version"],
                    "before": m["before"],
                    "exact": m["exact"],
                    "order": versions.index(m["version"]),
                    "order_from": versions.index(m["before"]) if m["before"] in versions else versions.index(m["version"]),
                    "lines": m["lines"],
                    "answer": m["answer"],
                    "scenarios": grouping.name_many(m["scenarios"]),  # test ids: counted by group
                }
            )
        frame = pd.DataFrame(rows)
        frame.attrs["versions"] = versions
        out[axis] = frame
    return out


@dataclass(frozen=True)
class Bisection:
    run_id: str
    scenario: str
    axis: str
    probes: pd.DataFrame  # version, status, verdict, signature, cell_id, in version order
    answer: str  # "broken in accelerate 1.14.0; last good 1.13.0", as `harness bisect` says it


def bisections(rows: Sequence[Mapping[str, Any]]) -> list[Bisection]:
    """Group `pages.bisection_probes_by_axis` rows by run, each run's probes in version order.

    Each probe is judged as `harness bisect` judged it (`analysis.bisect.repeat_verdict`: an
    install_failed, unresolvable, inconclusive, not_applicable, xfail or xpass probe is a skip,
    never bad), and the answer is the search's over the judged probes (`stored_result`), in the
    command's words. The axis, the probe's value on it and its commit are stored fields the read
    returns, never pieces of the run id.
    """
    by_run: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_run[str(row["run_id"])].append(row)
    found = []
    for run_id, probes in sorted(by_run.items()):
        axis = str(probes[0].get("axis") or "")
        by_value: dict[str, dict[str, Any]] = {}
        for row in probes:
            value, commit = str(row.get("value") or "") if axis else str(row["cell_id"]), str(row.get("commit") or "")
            label = f"{value}@{commit[:12]}" if commit else value
            probe = by_value.setdefault(label, {"version": label, "statuses": [], "signature": "", "cell_id": row["cell_id"]})
            probe["statuses"].append(str(row["status"]))
            probe["signature"] = probe["signature"] or str(row.get("signature") or "")
        ordered = sorted(by_value.values(), key=lambda p: version_key(p["version"]))
        for probe in ordered:
            probe["status"] = fold({s: probe["statuses"].count(s) for s in set(probe["statuses"])})
            probe["verdict"] = repeat_verdict(probe["statuses"])
        frame = pd.DataFrame(
            [{**{k: p[k] for k in ("version", "status", "signature", "cell_id")}, "verdict": p["verdict"].value} for p in ordered],
            columns=["version", "status", "verdict", "signature", "cell_id"],
        )
        answer = _bisection_answer(axis or "?", [p["version"] for p in ordered], [p["verdict"] for p in ordered])
        found.append(Bisection(run_id, str(probes[0]["scenario"]), axis, frame, answer))
    return found


def _bisection_answer(axis: str, versions: Sequence[str], verdicts: Sequence[Verdict]) -> str:
    """`harness bisect`'s closing line over stored probes (bisection.describe's words), or why there is none."""
    stored = stored_result(versions, verdicts)
    if stored is None:
        judged = [v for v in verdicts if v != Verdict.SKIP]
        if not judged:
            return "no probe says anything (every one was skipped)"
        return f"no change of verdict among the probes ({judged[0].value})"
    result, fix = stored
    line = (
        f"fixed in {axis} {result.last_good}; still failing in {result.first_bad}"
        if fix
        else f"broken in {axis} {result.first_bad}; last good {result.last_good}"
    )
    if result.undecided:
        line += f"; undecided (could not build or run): {', '.join(result.undecided)}"
    return line


# -- one cell, two cells -----------------------------------------------------------------------
def scenario_table(outcomes: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per scenario of a cell: folded status, signature, repeats, runs, seconds (median)."""
    grouped: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in outcomes:
        grouped[str(row["scenario"])].append(row)
    records = []
    for scenario, rows in sorted(grouped.items()):
        counts: dict[str, int] = defaultdict(int)
        for r in rows:
            counts[str(r["status"])] += 1
        signatures = sorted({str(r.get("signature") or "") for r in rows} - {""})
        seconds = sorted(float(r.get("seconds") or 0) for r in rows)
        records.append(
            {
                "scenario": scenario,
                "status": fold(counts),
                "signature": "; ".join(signatures),
                "blames": ", ".join(sorted({str(r.get("blamed_library") or "") for r in rows} - {""})),
                "repeats": len(rows),
                "runs": ", ".join(sorted({str(r["run_id"]) for r in rows})),
                "seconds": seconds[len(seconds) // 2] if seconds else None,
            }
        )
    return pd.DataFrame.from_records(records, columns=["scenario", "status", "signature", "blames", "repeats", "runs", "seconds"])


def metrics_table(outcomes: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Scenario × metric (parity numbers, peak memory, seconds): the last run's value of each."""
    latest: dict[tuple[str, str], Any] = {}
    for row in sorted(outcomes, key=lambda r: str(r.get("started_at") or "")):
        for name, value in (row.get("metrics") or {}).items():
            latest[(str(row["scenario"]), str(name))] = value
    if not latest:
        return pd.DataFrame()
    frame = pd.Series(latest).unstack()
    return frame.astype(str).replace("nan", "").reset_index(names="scenario")


def freeze_diff(a: Mapping[str, str], b: Mapping[str, str], axes: Sequence[str]) -> pd.DataFrame:
    """Packages whose version differs between two freezes (axes first), and whether each is an axis."""
    names = set(a) | set(b)
    order = [*[x for x in axes if x in names], *sorted(names - set(axes))]
    rows = [{"package": n, "A": a.get(n, "—"), "B": b.get(n, "—"), "axis": n in axes, "differs": a.get(n) != b.get(n)} for n in order]
    return pd.DataFrame.from_records(rows, columns=["package", "A", "B", "axis", "differs"])


def outcome_diff(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per scenario: each side's folded status and signature, and whether they differ."""
    left, right = scenario_table(a).set_index("scenario"), scenario_table(b).set_index("scenario")
    rows = []
    for scenario in sorted(set(left.index) | set(right.index)):
        sa = left.loc[scenario] if scenario in left.index else None
        sb = right.loc[scenario] if scenario in right.index else None
        status_a = str(sa["status"]) if sa is not None else "—"
        status_b = str(sb["status"]) if sb is not None else "—"
        sig_a = str(sa["signature"]) if sa is not None else ""
        sig_b = str(sb["signature"]) if sb is not None else ""
        rows.append(
            {
                "scenario": scenario,
                "A": status_a,
                "B": status_b,
                "differs": status_a != status_b or sig_a != sig_b,
                "A signature": sig_a,
                "B signature": sig_b,
            }
        )
    return pd.DataFrame.from_records(rows, columns=["scenario", "A", "B", "differs", "A signature", "B signature"])


def nearest_cell(cell_id: str, cells: Sequence[Mapping[str, Any]]) -> str:
    """The cell that differs from `cell_id` in the fewest axes (a natural thing to compare with)."""

    def axes(c: Mapping[str, Any]) -> dict[str, str]:
        return {a: str(c.get(a) or "") for a in AXIS_ORDER}

    mine = next((axes(c) for c in cells if c["cell_id"] == cell_id), None)
    others = [c for c in cells if c["cell_id"] != cell_id]
    if mine is None or not others:
        return others[0]["cell_id"] if others else cell_id
    return str(min(others, key=lambda c: (distance(mine, axes(c)), str(c["cell_id"])))["cell_id"])
