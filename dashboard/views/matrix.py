"""Matrix: every scenario against every cell at once, as a heatmap; a click opens the cell, or the failure.

The cells are ordered by their versions with one axis varying fastest (*changes along*), so
that a release of that axis which changes a verdict sits beside the one before it: the
change is an edge of colour, and a tick on it (or a triangle in the cell, where the two
cells are not neighbours) says which release, as attribution found it. The spec is
`harness.analysis.heatmap`'s, the one `harness publish` draws too. The table of one row per
cell is still here, on demand (*Table*).

A test suite (node ids, `harness sweep --tests`) is drawn by dashboard/suite.py instead: its
files × cells as a heatmap, then files, classes and tests as tables, with a search box.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import common, logic, suite
from harness.analysis import heatmap
from harness.storage import pages, suites

st.title("Matrix")
fill_banner = common.data_banner_later()
tests = common.query(suites.holds_tests)
if not tests:
    fill_banner()
# a suite's pages search node ids instead of listing them: no scenario list to read
facets = common.query(pages.facets_without_scenarios if tests else pages.facets)
chosen = common.filters(facets, scenario=not tests)
# with one GPU in the whole file, a row per cell and GPU is a row per cell
by_gpu = len(facets["gpu"]) > 1 and st.sidebar.toggle(
    "one row per cell and GPU", key="by_gpu", help="keep results from different GPUs apart"
)
if tests:
    suite.matrix(chosen, by_gpu)
    fill_banner()  # last: the browser draws the grid and the heatmap while the banner's counts are read
    st.stop()


@st.cache_data(show_spinner=False, max_entries=64)
def _heat(version: common.FileVersion, chosen: dict[str, list[str]], by_gpu: bool) -> logic.Heat:
    counts = common.query(pages.matrix_counts, chosen, by_gpu=by_gpu)
    return logic.heat_data(counts, common.query(pages.cell_summaries, chosen), by_gpu=by_gpu)


@st.cache_data(show_spinner=False, max_entries=64)
def _table(
    version: common.FileVersion, chosen: dict[str, list[str]], by_gpu: bool
) -> tuple[logic.Matrix, pd.DataFrame, list[str], list[str]]:
    """The old grid (built only when asked for): one-word lists, which a MultiselectColumn draws as coloured tags."""
    counts = common.query(pages.matrix_counts, chosen, by_gpu=by_gpu)
    matrix = logic.build_matrix(counts, common.query(pages.cell_summaries, chosen), by_gpu=by_gpu)
    shown = matrix.frame.copy()
    for scenario in matrix.scenarios:
        shown[scenario] = shown[scenario].map(lambda w: [w] if w else [])
    options, colours = logic.tag_colours(w for s in matrix.scenarios for w in matrix.frame[s].unique())
    return matrix, shown, options, colours


heat = _heat(common.version(), chosen, by_gpu)
if heat.empty:
    st.info("No outcomes match these filters.")
    st.stop()

totals = "  ·  ".join(f"{s}: {n:,}" for s, n in sorted(heat.totals.items(), key=lambda kv: logic.SEVERITY.index(kv[0])))
st.markdown(f"**{len(heat.columns):,}** cell(s) × **{len(heat.scenarios)}** scenario(s) — {totals}")

columns = heat.columns
weighted = logic.edges_within(common.query(common.edges_if_cheap), {c.cell_id for c in columns})
edges = [e for e, _ in weighted]
axes = heatmap.varying(columns)
last = common.select_edge_axis(axes, weighted)
spec = logic.heat_spec(heat, edges, last)
st.caption(
    "Hover a square for its cell and outcome; click it to open the cell at that scenario. A tick on an edge (red: introduced, "
    "green: fixed) is a release that attribution found changed the row there; a triangle marks the new side where the "
    "release before it is elsewhere in this order. Click a tick to open that failure."
    + (" Columns are narrower than a pixel: narrow the filters to tell them apart." if len(columns) > heatmap.LABEL_LIMIT * 2 else "")
)
event = st.vega_lite_chart(spec, key="matrix_heatmap", on_select="rerun", selection_mode=[heatmap.PICK, heatmap.EDGE])
cell_id, scenario, signature = heatmap.picked(logic.chart_selection(event))
if signature:
    st.switch_page(common.PAGES["failures"], query_params={"signature": signature})
if cell_id:
    common.open_cell(cell_id, scenario)

common.keep("matrix_table", False)
table_on = st.toggle("Table: one row per cell", key="matrix_table", help="the grid of words, one row per cell, one column per scenario")
common.remember("matrix_table")
if table_on:
    matrix, shown, options, colours = _table(common.version(), chosen, by_gpu)
    legend = " ".join(
        f"<span style='{logic.colour_of(s)};padding:1px 6px;border-radius:3px;margin-right:4px'>{s}</span>" for s in logic.COLOURS
    )
    st.markdown(legend, unsafe_allow_html=True)
    st.caption("Select a cell of the grid to open that cell; a scenario column opens it at that scenario.")
    config: dict[str, Any] = {"gpu": st.column_config.TextColumn("GPU", pinned=True, width="small")}
    for axis in matrix.axes:
        config[axis] = st.column_config.TextColumn(axis, pinned=True, width="small")
    for name in matrix.scenarios:
        config[name] = st.column_config.MultiselectColumn(name, width=125, help=name, options=options, color=colours)
    grid = st.dataframe(
        shown,
        key="matrix_grid",
        on_select="rerun",
        selection_mode="single-cell",
        hide_index=True,
        column_order=[c for c in shown.columns if c != "cell_id"],  # the axes name the cell; its id stays for the click
        column_config=config,
        height=min(38 + 35 * len(matrix.frame), 640),
    )
    picked = logic.selected_cell(matrix, grid.selection)
    if picked:
        common.open_cell(*picked)

if st.toggle("Outcomes by scenario (chart)", key="matrix_chart"):
    import altair as alt  # 0.2 s to import: only for the chart, on demand

    matrix = _table(common.version(), chosen, by_gpu)[0]
    long = matrix.frame.melt(id_vars=["cell_id"], value_vars=list(matrix.scenarios), var_name="scenario", value_name="word")
    long = long[long["word"] != ""]
    long["status"] = long["word"].map(logic.status_of)
    counts = long.groupby(["scenario", "status"]).size().reset_index(name="cells")
    chart = (
        alt.Chart(pd.DataFrame(counts))
        .mark_bar()
        .encode(
            y=alt.Y("scenario:N", title=None),
            x=alt.X("cells:Q", stack="zero"),
            color=alt.Color(
                "status:N",
                scale=alt.Scale(domain=list(logic.COLOURS), range=[logic.COLOURS[s] for s in logic.COLOURS]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["scenario", "status", "cells"],
        )
    )
    st.altair_chart(chart, width="stretch")
