"""Cell: one combination of versions, its whole story: freeze, every scenario's outcome, tracebacks, metrics, hosts.

For a test suite: counts per file, the cell's failure signatures, and its outcomes failures first,
searchable, at most 500 at once; a test's traceback is read when it is chosen (dashboard/suite.py).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import common, logic, suite
from harness.storage import pages, queries, recorded, suites

st.title("Cell")
common.data_banner()
cells = common.query(pages.grid_cells)
ids = [str(c["cell_id"]) for c in cells]
wanted = st.query_params.get("cell")
if wanted in ids and st.session_state.get("cell_from_url") != wanted:
    st.session_state["cell_pick"] = wanted  # a link (or a click in the matrix) chose the cell
    st.session_state["cell_from_url"] = wanted
common.keep("cell_pick", ids[0])
if st.session_state["cell_pick"] not in ids:
    st.session_state["cell_pick"] = ids[0]
cell_id = st.selectbox("cell", ids, key="cell_pick")
common.remember("cell_pick")
if st.query_params.get("cell") != cell_id:
    st.query_params["cell"] = cell_id
focus = st.query_params.get("scenario", "")

records = common.query(recorded.cell_records, cell_id)
tests = common.query(suites.holds_tests)
outcomes = [] if tests else common.query(queries.cell_outcomes, cell_id)  # a suite's 20,000 are read by group, on demand
axes: dict[str, Any] = next((c for c in cells if c["cell_id"] == cell_id), {})
versions = {a: axes.get(a) or (axes.get("versions") or {}).get(a, "") for a in logic.axis_order((axes.get("versions") or {}).keys())}
versions = versions or {a: axes.get(a, "") for a in logic.AXIS_ORDER if axes.get(a)}

if versions:
    for column, (axis, value) in zip(st.columns(len(versions)), versions.items()):
        column.metric(axis, value or "—")
else:  # outcomes stored before (or without) the cell's env record: a live sweep, a partial merge
    st.caption("No environment record for this cell yet: its versions show once the sweep records its env.")
if st.button("Compare with the nearest cell", key="compare_from_cell", help="the cell that differs in the fewest axes"):
    st.switch_page(common.PAGES["compare"], query_params={"a": cell_id, "b": logic.nearest_cell(cell_id, cells)})

if tests:
    st.subheader("Tests")
    suite.cell_tests(cell_id, focus)
else:
    st.subheader("Scenarios")
    table = logic.scenario_table(outcomes)
    st.dataframe(
        table.style.map(logic.colour_of, subset=["status"]),
        hide_index=True,
        column_config={"signature": st.column_config.TextColumn(width="large"), "seconds": st.column_config.NumberColumn(format="%.1f s")},
    )

    st.subheader("Outcomes")
    st.caption("The chosen scenario and failures first; select one for its message, traceback and the tail of its output.")
    order = sorted(outcomes, key=lambda r: (r["scenario"] != focus, r["status"] == "pass", r["status"] == "not_applicable", r["scenario"]))
    listing = pd.DataFrame(
        [
            {
                "scenario": r["scenario"],
                "status": r["status"],
                "run": r["run_id"],
                "repeat": r["repeat"],
                "GPU": r.get("gpu") or "",
                "platform": r.get("platform") or "",
                "started": r.get("started_at"),
                "seconds": r.get("seconds"),
                "signature": r.get("signature") or "",
            }
            for r in order
        ],
        columns=["scenario", "status", "run", "repeat", "GPU", "platform", "started", "seconds", "signature"],
    )
    event = st.dataframe(
        listing.style.map(logic.colour_of, subset=["status"]),
        key=f"outcomes_{cell_id}",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        height=min(38 + 35 * len(listing), 320),
        column_config={
            "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
            "seconds": st.column_config.NumberColumn(format="%.1f"),
            "signature": st.column_config.TextColumn(width="large"),
        },
    )
    picked = common.picked_row(event, order)
    if order:
        row = order[0 if picked is None else picked]
        st.markdown(
            f"**{row['scenario']}** — **{row['status']}** · run `{row['run_id']}` · repeat {row['repeat']} · "
            f"{row.get('gpu') or '?'} · {row.get('platform') or '?'} · started {str(row.get('started_at') or '')[:19]} UTC · "
            f"{float(row.get('seconds') or 0):.1f} s" + (f" · blames **{row['blamed_library']}**" if row.get("blamed_library") else "")
        )
        if row.get("signature"):
            st.code(row["signature"], language=None, wrap_lines=True)
        if row.get("message"):
            st.text(row["message"])
        tabs = st.tabs(["traceback", "output (tail)", "metrics"])
        with tabs[0]:
            st.code(row.get("traceback") or "(no traceback)", language="python")
        with tabs[1]:
            st.code(row.get("output_tail") or "(no output)", language=None)
        with tabs[2]:
            st.json(row.get("metrics") or {})

    metrics = logic.metrics_table(outcomes)
    if not metrics.empty:
        st.subheader("Metrics")
        st.caption("What the scenarios recorded (parity numbers, peak memory, seconds); the newest value of each.")
        st.dataframe(metrics, hide_index=True)

st.subheader("Where and how it was built")
st.dataframe(
    pd.DataFrame(
        [
            {
                "run": r["run_id"],
                "built": r.get("built_at"),
                "GPU": (r.get("host") or {}).get("gpu", ""),
                "platform": (r.get("host") or {}).get("platform", ""),
                "host": (r.get("host") or {}).get("hostname", ""),
                "python": r.get("python"),
                "env": r.get("env_status"),
                "env seconds": r.get("env_seconds"),
                "reused": r.get("env_reused"),
                "harness": r.get("harness_version"),
            }
            for r in records
        ]
    ),
    hide_index=True,
)
for r in records:
    if r.get("env_status") != "ready" and r.get("env_message"):
        st.markdown(f"environment of run `{r['run_id']}`: **{r['env_status']}**")
        st.code(r["env_message"], language=None)
if records:
    latest = records[0]
    with st.expander(f"Full freeze ({len(latest.get('installed') or {})} packages, run {latest['run_id']})"):
        freeze = latest.get("installed") or {}
        st.dataframe(pd.DataFrame(sorted(freeze.items()), columns=["package", "version"]), hide_index=True)
        st.markdown("requested")
        st.json({"versions": latest.get("versions"), "requirements": latest.get("requirements")}, expanded=False)
        if latest.get("inherited"):
            st.markdown("inherited from the base interpreter")
            st.json(latest["inherited"], expanded=False)
        if latest.get("git_commits"):
            st.markdown("git commits")
            st.json(latest["git_commits"], expanded=False)
