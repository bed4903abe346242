"""What the pages draw for a test suite (`harness sweep --tests`): groups, a search box, drill-downs.

A suite of 20,000 node ids in 20 cells is 400,000 outcomes: no page draws one line or one
square per test. The Matrix grid has one row per file, then (choose a file, or select its row)
one per class or module-level function, then one per test; Failures, Cell and Compare group by
signature and by class and list tests only on demand, at most LIMIT of them. The search box (a
substring of the node id, matched in DuckDB) and *only tests that fail somewhere* narrow every
level, and are kept across pages. Scenario files never reach this module: their pages are drawn
as they always were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from dashboard import common, grouping, logic
from harness.analysis import heatmap
from harness.analysis.machines import ANY_MACHINE
from harness.analysis.rows import axis_sort, machine_class
from harness.analysis.selection import marker_matches, select_tests
from harness.storage import pages, queries, suites

#: The most tests one table lists; past it, the page says how many matched and asks for a narrower search.
LIMIT = 500
PENDING = "suite_pending"  # a drill-down chosen by a click, applied before the selectboxes are drawn


def search_controls(*, failing: bool = True) -> tuple[str, bool]:
    """The search box (and the *only failing* toggle), kept across pages: (text, failing only)."""
    common.keep("f_search", "")
    common.keep("f_failing", False)
    left, right = st.columns([4, 1], vertical_alignment="bottom")
    text = left.text_input(
        "Search test ids",
        key="f_search",
        placeholder="a part of the node id: TestLora, float16, tests/quant/, test_merge[4bit]",
        help="Case-insensitive substring of the pytest node id; `[`, `*` and `%` are literal.",
    )
    common.remember("f_search")
    only = False
    if failing:
        only = right.toggle("only tests that fail somewhere", key="f_failing")
        common.remember("f_failing")
    return text.strip(), bool(only)


def _grid_config(grid: grouping.Grid, first: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "shown": st.column_config.TextColumn(first, pinned=True, width="large"),
        "tests": st.column_config.NumberColumn("tests", pinned=True, width="small", help="node ids in this row"),
    }
    for column in grid.columns:
        options, colours = logic.tag_colours(grid.frame[column.label].unique())
        where = f" on {column.gpu}" if column.gpu else ""
        config[column.label] = st.column_config.MultiselectColumn(
            column.label, width=150, help=f"{column.varying}{where} ({column.cell_id})", options=options, color=colours
        )
    return config


class Drawn(NamedTuple):
    """One level of the Matrix grid: the grid, how many node ids matched (at the test level, where
    at most LIMIT are listed) and the title of its first column. What st.dataframe shows of it is
    made when it is drawn (`_draw_grid`): the first page draws the folded files, never the grid
    of every file it folds (1,000 rows × 20 cells of tags, made and cached for nothing)."""

    grid: grouping.Grid
    matched: int
    first: str


_FIRST = {"file": "file", "group": "class or function", "test": "test"}


@st.cache_data(show_spinner=False, max_entries=64)
def _grid(
    version: common.FileVersion,
    level: str,
    chosen: dict[str, list[str]],
    search: str,
    failing: bool,
    by_gpu: bool,
    file: str = "",
    group: str = "",
) -> Drawn:
    """The grid at `level` (file; a file's groups; the tests of a group, a file or all), built once
    per file version and choice: a rerun (a click, another tab) draws it without rebuilding it. Its
    rows are read uncached (`common.read`): this cache holds the grid, and a second copy of 20,000
    rows (1,000 files × 20 cells) cost a pickle on every miss."""
    columns = _columns(chosen, by_gpu)
    if level == "test":
        scope = {"group": group} if group else ({"file": file} if file else {})
        found = common.read(suites.test_counts, chosen, search, within=scope, failing_only=failing, by_gpu=by_gpu, limit=LIMIT)
        grid = grouping.build_grid(found["rows"], columns, within=group or file, word=logic.fold, size="outcomes")
        matched = int(found["tests"])
    else:
        within = {"file": file} if level == "group" else None
        rows = common.read(suites.test_group_tallies, chosen, search, level=level, within=within, failing_only=failing, by_gpu=by_gpu)
        grid = grouping.build_grid(rows, columns, within=file if level == "group" else "")
        matched = int(grid.frame["tests"].sum())
    return Drawn(grid, matched, _FIRST[level])


def _columns(chosen: dict[str, list[str]], by_gpu: bool) -> list[grouping.Column]:
    """The grid's columns: one per cell the filters admit (and GPU, `by_gpu`), from a cheap cached read."""
    cells = common.query(pages.grid_cells, chosen)
    return grouping.columns(cells, {c["cell_id"]: c["gpus"] for c in cells} if by_gpu else None)


def _draw_grid(drawn: Drawn, key: str) -> Any:
    """The grid as st.dataframe shows it: one-word lists, which a MultiselectColumn draws as coloured tags."""
    grid = drawn.grid
    shown = grid.frame.copy()
    for label in grid.labels:
        shown[label] = shown[label].map(lambda w: [w] if w else [])
    return st.dataframe(
        shown,
        key=key,
        on_select="rerun",
        selection_mode="single-cell",
        hide_index=True,
        column_order=["shown", "tests", *grid.labels],
        column_config=_grid_config(grid, drawn.first),
        height=min(38 + 35 * len(shown), 640),
    )


def _legend(columns: Sequence[grouping.Column]) -> None:
    """Which cell each column letter is (text, not another grid: it costs the browser nothing to draw)."""
    with st.expander(f"Columns: {len(columns)} cell(s)", expanded=False):
        st.markdown("\n".join(f"- **{c.label}** {c.varying}" + (f" on {c.gpu}" if c.gpu else "") + f" · `{c.cell_id}`" for c in columns))


def _heat_column(c: grouping.Column) -> heatmap.Column:
    versions = tuple((a, c.versions[a]) for a in axis_sort(c.versions))
    return heatmap.Column(f"{c.cell_id} @ {c.gpu}" if c.gpu else c.cell_id, c.cell_id, versions, c.gpu)


@st.cache_data(show_spinner=False, max_entries=64)
def _fold(
    version: common.FileVersion,
    chosen: dict[str, list[str]],
    search: str,
    failing: bool,
    by_gpu: bool,
    _top: Drawn,
    _edges: Sequence[tuple[heatmap.Edge, int]],
) -> tuple[Drawn, dict[str, list[str]]]:
    """The file grid past FOLD_PAST files as the page draws it (`grouping.fold`): the files that say the
    most, a line for those that pass in every cell, one for the rest; with the files each line folds.
    `_top` is `_grid`'s file level for the same arguments and `_edges` the file's edges by file, both
    in hand (not hashed: read back from their caches, they were unpickled again for nothing)."""
    cells = {c.cell_id for c in _top.grid.columns}
    marked = {e.row for e, _ in logic.edges_within(_edges, cells)}
    folded = grouping.fold(_top.grid, marked, grouping.FOLD_PAST)
    return Drawn(folded.grid, _top.matched, "file"), folded.folded


def _edge_axis(columns: Sequence[grouping.Column], edges: Sequence[tuple[heatmap.Edge, int]]) -> str:
    """The heatmap's select of the library that varies fastest: the busiest over every file, shown or folded."""
    heat_columns = [_heat_column(c) for c in columns]
    return common.select_edge_axis(heatmap.varying(heat_columns), logic.edges_within(edges, {c.cell_id for c in heat_columns}))


_HEAT_CAPTION = (
    "Every test file × every cell: a square's colour is the worst status among the file's tests there (hover for the counts); "
    "a tick on an edge is a release that attribution found changed tests of that file. Click a square to open the cell, a "
    "tick to open the failure; the tables below go down to classes and tests."
)


def _heatmap(files: grouping.Grid, edges: Sequence[tuple[heatmap.Edge, int]], last: str) -> None:
    """Every test file × every cell at once (`harness.analysis.heatmap`, as for scenarios): a click opens the cell.
    `files` may hold lines of folded files (`grouping.fold`): the marks are drawn for the rows shown only.
    `edges`: `common.edges_if_cheap` by file; `last`: the library that varies fastest (`_edge_axis`)."""
    columns = [_heat_column(c) for c in files.columns]
    weighted = logic.edges_within(edges, {c.cell_id for c in columns})
    rows = set(files.frame["name"])
    shown = [e for e, _ in weighted if e.row in rows]
    words = {
        (column.key, str(name)): word
        for label, column in zip(files.labels, columns)
        for name, word in zip(files.frame["name"], files.frame[label])
    }
    spec = logic.lighter(heatmap.layout(list(files.frame["name"]), columns, words, shown, last, width=logic.HEAT_WIDTH))
    event = st.vega_lite_chart(spec, key="suite_heatmap", on_select="rerun", selection_mode=[heatmap.PICK, heatmap.EDGE])
    cell_id, _, signature = heatmap.picked(logic.chart_selection(event))
    if signature:
        st.switch_page(common.PAGES["failures"], query_params={"signature": signature})
    if cell_id:
        common.open_cell(cell_id)


def file_options(files: Sequence[str], drawn: Sequence[str], chosen: str) -> list[str]:
    """The File box's files: those drawn one row each (`drawn`: the grid's rows, lines of folded files
    included, which are no file) and the one chosen, when it is among `files`; every file when nothing
    is folded. Not 1,000 names sent to the browser on every run: *show every file* lists them all,
    and the search narrows the files to those holding a matching test."""
    if not any(grouping.is_folded(n) for n in drawn):
        return list(files)
    listed = [n for n in drawn if not grouping.is_folded(n)]
    if chosen and chosen not in listed and chosen in set(files):
        listed = sorted([*listed, chosen])
    return listed


class _Asked(NamedTuple):
    """What every level of the Matrix grid is asked with: the file's version and the page's filters."""

    version: common.FileVersion
    chosen: dict[str, list[str]]
    search: str
    failing: bool
    by_gpu: bool

    def grid(self, level: str, file: str = "", group: str = "") -> Drawn:
        return _grid(self.version, level, self.chosen, self.search, self.failing, self.by_gpu, file, group)


class _At(NamedTuple):
    """Where the Matrix has been taken to: the grid it draws and its level, the file and class
    chosen, the File box's files, the class box's options and the table's widget key."""

    drawn: Drawn
    level: str
    file: str
    group: str
    names: list[str]
    options: list[str]
    key: str


def _drawn_files(asked: _Asked, top: Drawn, edges: Sequence[tuple[heatmap.Edge, int]]) -> tuple[Drawn, dict[str, list[str]]]:
    """The file level as drawn: past FOLD_PAST files, folded (`_fold`) unless *show every file* is on."""
    if len(top.grid.frame) <= grouping.FOLD_PAST:
        return top, {}
    common.keep("m_every_file", False)
    if st.session_state["m_every_file"]:
        return top, {}
    return _fold(*asked, top, edges)


def _kept_choice(key: str, options: Sequence[str]) -> str:
    """The File or class box's value as it stands, emptied when no longer among `options`."""
    common.keep(key, "")
    if st.session_state[key] not in options:
        st.session_state[key] = ""
    return str(st.session_state[key])


def _where(asked: _Asked, top: Drawn, drawn_files: Drawn, folded: Mapping[str, list[str]]) -> _At:
    """The level the choices as they stand lead to (their widgets are drawn later, with the same values)."""
    common.keep("m_file", "")  # the value a page coming back had: the chosen file stays listed
    names = file_options(list(top.grid.frame["name"]), list(drawn_files.grid.frame["name"]), st.session_state["m_file"])
    file = _kept_choice("m_file", names)
    groups, options = None, list[str]()
    if file:
        groups = asked.grid("group", file)
        options = list(groups.grid.frame["name"])
    group = _kept_choice("m_group", options) if file else ""
    flat = bool(st.session_state.get("m_flat", False))
    if group or flat:
        drawn, level = asked.grid("test", file, group), "test"
    elif groups is not None:
        drawn, level = groups, "group"
    else:
        drawn, level = drawn_files, "file"
    key = f"suite_grid:{level}:{file}:{group}:{flat}" + (":folded" if folded and level == "file" else "")
    return _At(drawn, level, file, group, names, options, key)


def _headline(head: Any, top: Drawn, columns: Sequence[grouping.Column], search: str) -> None:
    files = top.grid
    totals = "  ·  ".join(f"{s}: {n:,}" for s, n in sorted(files.totals.items(), key=lambda kv: grouping.WORD_ORDER.index(kv[0])))
    matched = f" matching `{search}`" if search else ""
    share = grouping.failing_share(files.totals)
    head.markdown(
        f"**{top.matched:,}** test(s){matched} in **{len(files.frame):,}** file(s) × **{len(columns)}** cell(s) — {totals} (tests × cells)"
        + (f"; {share}" if share else ""),
        help="A test's repeats and runs in one cell count once, by their worst status.",
    )


def _fold_controls(fold_box: Any, files: grouping.Grid, drawn_files: Drawn, folded: Mapping[str, list[str]]) -> None:
    """*show every file*, past FOLD_PAST files, and what the folded lines hold."""
    if len(files.frame) <= grouping.FOLD_PAST:
        return
    fold_box.toggle(
        f"show every file ({len(files.frame):,})",
        key="m_every_file",
        help=f"Past {grouping.FOLD_PAST} files the heatmap and the table draw the files that say the most and fold the "
        "others into a line or two; this draws one row per file (seconds for the browser at 1,000 files).",
    )
    common.remember("m_every_file")
    if folded:
        shown_files = len(drawn_files.grid.frame) - len(folded)
        fold_box.caption(
            f"{shown_files:,} of {len(files.frame):,} file(s) drawn one row each: those whose outcome changes between cells "
            "(or with a mark), then those that fail the same way everywhere, most failures first. "
            + "; ".join(f"**{line.removeprefix('… ')}**" for line in folded)
            + ": one line each, its squares the sum of its files' counts (a skip or xfail beside passes is a pass here, as its "
            "colour is). The File box below lists the files drawn (*show every file* lists them all); the search finds any test."
        )


def _choosers(choose: Any, at: _At, every: int) -> None:
    """The File box, the class box (a file chosen) and *list the tests*, with the values `_where` read."""
    left, middle, right = choose.columns([3, 3, 1], vertical_alignment="bottom")
    listed = None if len(at.names) == every else f"the {len(at.names)} file(s) drawn above; *show every file* lists all {every:,}"
    left.selectbox("File", ["", *at.names], key="m_file", format_func=lambda f: f or f"every file ({every:,})", help=listed)
    common.remember("m_file")
    if at.file:
        middle.selectbox(
            "Class or function",
            ["", *at.options],
            key="m_group",
            format_func=lambda g: grouping.short_name(g, at.file) if g else f"every class ({len(at.options)} groups)",
        )
        common.remember("m_group")
    right.toggle("list the tests", key="m_flat", help="one row per test (at most 500) instead of one per file or class")


def _level_caption(said: Any, at: _At, search: str, folded: bool) -> None:
    if at.level == "test":
        shown = f"the first {LIMIT} of " if at.drawn.matched > LIMIT else ""
        matched = f" matching `{search}`" if search else ""
        within = f" in {at.group or at.file}" if at.group or at.file else ""
        said.caption(f"{shown}{at.drawn.matched:,} test(s){matched}{within}; select a square to open that cell at that test.")
    elif at.level == "group":
        said.caption(f"{len(at.drawn.grid.frame)} class(es) and function(s) in {at.file}; select a row to list its tests.")
    else:
        tail = "; select a line of folded files to draw every file." if folded else "."
        said.caption(f"One row per test file; select a row to see its classes and functions{tail}")


def _follow(at: _At, selection: Any) -> None:
    """A selected square or row: the next level down, every file for a folded line, or the cell at that test."""
    grid = at.drawn.grid
    picked = grouping.selected(grid, selection)
    if not picked:
        return
    name, column = picked
    if at.level == "file" and grouping.is_folded(name):
        st.session_state[PENDING] = {"m_every_file": True}
        st.session_state.pop(at.key, None)  # folded again later, the line is not still selected
        st.rerun()
    elif at.level == "file":
        st.session_state[PENDING] = {"m_file": name, "m_group": ""}
        st.rerun()
    elif at.level == "group":
        st.session_state[PENDING] = {"m_group": name}
        st.rerun()
    else:
        row = grid.frame[grid.frame["name"] == name].iloc[0]
        column = column or next((c for c in grid.columns if row[c.label] not in ("", "pass")), grid.columns[0])
        common.open_cell(column.cell_id, name)


def _unwaited(legend: Any, chart: Any, below: Any, columns: Sequence[grouping.Column]) -> None:
    """What needs no tally nor edge, drawn in its places."""
    style = "padding:1px 6px;border-radius:3px;margin-right:4px"
    legend.markdown(" ".join(f"<span style='{logic.colour_of(s)};{style}'>{s}</span>" for s in logic.COLOURS), unsafe_allow_html=True)
    chart.caption(_HEAT_CAPTION)  # the heatmap comes under it
    with below:
        _legend(columns)


def matrix(chosen: Mapping[str, list[str]], by_gpu: bool) -> None:
    """The Matrix page for a test suite: files, then a file's classes, then a class's tests, × cells.

    Its parts are drawn into places kept for them in reading order (`st.container`, the same on
    every run: nothing is mounted again on a rerun), not in that order. Unless a search or *only
    failing* may leave nothing to draw, what needs no tally (the colour legend, the heatmap's
    caption, the columns' legend) comes first: the browser draws it while DuckDB tallies the files
    (0.5 s of a first render at 2,000,000 outcomes, the browser idle meanwhile). The table comes
    next, from the choices as they stand (the File box, *show every file*, ...), then their widgets
    and the rest, the heatmap last: the table's rows are in while the heatmap is drawn (a grid shows
    its rows 200 ms after it was last drawn)."""
    pending = st.session_state.pop(PENDING, None)
    if pending:
        st.session_state.update(pending)  # before the selectboxes exist: a widget's value may not change after
    search, failing = search_controls()
    asked = _Asked(common.version(), dict(chosen), search, failing, by_gpu)
    columns = _columns(asked.chosen, by_gpu)
    head, legend, fold_box, axis, chart, below, choose, said, table = (st.container() for _ in range(9))
    early = bool(columns) and not search and not failing  # some file is drawn: the cells hold outcomes
    if early:
        _unwaited(legend, chart, below, columns)
    top = asked.grid("file")
    if top.grid.empty:
        head.info(f"No test matches `{search}`." if search else "No outcomes match these filters.")
        return
    edges = common.query(common.edges_if_cheap, by_file=True)  # read once a run: the fold and the heatmap both need them
    drawn_files, folded = _drawn_files(asked, top, edges)
    at = _where(asked, top, drawn_files, folded)
    with table:
        event = _draw_grid(at.drawn, key=at.key)
    if not early:
        _unwaited(legend, chart, below, columns)
    _headline(head, top, columns, search)
    _fold_controls(fold_box, top.grid, drawn_files, folded)
    with axis:
        last = _edge_axis(columns, edges)
    _choosers(choose, at, len(top.grid.frame))
    _level_caption(said, at, search, bool(folded))
    with chart:  # after the table, above it: a click on the heatmap is still answered first
        _heatmap(drawn_files.grid, edges, last)
    _follow(at, event.selection)


# -- Failures ---------------------------------------------------------------------------------
def failure_table(failures: Sequence[Mapping[str, Any]], summary: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The Failures table for a suite: logic.failures_frame plus tests, groups and files per signature."""
    table = logic.failures_frame(failures, summary)
    table.insert(table.columns.get_loc("cells") + 1, "tests", [int(r["tests"]) for r in failures])
    table.insert(table.columns.get_loc("tests") + 1, "files", [int(r["files"]) for r in failures])
    return table


def where_it_fails(signature: str, chosen: Mapping[str, list[str]], search: str) -> None:
    """One signature's groups (tests and cells each); a selected group lists its tests."""
    groups = common.query(suites.test_signature_groups, signature, dict(chosen), search)
    if not groups:
        return
    tests = sum(int(g["tests"]) for g in groups)
    st.markdown(f"**Where it fails**: {tests:,} test(s) in {len(groups):,} class(es) or function(s); select one for its tests.")
    frame = pd.DataFrame(groups, columns=["group", "tests", "cells", "outcomes", "example_test", "example_cell"])
    event = st.dataframe(
        frame,
        key=f"failure_groups:{signature}",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        column_order=["group", "tests", "cells", "outcomes"],
        column_config={"group": st.column_config.TextColumn("class or function", width="large")},
        height=min(38 + 35 * len(frame), 320),
    )
    group = common.picked_text(event, frame, "group")
    if group is None:
        return
    found = common.query(suites.test_signature_tests, signature, group, dict(chosen), search, LIMIT)
    st.markdown(f"Tests of **{group}** failing with it" + (f" (the first {LIMIT})" if len(found) >= LIMIT else "") + ":")
    listing = pd.DataFrame(found, columns=["test", "cells", "outcomes", "example_cell"])
    picked = st.dataframe(
        listing,
        key=f"failure_tests:{signature}:{group}",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        column_order=["test", "cells", "outcomes"],
        column_config={"test": st.column_config.TextColumn(width="large")},
        height=min(38 + 35 * len(listing), 320),
    )
    index = common.picked_row(picked, listing)
    if index is not None:
        row = listing.iloc[index]
        common.open_cell(str(row["example_cell"]), str(row["test"]))


def transition_groups(transitions: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """A suite's transitions of one signature, one row per group and answer (not one per test)."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for t in transitions:
        answer = logic.answer_text(t) if t["kind"] in ("introduced", "fixed") else str(t.get("description") or "")
        key = (grouping.group_name(str(t["scenario"])), str(t["kind"]), str(t.get("axis") or ""), answer, str(t.get("machine") or ""))
        row = rows.setdefault(
            key, {"group": key[0], "kind": key[1], "axis": key[2], "answer": key[3], "on": key[4], "tests": set(), "lines": 0}
        )
        row["tests"].add(str(t["scenario"]))
        row["lines"] += 1
    records = [{**r, "tests": len(r["tests"])} for r in rows.values()]
    frame = pd.DataFrame(records, columns=["group", "kind", "axis", "answer", "on", "tests", "lines"])
    return frame.sort_values(["tests", "group"], ascending=[False, True], ignore_index=True)


# -- Cell -------------------------------------------------------------------------------------
def cell_tests(cell_id: str, focus: str) -> None:
    """One cell of a suite: counts per file, its failure signatures, then its outcomes (failures first, at most LIMIT)."""
    search, failing = search_controls()
    files = common.query(suites.test_group_tallies, {"cell_id": [cell_id]}, search, level="file", failing_only=failing)
    table = pd.DataFrame(files)
    if table.empty:
        st.info(f"No test of this cell matches `{search}`." if search else "No test outcomes in this cell.")
        return
    statuses = [s for s in grouping.WORD_ORDER if s in table.columns and table[s].sum()]
    table = table[["name", "tests", *statuses]]
    totals = "  ·  ".join(f"{s}: {int(table[s].sum()):,}" for s in statuses)
    st.markdown(f"**{int(table['tests'].sum()):,}** test(s) in **{len(table):,}** file(s) — {totals}")

    failures = common.query(suites.test_failure_summaries, {"cell_id": [cell_id]}, search)
    if failures:
        st.markdown("**Failure signatures in this cell**")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "signature": f["signature"],
                        "blames": f.get("blamed_library") or "",
                        "tests": int(f["tests"]),
                        "files": int(f["files"]),
                        "where (most tests)": ", ".join(f.get("scenarios") or []),
                    }
                    for f in failures
                ]
            ),
            hide_index=True,
            column_config={"signature": st.column_config.TextColumn(width="large")},
        )
    st.markdown("**Files** (select one to list only its tests)")
    event = st.dataframe(
        table,
        key=f"cell_files:{cell_id}",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        column_config={"name": st.column_config.TextColumn("file", width="large")},
        height=min(38 + 35 * len(table), 320),
    )
    name = common.picked_text(event, table, "name")
    within = {"file": name} if name is not None else None

    found = common.query(suites.test_outcomes, cell_id, search, within=within, failing_only=failing, limit=LIMIT)
    rows = found["rows"]
    shown = f"the first {LIMIT} of " if found["tests"] > LIMIT else ""
    st.subheader("Outcomes")
    st.caption(
        f"{shown}{found['tests']:,} test(s)" + (f" in {within['file']}" if within else "") + ", failures first; "
        "select one for its message, traceback and the tail of its output."
    )
    listing = pd.DataFrame(
        [
            {
                "test": r["scenario"],
                "status": r["status"],
                "run": r["run_id"],
                "repeat": r["repeat"],
                "seconds": r.get("seconds"),
                "signature": r.get("signature") or "",
            }
            for r in rows
        ],
        columns=["test", "status", "run", "repeat", "seconds", "signature"],
    )
    picked = st.dataframe(
        listing.style.map(logic.colour_of, subset=["status"]),
        key=f"cell_outcomes:{cell_id}",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        height=min(38 + 35 * len(listing), 320),
        column_config={"test": st.column_config.TextColumn(width="large"), "signature": st.column_config.TextColumn(width="large")},
    )
    chosen = common.picked_text(picked, listing, "test", default=focus or (rows[0]["scenario"] if rows else ""))
    if chosen:
        detail(cell_id, chosen)


def detail(cell_id: str, test: str) -> None:
    """One test's outcomes in one cell, with message, traceback and output: read on demand."""
    for row in common.query(queries.outcome_rows_with_traces, [test], cell_id):
        st.markdown(
            f"**{test}** — **{row['status']}** · run `{row['run_id']}` · repeat {row['repeat']} · {row.get('gpu') or '?'} · "
            f"{row.get('platform') or '?'} · started {str(row.get('started_at') or '')[:19]} UTC · {float(row.get('seconds') or 0):.2f} s"
            + (f" · blames **{row['blamed_library']}**" if row.get("blamed_library") else "")
        )
        if row.get("signature"):
            st.code(row["signature"], language=None, wrap_lines=True)
        if row.get("message"):
            st.text(row["message"])
        tabs = st.tabs(["traceback", "output (tail)"])
        with tabs[0]:
            st.code(row.get("traceback") or "(no traceback)", language="python")
        with tabs[1]:
            st.code(row.get("output_tail") or "(no output)", language=None)


# -- Compare ----------------------------------------------------------------------------------
def compare(a: str, b: str) -> None:
    """Which tests differ between two cells: per class, then the tests (at most LIMIT)."""
    search, _ = search_controls(failing=False)
    diff = common.query(suites.test_diff, a, b, search, limit=LIMIT)
    st.caption(f"{diff['differ']:,} of {diff['tests']:,} test(s) differ, in {len(diff['groups']):,} class(es) or function(s).")
    if not diff["differ"]:
        return
    st.dataframe(
        pd.DataFrame(diff["groups"], columns=["group", "tests"]),
        hide_index=True,
        column_config={"group": st.column_config.TextColumn("class or function", width="large")},
        height=min(38 + 35 * len(diff["groups"]), 320),
    )
    shown = f"The first {LIMIT} of the tests that differ" if diff["differ"] > LIMIT else "The tests that differ"
    st.markdown(f"**{shown}**")
    frame = pd.DataFrame(diff["rows"], columns=["scenario", "A", "B", "A signature", "B signature"]).rename(columns={"scenario": "test"})
    st.dataframe(
        frame.style.map(logic.colour_of, subset=["A", "B"]),
        hide_index=True,
        column_config={
            "test": st.column_config.TextColumn(width="large"),
            "A signature": st.column_config.TextColumn(width="large"),
            "B signature": st.column_config.TextColumn(width="large"),
        },
    )


# -- Pin --------------------------------------------------------------------------------------
#: Joins a choice of names into one string: no node id or scenario holds it. The Pin page's cache
#: key is that one string (`views/pin.py`), not a tuple of a suite's 78,000 names hashed one by one.
SEP = "\x00"


class Listing(NamedTuple):
    """What the Pin page lists of a suite on one machine: every node id with its counts (`frame`),
    and the files and the classes or functions to choose from, made with it rather than on every
    rerun (two columns of 100,000 names as lists, then sets: 0.04 s a rerun at 2,000,000 outcomes)."""

    frame: pd.DataFrame
    files: list[str]
    classes: list[str]


@st.cache_data(show_spinner=False, max_entries=16)
def _test_listing(version: common.FileVersion, machine: str) -> Listing:
    """Every node id with its file, class or function, markers, and the cells where it passed and
    where it passed or failed on `machine` (a machine class, or ANY_MACHINE for all pooled)."""
    classes: dict[tuple[Any, ...], str] = {}
    per: dict[str, list[int]] = {}
    for row in common.query(pages.test_pass_counts):
        host = (row["gpu"], row["gpu_count"], row["platform"])
        here = classes.get(host)
        if here is None:  # a few kinds of host, 100,000 rows: each host's class once
            here = classes[host] = machine_class(row)
        counts = per.setdefault(str(row["scenario"]), [0, 0])
        if machine in (ANY_MACHINE, here):
            counts[0] += int(row["passing"])
            counts[1] += int(row["tested"])
    markers = common.query(queries.test_markers)
    tests = sorted(per)
    files = [t.split("::", 1)[0] for t in tests]
    groups = [grouping.group_name(t) for t in tests]
    frame = pd.DataFrame(
        {
            "test": tests,
            "file": files,
            "group": groups,
            "markers": [", ".join(sorted(markers.get(t, ()))) for t in tests],
            "cells passing": [per[t][0] for t in tests],
            "cells tested": [per[t][1] for t in tests],
        }
    )
    unique_files = sorted(set(files))
    return Listing(frame, unique_files, sorted(set(groups) - set(unique_files)))


class Selection(NamedTuple):
    """The tests the Pin page's choices select, as the page shows and pins them: worked out once per
    choice (`_selected`), not on every rerun (naming 78,000 chosen tests by group took 0.08 s)."""

    joined: str  # the chosen tests that passed or failed on the machine, joined by SEP
    kept: int  # how many `joined` holds
    left_out: int  # chosen tests that never passed or failed on the machine (skipped, xfail or not built there)
    named: str  # `grouping.name_many` of the tests `joined` holds
    empty: tuple[str, ...]  # the selectors that chose nothing
    refused: str  # why the marker expression was refused

    @property
    def chosen(self) -> int:
        return self.kept + self.left_out


@st.cache_data(show_spinner=False, max_entries=32)
def _selected(version: common.FileVersion, machine: str, selectors: tuple[str, ...], picked: tuple[str, ...], marker: str) -> Selection:
    """The node ids chosen as `harness pin --test SELECTOR… -m MARKER` chooses them, plus the rows
    picked in the list, of which those that passed or failed on `machine` are kept (the others say
    nothing there: left out, as the CLI does)."""
    frame = _test_listing(version, machine).frame
    chosen, empty, refused = _chosen(version, frame["test"].tolist(), selectors, picked, marker)
    if not chosen:
        return Selection("", 0, 0, "", tuple(empty), refused)
    tested = set(frame["test"][frame["cells tested"] > 0].tolist())
    kept = [t for t in chosen if t in tested]
    return Selection(SEP.join(kept), len(kept), len(chosen) - len(kept), grouping.name_many(kept), tuple(empty), refused)


def _chosen(
    version: common.FileVersion, stored: list[str], selectors: tuple[str, ...], picked: tuple[str, ...], marker: str
) -> tuple[list[str], list[str], str]:
    """(the node ids chosen among `stored`, as `harness pin --test SELECTOR… -m MARKER` chooses them,
    plus the rows picked in the list; the selectors that chose nothing; why the marker expression was refused)."""
    chosen, empty = select_tests(stored, selectors) if selectors else ([], [])
    chosen = list(dict.fromkeys([*chosen, *picked]))
    if not marker:
        return chosen, empty, ""
    sets, set_of = _marker_sets(version)
    if not set_of:  # no outcome recorded markers (swept before they were stored)
        from harness.workflows.pinning import MARKERS_NOT_STORED  # the CLI's words; pinning's imports only where they are needed

        return [], empty, f"-m {marker!r}: this file stores no markers; {MARKERS_NOT_STORED}"
    try:
        # asked once per distinct set of markers; tests whose outcomes recorded no marker have none
        # (`-m "not slow"` selects them too)
        matches = [marker_matches(marker, found) for found in sets]
        return [t for t in (chosen if selectors or picked else stored) if matches[set_of.get(t, 0)]], empty, ""
    except ValueError as exc:
        return [], empty, str(exc)


@st.cache_resource(show_spinner=False, max_entries=4)
def _marker_sets(version: common.FileVersion) -> tuple[list[frozenset[str]], dict[str, int]]:
    """(the distinct sets of markers the tests recorded, the empty one first; test -> its set's place):
    held, not copied per rerun as a cached dict of 100,000 sets is (0.08 s), and a marker expression
    asked of a few sets, not of each test."""
    sets: dict[frozenset[str], int] = {frozenset(): 0}
    set_of = {test: sets.setdefault(frozenset(names), len(sets)) for test, names in common.query(queries.test_markers).items()}
    return list(sets), set_of


def pin_selection(machine: str) -> Selection:
    """The Pin page's choice of tests for a suite: files, classes, typed selectors and a marker
    expression (as `harness pin --test/-m`), or rows picked in the list of every test. Returns the
    chosen tests that passed or failed on `machine` (the others say nothing there: left out, as the CLI does)."""
    version = common.version()
    listing = _test_listing(version, machine)
    frame = listing.frame
    st.markdown(
        f"Choose the tests that must pass among the **{len(frame):,}** this file holds, as `harness pin --test` and `-m` "
        "choose them: files, classes, node ids or folders, and pytest's marker expression (within the other choices, when given)."
    )
    left, right = st.columns(2)
    chosen_files = common.multiselect("files", listing.files, "pin_files", where=left, placeholder="none")
    chosen_classes = common.multiselect("classes", listing.classes, "pin_classes", where=right, placeholder="none")
    left, right = st.columns([3, 2])
    common.keep("pin_tests", "")
    typed = left.text_area(
        "node ids, files, classes or folders, one per line",
        key="pin_tests",
        placeholder="tests/quant/\ntests/test_lora.py::TestMerge\ntests/test_lora.py::test_merge[4bit]",
        height=100,
    )
    common.remember("pin_tests")
    common.keep("pin_marker", "")
    marker = right.text_input("-m (markers)", key="pin_marker", placeholder="quant and not slow", help="pytest's -m expression")
    common.remember("pin_marker")
    st.markdown(f"**Every test** ({len(frame):,}; select rows to add them; the list's search box finds a node id)")
    event = st.dataframe(
        frame[["test", "markers", "cells passing", "cells tested"]],  # the columns shown: half the bytes a rerun sends
        key="pin_listing",
        on_select="rerun",
        selection_mode="multi-row",
        hide_index=True,
        column_order=["test", "markers", "cells passing", "cells tested"],
        column_config={
            "test": st.column_config.TextColumn(width="large"),
            "cells passing": st.column_config.NumberColumn(help=f"cells where every outcome passed, on {machine}"),
            "cells tested": st.column_config.NumberColumn(help=f"cells where it passed or failed, on {machine}"),
        },
        height=320,
    )
    picked = tuple(str(frame["test"].iloc[i]) for i in event.selection.rows)
    selectors = tuple([*chosen_files, *chosen_classes, *(line.strip() for line in typed.splitlines() if line.strip())])
    selection = _selected(version, machine, selectors, picked, marker.strip())
    if selection.empty:
        st.warning(f"Selects no stored test: {', '.join(f'`{s}`' for s in selection.empty)}")
    if selection.refused:
        st.warning(selection.refused)
    if selection.chosen:
        left_out = selection.left_out
        st.markdown(
            f"**{selection.kept:,}** test(s) chosen ({selection.named})"
            + (f"; {left_out:,} left out: they never passed or failed on {machine} (skipped, xfail or not built there)" if left_out else "")
        )
    return selection
