"""History: each test (or scenario; for a large suite, each file) run by run in every cell, its changes marked, and why.

One row per test, or per file past `timeline.GROUP_PAST` matching tests (select a file's row for
its tests); per cell a strip of one bar per run, oldest left, coloured by status, a triangle where
it changed. Filters: a test id's substring, *changed in the last N runs*, *flaky across runs*,
and how many runs the strips show. Select a test for its runs × cells with a tooltip per square,
and the list of its changes with the cause `harness explain` stored and what moved between the
two runs (`/history?test=…`, a link you can share). Every count and square is decided in DuckDB
(harness/storage/timeline.py); only the rows on screen have their strips read.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import common, grouping, strips
from harness.storage import history, pages, suites, timeline

#: Rows on one page of the list.
PAGE = 25
#: The choices of how many runs the strips show (the newest), besides all of them.
WINDOWS = (10, 20, 30, 60)

st.title("History")
common.data_banner()
runs = common.query(timeline.runs)
if not runs:
    st.info("No run in this file yet.")
    st.stop()
if not common.query(history.is_split):
    st.info(
        "This file keeps every run's outcomes as a harness before the history split kept them: each run shows, but no "
        "change is found. `harness compact --db FILE` splits it once into its current state and what changed."
    )
noun = "test" if common.query(suites.holds_tests) else "scenario"

common.keep("h_window", 30 if len(runs) > 30 else "all")
options: list[Any] = [w for w in WINDOWS if w < len(runs)] + ["all"]
if st.session_state["h_window"] not in options:
    st.session_state["h_window"] = "all"
for key, default in (("h_search", ""), ("h_changed", 0), ("h_flaky", False), ("h_file", "")):
    common.keep(key, default)
st.session_state["h_changed"] = min(int(st.session_state["h_changed"] or 0), len(runs))
search_at, changed_at, flaky_at, window_at = st.columns([4, 2, 2, 1.3], vertical_alignment="bottom")
search = search_at.text_input(
    f"Search {noun} ids", key="h_search", placeholder="a part of the id: TestLora, float16, tests/quant/", help="a substring, any case"
)
within = changed_at.number_input(
    "Changed in the last N runs", min_value=0, max_value=len(runs), step=1, key="h_changed", help=f"0: every {noun}, changed or not"
)
flaky = flaky_at.toggle("Flaky across runs", key="h_flaky", help="flipped between a pass and a failure with nothing it depends on changed")
shown = window_at.selectbox("Runs shown", options, key="h_window", format_func=lambda w: "all" if w == "all" else f"newest {w}")
for key in ("h_search", "h_changed", "h_flaky", "h_window"):
    common.remember(key)
window = 0 if shown == "all" else int(shown)
visible = runs[-window:] if window else runs
chosen_file = str(st.session_state["h_file"])
wanted, within, flaky = search.strip(), int(within), bool(flaky)
question = (wanted, within, flaky, chosen_file, window)
if st.session_state.get("h_question") != question:  # another question: back to its first page
    st.session_state["h_question"] = question
    st.session_state["h_page"] = 1
common.keep("h_page", 1)
page = int(st.session_state["h_page"])
listing = common.query(
    timeline.listing,
    search=wanted,
    file=chosen_file,
    changed_within=within,
    flaky=flaky,
    window=window,
    offset=(page - 1) * PAGE,
    limit=PAGE,
)
columns = grouping.columns(common.query(pages.grid_cells))
level, rows = listing["level"], listing["rows"]

what = [f"changed in the last {within} run(s)" if within else "", "flaky across runs" if flaky else ""]
what += [f"matching `{wanted}`" if wanted else "", f"in `{chosen_file}`" if chosen_file else ""]
said = ", ".join(w for w in what if w)
first, last = visible[0]["started_at"], visible[-1]["started_at"]
head = f"**{listing['matched']:,}** {noun}(s)" + (f" {said}" if said else "")
if level == "file":
    head += f" in **{listing['total']:,}** file(s) — one row per file; select one for its tests"
st.markdown(f"{head} · {len(visible)} of {len(runs)} run(s), {first:%Y-%m-%d} … {last:%Y-%m-%d}, oldest left · {len(columns)} cell(s)")
if chosen_file and st.button("← every file", key="h_all_files"):
    st.session_state["h_file"] = ""
    common.remember("h_file")
    st.rerun()
st.html(strips.legend_html())

if not rows:
    st.info(f"No {noun} matches these filters." + (" Widen *changed in the last N runs*." if within else ""))
else:
    names = [str(r["name"]) for r in rows]
    # a file's strip counts the tests the filters admit, as its row does
    drawn = common.query(timeline.strips, names, level=level, window=window, search=wanted, changed_within=within, flaky=flaky)
    bar_width = max(40, len(visible) * (strips.BAR + strips.GAP) + 8)
    config: dict[str, Any] = {
        "name": st.column_config.TextColumn("file" if level == "file" else noun, pinned=True, width="large"),
        "tests": st.column_config.NumberColumn("tests", help="tests of the file these filters admit", width="small"),
        "changed": st.column_config.NumberColumn("changed", help="of them, those that changed among the runs shown", width="small"),
        "changes": st.column_config.NumberColumn("changes", help="cells × runs where it changed, among the runs shown", width="small"),
        "last change": st.column_config.TextColumn("last change", help="the newest run that changed it", width="small"),
        "failing now": st.column_config.NumberColumn(
            "failing now", help="tests failing now in some cell" if level == "file" else "cells where it fails now", width="small"
        ),
        "flaky": (st.column_config.NumberColumn if level == "file" else st.column_config.CheckboxColumn)(
            "flaky", help="flaky across runs: flipped with nothing it depends on changed", width="small"
        ),
    }
    for column in columns:
        config[column.label] = st.column_config.ImageColumn(column.label, width=bar_width, help=f"{column.varying} ({column.cell_id})")
    order = ["name", *(["tests", "changed"] if level == "file" else []), "changes", "last change", "failing now", "flaky"]
    event = st.dataframe(
        strips.table(listing, drawn, columns, visible),
        key=f"h_table:{level}:{question}:{page}",  # a new list starts with nothing selected
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        row_height=34,
        column_order=[*order, *(c.label for c in columns)],
        column_config=config,
    )
    pages_count = -(-listing["total"] // PAGE)
    if pages_count > 1:
        left, _ = st.columns([1, 4])
        left.number_input(f"Page (of {pages_count:,}; {PAGE} rows each)", min_value=1, max_value=pages_count, step=1, key="h_page")
    picked = common.picked_row(event, rows)
    if picked is not None and level == "file":
        st.session_state["h_file"] = names[picked]
        common.remember("h_file")
        st.rerun()
    if picked is not None:
        st.query_params["test"] = names[picked]

test = st.query_params.get("test") or (str(rows[0]["name"]) if rows and level == "test" else "")
if not test:
    st.caption(f"Select a file for its tests, then a {noun} for its runs and changes.")
    st.stop()

st.subheader(test.split("::", 1)[-1])
st.caption(f"`{test}`" + ("" if st.query_params.get("test") else " — the list's first row; select another"))
story_strips = common.query(timeline.strips, [test], level="test", window=window)
if not story_strips:
    st.info(f"This {noun} has no outcome among the runs shown.")
    st.stop()
changes = common.query(timeline.story, test, window=window)
st.vega_lite_chart(strips.story_spec(story_strips, columns, visible, changes), width="content")
if not changes:
    st.markdown("**No change** among the runs shown: the same outcome in each cell from run to run.")
else:
    st.markdown(f"**{len(changes)} change(s)** among the runs shown, newest first:")
    st.dataframe(
        strips.changes_table(changes, columns, runs),
        hide_index=True,
        column_config={
            "signature": st.column_config.TextColumn(width="large"),
            "cause": st.column_config.TextColumn(width="large"),
            "moved": st.column_config.TextColumn(width="large"),
        },
    )
