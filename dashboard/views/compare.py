"""Compare: two cells side by side: which versions differ, which outcomes differ.

For a test suite, the tests that differ, counted by class, listed at most 500 at once (dashboard/suite.py).
"""

from __future__ import annotations

import streamlit as st

from dashboard import common, logic, suite
from harness.storage import pages, queries, recorded, suites

st.title("Compare")
common.data_banner()
cells = common.query(pages.grid_cells)
ids = [str(c["cell_id"]) for c in cells]
if len(ids) < 2:
    st.info("This file holds a single cell: nothing to compare it with.")
    st.stop()

for side, default in (("a", ids[0]), ("b", logic.nearest_cell(ids[0], cells))):
    wanted = st.query_params.get(side)
    key = f"compare_{side}"
    if wanted in ids and st.session_state.get(f"{key}_from_url") != wanted:
        st.session_state[key] = wanted
        st.session_state[f"{key}_from_url"] = wanted
    common.keep(key, default)
    if st.session_state[key] not in ids:
        st.session_state[key] = default

left, right = st.columns(2)
a = left.selectbox("A", ids, key="compare_a")
b = right.selectbox("B", ids, key="compare_b")
common.remember("compare_a")
common.remember("compare_b")
if st.query_params.get("a") != a or st.query_params.get("b") != b:
    st.query_params.update({"a": a, "b": b})
if left.button("Open A", key="open_a"):
    common.open_cell(a)
if right.button("Open B", key="open_b"):
    common.open_cell(b)

records_a, records_b = common.query(recorded.cell_records, a), common.query(recorded.cell_records, b)
freeze_a = (records_a[0].get("installed") if records_a else None) or {}
freeze_b = (records_b[0].get("installed") if records_b else None) or {}
by_id = {c["cell_id"]: c for c in cells}
for freeze, cell in ((freeze_a, by_id[a]), (freeze_b, by_id[b])):
    for axis in logic.AXIS_ORDER:  # an env that did not build has no freeze: show the requested versions
        if cell.get(axis) and axis not in freeze:
            freeze[axis] = str(cell[axis])
axes = logic.axis_order({*(by_id[a].get("versions") or {}), *(by_id[b].get("versions") or {})} or logic.AXIS_ORDER)

st.subheader("Versions")
versions = logic.freeze_diff(freeze_a, freeze_b, axes)
only_diff = st.toggle("only what differs", value=True, key="compare_only_diff")
shown = versions[versions["differs"] | versions["axis"]] if only_diff else versions
n_diff = int(versions["differs"].sum())
st.caption(f"{n_diff} package(s) differ, {int((versions['differs'] & versions['axis']).sum())} of them axes; axes are always listed.")
st.dataframe(
    shown.style.apply(lambda r: ["font-weight: bold; background-color: #fff9c4" if r["differs"] else "" for _ in r], axis=1),
    hide_index=True,
)

st.subheader("Outcomes")
if common.query(suites.holds_tests):
    suite.compare(a, b)
else:
    diff = logic.outcome_diff(common.query(queries.cell_outcomes, a), common.query(queries.cell_outcomes, b))
    st.caption(f"{int(diff['differs'].sum())} of {len(diff)} scenario(s) differ.")
    st.dataframe(
        diff.style.map(logic.colour_of, subset=["A", "B"]),
        hide_index=True,
        column_config={
            "A signature": st.column_config.TextColumn(width="large"),
            "B signature": st.column_config.TextColumn(width="large"),
        },
    )
