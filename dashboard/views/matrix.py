"""Matrix: cells × scenarios, coloured by status; selecting a cell of the grid opens it.

A test suite (node ids, `harness sweep --tests`) is drawn by dashboard/suite.py instead: files,
then classes, then tests × cells, with a search box.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import common, logic, suite
from harness.storage import queries

st.title("Matrix")
common.data_banner()
tests = common.query(queries.holds_tests)
# a suite's pages search node ids instead of listing them: no scenario list to read
facets = common.query(queries.facets_without_scenarios if tests else queries.facets)
chosen = common.filters(facets, scenario=not tests)
# with one GPU in the whole file, a row per cell and GPU is a row per cell
by_gpu = len(facets["gpu"]) > 1 and st.sidebar.toggle(
    "one row per cell and GPU", key="by_gpu", help="keep results from different GPUs apart"
)
if tests:
    suite.matrix(chosen, by_gpu)
    st.stop()


@st.cache_data(show_spinner=False, max_entries=64)
def _matrix(
    version: common.FileVersion, chosen: dict[str, list[str]], by_gpu: bool
) -> tuple[logic.Matrix, pd.DataFrame, list[str], list[str]]:
    counts = common.query(queries.matrix_counts, chosen, by_gpu=by_gpu)
    cells = common.query(queries.cell_summaries, chosen)
    matrix = logic.build_matrix(counts, cells, by_gpu=by_gpu)
    shown = matrix.frame.copy()
    for scenario in matrix.scenarios:  # one-word lists: a MultiselectColumn draws them as coloured tags
        shown[scenario] = shown[scenario].map(lambda w: [w] if w else [])
    options, colours = logic.tag_colours(w for s in matrix.scenarios for w in matrix.frame[s].unique())
    return matrix, shown, options, colours


matrix, shown, options, colours = _matrix(common.version(), chosen, by_gpu)
if matrix.empty:
    st.info("No outcomes match these filters.")
    st.stop()

totals = "  ·  ".join(f"{s}: {n:,}" for s, n in sorted(matrix.totals.items(), key=lambda kv: logic.SEVERITY.index(kv[0])))
st.markdown(f"**{len(matrix.frame):,}** cell(s) × **{len(matrix.scenarios)}** scenario(s) — {totals}")
legend = " ".join(
    f"<span style='{logic.colour_of(s)};padding:1px 6px;border-radius:3px;margin-right:4px'>{s}</span>" for s in logic.COLOURS
)
st.markdown(legend, unsafe_allow_html=True)
st.caption("Select a cell of the grid to open that cell; a scenario column opens it at that scenario.")

config: dict[str, Any] = {"gpu": st.column_config.TextColumn("GPU", pinned=True, width="small")}
for axis in matrix.axes:
    config[axis] = st.column_config.TextColumn(axis, pinned=True, width="small")
for scenario in matrix.scenarios:
    config[scenario] = st.column_config.MultiselectColumn(scenario, width=125, help=scenario, options=options, color=colours)
event = st.dataframe(
    shown,
    key="matrix_grid",
    on_select="rerun",
    selection_mode="single-cell",
    hide_index=True,
    column_order=[c for c in shown.columns if c != "cell_id"],  # the axes name the cell; its id stays for the click
    column_config=config,
    height=min(38 + 35 * len(matrix.frame), 640),
)
picked = logic.selected_cell(matrix, event.selection)
if picked:
    common.open_cell(*picked)

if st.toggle("Outcomes by scenario (chart)", key="matrix_chart"):
    import altair as alt  # 0.2 s to import: only for the chart, on demand

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
