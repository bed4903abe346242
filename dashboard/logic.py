"""What the pages compute from query results: pure functions, no Streamlit, tested on their own.

>>> fold({"pass": 2, "error": 1})
'error 1/3 mixed'
>>> sorted(["5.10.4", "5.6.2", "git+https://x@main"], key=version_key)
['5.6.2', '5.10.4', 'git+https://x@main']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any

import pandas as pd
from packaging.version import InvalidVersion, Version

from harness.store import AXIS_COLUMNS

#: Statuses from worst to mildest, for folding repeats: the worst failure names a mixed cell.
SEVERITY = ("crash", "oom", "error", "fail", "timeout", "install_failed", "unresolvable", "not_applicable", "pass")
FAILURES = frozenset({"fail", "error", "crash", "timeout", "oom"})

#: Background colours of the heatmap, one per status (and one for mixed cells: some repeats passed).
COLOURS = {
    "pass": "#a5d6a7",
    "fail": "#ef9a9a",
    "error": "#e57373",
    "crash": "#ce93d8",
    "oom": "#ba68c8",
    "timeout": "#ffcc80",
    "unresolvable": "#cfd8dc",
    "install_failed": "#b0bec5",
    "not_applicable": "#eceff1",
    "mixed": "#fff176",
}
KIND_COLOURS = {"introduced": "#d32f2f", "fixed": "#388e3c", "flaky": "#f9a825"}


@lru_cache(maxsize=65536)
def version_key(value: str | None) -> tuple[Any, ...]:
    """Releases by `packaging.version.Version`, then anything else (git, path, inherit) by text."""
    if value is None:
        return (2, "")
    try:
        return (0, Version(value), "")
    except InvalidVersion:
        return (1, Version("0"), value)


def sort_versions(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=version_key)


def axis_order(axes: Iterable[str]) -> list[str]:
    """The five axes in reading order, then any other axis by name."""
    return sorted(set(axes), key=lambda a: (AXIS_COLUMNS.index(a) if a in AXIS_COLUMNS else len(AXIS_COLUMNS), a))


# -- the matrix ------------------------------------------------------------------------------
def fold(counts: Mapping[str, int]) -> str:
    """One word for the repeats (over runs) of a scenario in a cell.

    Not-applicable outcomes beside applicable ones (a GPU scenario on a CPU run and on a GPU
    run) say nothing and are dropped. A mixture names its worst status and how often it
    happened; with passes among them it is `mixed`: flaky repeats, or runs that disagree
    (two GPUs, say: "one row per cell and GPU" on the Matrix page tells which).

    >>> fold({"pass": 3}), fold({"not_applicable": 1, "pass": 1}), fold({"error": 2, "fail": 1})
    ('pass', 'pass', 'error 2/3')
    """
    present = {s: n for s, n in counts.items() if n}
    if len(present) > 1:
        present.pop("not_applicable", None)
    if not present:
        return ""
    if len(present) == 1:
        return next(iter(present))
    total = sum(present.values())
    worst = next(s for s in SEVERITY if s in present)
    word = f"{worst} {present[worst]}/{total}"
    return f"{word} mixed" if "pass" in present else word


def status_of(word: str) -> str:
    """The colour key of a folded word: its status, or `mixed`."""
    return "mixed" if word.endswith("mixed") else (word.split()[0] if word else "")


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
        versions.update({a: str(cell[a]) for a in AXIS_COLUMNS if cell.get(a)})
        axes_of[str(cell["cell_id"])] = versions
    axes = tuple(axis_order({a for v in axes_of.values() for a in v}))
    scenarios = tuple(sorted({str(r["scenario"]) for r in counts}))
    words: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    totals: dict[str, int] = defaultdict(int)
    for row in counts:
        statuses = {s: int(row.get(s) or 0) for s in SEVERITY}
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


# -- failures --------------------------------------------------------------------------------
def transition_columns(summary: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """signature -> {"introduced": "accelerate 1.13.0; transformers 5.6.0", "fixed": ..., "flaky": "3 cells"}
    from `Store.dashboard_transition_summary` rows."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for row in summary:
        kind = str(row["kind"])
        if kind == "flaky":
            out[row["signature"]]["flaky"].append(f"{row['transitions']} cell(s)")
            continue
        versions = ", ".join(sort_versions(str(v) for v in row.get("versions") or [] if v))
        out[row["signature"]][kind].append(f"{row['axis']} {versions}")
    return {sig: {kind: "; ".join(parts) for kind, parts in kinds.items()} for sig, kinds in out.items()}


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
                "flaky": found.get("flaky", ""),
                "scenarios": ", ".join(row.get("scenarios") or []),
                "runs": int(row["runs"]),
                "last seen": row.get("last_seen"),
            }
        )
    return pd.DataFrame.from_records(
        records,
        columns=[
            "signature",
            "blames",
            "status",
            "cells",
            "outcomes",
            "introduced in",
            "fixed in",
            "flaky",
            "scenarios",
            "runs",
            "last seen",
        ],
    )


def timeline(transitions: Sequence[Mapping[str, Any]], known: Mapping[str, Sequence[str]]) -> dict[str, pd.DataFrame]:
    """axis -> points for the version timeline of one signature: where it was introduced or fixed.

    One row per (axis, kind, version) with how many lines (held versions) saw it and the
    range it may lie in; `order` is the version's place among the axis's known versions.
    """
    points: dict[tuple[str, str, str], dict[str, Any]] = {}
    for t in transitions:
        if t.get("kind") == "flaky" or not t.get("axis"):
            continue
        key = (str(t["axis"]), str(t["kind"]), str(t["after"]))
        point = points.setdefault(key, {"axis": key[0], "kind": key[1], "version": key[2], "lines": 0, "from": set(), "scenarios": set()})
        point["lines"] += 1
        point["from"].add(str(t.get("before") or ""))
        point["scenarios"].add(str(t.get("scenario") or ""))
    out: dict[str, pd.DataFrame] = {}
    for axis in axis_order({k[0] for k in points}):
        versions = sort_versions([*known.get(axis, []), *(p["version"] for k, p in points.items() if k[0] == axis)])
        rows = []
        for (a, _, _), p in sorted(points.items()):
            if a != axis:
                continue
            rows.append(
                {
                    "axis": axis,
                    "kind": p["kind"],
                    "version": p["version"],
                    "order": versions.index(p["version"]),
                    "lines": p["lines"],
                    "after": ", ".join(sort_versions(v for v in p["from"] if v)),
                    "scenarios": ", ".join(sorted(p["scenarios"])),
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
    probes: pd.DataFrame  # version, status, signature, cell_id, in version order
    answer: str  # "changes between 1.13.0 (error) and 1.14.0 (pass)"


def bisections(rows: Sequence[Mapping[str, Any]]) -> list[Bisection]:
    """Group `Store.dashboard_bisections` rows by run and put each run's probes in version order."""
    by_run: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        by_run[str(row["run_id"])].append(row)
    found = []
    for run_id, probes in sorted(by_run.items()):
        scenario = str(probes[0]["scenario"])
        prefix = f"bisect-{scenario}-"
        axis = run_id[len(prefix) :] if run_id.startswith(prefix) else ""
        by_value: dict[str, dict[str, Any]] = {}
        for row in probes:
            versions = row.get("versions") or {}
            commit = (row.get("git_commits") or {}).get(axis, "")
            value = str(row.get(axis) or versions.get(axis) or "") if axis else str(row["cell_id"])
            label = f"{value.rsplit('@', 1)[0].rsplit('/', 1)[-1]}@{commit[:12]}" if commit else value
            probe = by_value.setdefault(label, {"version": label, "statuses": [], "signature": "", "cell_id": row["cell_id"]})
            probe["statuses"].append(str(row["status"]))
            probe["signature"] = probe["signature"] or str(row.get("signature") or "")
        ordered = sorted(by_value.values(), key=lambda p: version_key(p["version"]))
        for probe in ordered:
            probe["status"] = fold({s: probe["statuses"].count(s) for s in set(probe["statuses"])})
        answer = ""
        for old, new in pairwise(ordered):
            if (old["status"] == "pass") != (new["status"] == "pass"):
                answer = f"changes between {axis} {old['version']} ({old['status']}) and {new['version']} ({new['status']})"
        frame = pd.DataFrame([{k: p[k] for k in ("version", "status", "signature", "cell_id")} for p in ordered])
        found.append(Bisection(run_id, scenario, axis, frame, answer or "no change of verdict among the probes"))
    return found


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
        return {a: str(c.get(a) or "") for a in AXIS_COLUMNS}

    mine = next((axes(c) for c in cells if c["cell_id"] == cell_id), None)
    others = [c for c in cells if c["cell_id"] != cell_id]
    if mine is None or not others:
        return others[0]["cell_id"] if others else cell_id
    return str(min(others, key=lambda c: (sum(mine[a] != v for a, v in axes(c).items()), str(c["cell_id"])))["cell_id"])
