"""Failures: each signature, the library it blames, the cells it hits, and where it was introduced and fixed.

For a test suite, each signature also counts the tests and files it hits, and lists where it
fails by class, then a class's tests, only when asked (dashboard/suite.py); a search box narrows it.
"""

from __future__ import annotations

import streamlit as st

from dashboard import common, logic, suite
from harness.storage import pages, suites

COLUMNS = [
    "signature",
    "blames",
    "introduced in",
    "fixed in",
    "machine difference",
    "status",
    "cells",
    "outcomes",
    "flaky",
    "scenarios",
    "runs",
    "last seen",
]

st.title("Failures")
common.data_banner()
tests = common.query(suites.holds_tests)
# a suite's pages search node ids instead of listing them: no scenario list to read
facets = common.query(pages.facets_without_scenarios if tests else pages.facets)
chosen = common.filters(facets, scenario=not tests)
search = suite.search_controls(failing=False)[0] if tests else ""

failures = common.query(suites.test_failure_summaries, chosen, search) if tests else common.query(pages.failure_summaries, chosen)
# the answers the summary gives (stored by `harness attribute` while current, else computed now)
answers = common.failure_answers()
summary = answers.summary
# For a suite, the tests and files each signature hits; its scenarios column holds its biggest groups.
columns = [*COLUMNS[: COLUMNS.index("cells") + 1], "tests", "files", *COLUMNS[COLUMNS.index("cells") + 1 :]] if tests else COLUMNS
if not failures:
    st.success("No failures among the outcomes that match these filters.")
else:
    table = suite.failure_table(failures, summary) if tests else logic.failures_frame(failures, summary)
    source = "stored by `harness attribute`, current" if answers.stored else "computed from the outcomes now, as the summary's"
    st.markdown(f"**{len(table)}** failure signature(s) over the filtered outcomes; answers {source}.")
    event = st.dataframe(
        table,
        key="failures_table",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        column_order=columns,
        column_config={
            "signature": st.column_config.TextColumn("signature", width="large"),
            "introduced in": st.column_config.TextColumn("introduced in", width="medium"),
            "fixed in": st.column_config.TextColumn("fixed in", width="medium"),
            "cells": st.column_config.ProgressColumn("cells", format="%d", min_value=0, max_value=int(table["cells"].max() or 1)),
            "last seen": st.column_config.DatetimeColumn("last seen", format="YYYY-MM-DD HH:mm"),
            **({"scenarios": st.column_config.TextColumn("where (most tests)", width="large")} if tests else {}),
        },
    )
    picked = common.picked_row(event, table)
    attributed = [i for i in range(len(table)) if table.iloc[i]["introduced in"] or table.iloc[i]["fixed in"]]
    # `?signature=` (a click on the Matrix's heatmap) chooses the row until one is selected here
    linked = [i for i in range(len(table)) if str(table.iloc[i]["signature"]) == st.query_params.get("signature")]
    index = picked if picked is not None else (linked or attributed or [0])[0]
    signature = str(table.iloc[index]["signature"])
    row = failures[index]

    if picked is not None or linked:
        st.subheader("Signature")
    else:
        st.subheader(f"Signature (the {'most widespread with transitions' if attributed else 'most widespread'}; select a row for another)")
    st.code(signature, language=None, wrap_lines=True)
    left, right = st.columns([3, 1])
    reach = (
        f"{row['tests']:,} test(s) in {row['groups']:,} class(es) or function(s) of {row['files']:,} file(s)"
        if tests
        else f"scenarios: {', '.join(row['scenarios'])}"
    )
    left.markdown(
        f"blames **{row.get('blamed_library') or '—'}** · {row['cells']} cell(s) · {row['outcomes']:,} outcome(s) · "
        f"{row['runs']} run(s) · {reach}"
    )
    if right.button("Open an affected cell", key="open_example"):
        common.open_cell(str(row["example_cell"]), str(row["example_scenario"] if tests else row["scenarios"][0]))
    if tests:
        suite.where_it_fails(signature, chosen, search)

    transitions = answers.of(signature)
    moves = [t for t in transitions if t["kind"] in ("introduced", "fixed")]
    if moves:
        import altair as alt  # 0.2 s to import: only where a timeline is drawn

        st.markdown(
            "**Version timeline** — where this failure was introduced (red) and fixed (green), per library: a dot is an exact "
            "release (it and the release before it both ran); a bar is a range, between the last version seen on the old side "
            "and the first on the new side, with releases in between that were not built"
        )
        known = {axis: values for axis, values in facets.items() if axis not in ("scenario", "run_id", "platform", "gpu")}
        for axis, marks in logic.timeline(moves, known).items():
            versions = marks.attrs["versions"]
            x = alt.X("version:N", sort=versions, scale=alt.Scale(domain=versions), title=axis, axis=alt.Axis(labelAngle=0))
            y = alt.Y("kind:N", title=None, sort=["introduced", "fixed"])
            colour = alt.Color(
                "kind:N", scale=alt.Scale(domain=list(logic.KIND_COLOURS), range=list(logic.KIND_COLOURS.values())), legend=None
            )
            tooltip = ["answer", "lines", "scenarios"]
            exact = (
                alt.Chart(marks[marks["exact"]])
                .mark_point(filled=True, opacity=0.9, size=160)
                .encode(x=x, y=y, color=colour, tooltip=tooltip)
            )
            ranges = (
                alt.Chart(marks[~marks["exact"]])
                .mark_rule(strokeWidth=6, opacity=0.6)
                .encode(
                    x=alt.X("before:N", sort=versions, scale=alt.Scale(domain=versions)), x2="version:N", y=y, color=colour, tooltip=tooltip
                )
            )
            st.altair_chart(alt.layer(ranges, exact).properties(height=110), width="stretch")
    if transitions and tests:
        with st.expander(f"All {len(transitions):,} transition(s), by class or function"):
            st.dataframe(suite.transition_groups(transitions), hide_index=True)
    elif transitions:
        with st.expander(f"All {len(transitions)} transition(s)"):
            st.dataframe(
                [
                    {
                        "scenario": t["scenario"],
                        "kind": t["kind"],
                        "axis": t["axis"],
                        "before": t["before"],
                        "after": t["after"],
                        "answer": logic.answer_text(t) if t["kind"] in ("introduced", "fixed") else t["description"],
                        "on": t.get("machine") or "",
                        "before cell": t["before_cell"],
                        "after cell": t["after_cell"],
                    }
                    for t in transitions
                ],
                hide_index=True,
            )
    else:
        st.caption("No transition of this signature: it fails on every version tried, or never between neighbouring versions.")

st.header("Bisections")
found = logic.bisections(common.query(pages.bisection_probes_by_axis))
if not found:
    st.caption("No bisection in this file (`harness bisect` stores its probes as a run of their own).")
for bisection in found:
    st.markdown(f"**{bisection.scenario}** along **{bisection.axis or '?'}** (run `{bisection.run_id}`): {bisection.answer}")
    st.dataframe(
        bisection.probes.style.map(logic.colour_of, subset=["status"]),
        hide_index=True,
        column_config={
            "signature": st.column_config.TextColumn(width="large"),
            "verdict": st.column_config.TextColumn(help="as `harness bisect` judges it: a probe that did not build or run is a skip"),
        },
    )
