"""Pin: choose a machine class and scenarios (and hold axes, a GPU); the newest version set that passes them all, to download.

A test suite's tests are chosen as `harness pin --test/-m` chooses them (files, classes, node ids,
folders, a marker expression) or picked in the list of every test (dashboard/suite.py), and pinned
when asked: the choice over thousands of tests takes a while.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import common, grouping, logic, suite
from harness.analysis import export
from harness.analysis.machines import ANY_MACHINE
from harness.analysis.pin import DEFAULT_RANKING, Constraints, PinResult
from harness.analysis.rows import machine_class
from harness.storage import pages, suites
from harness.storage.store import Store
from harness.workflows.pinning import machines_of, passing_by_machine, pin_and_never

st.title("Pin")
overview = common.data_banner()
tests = common.query(suites.holds_tests)
facets = common.query(pages.facets_without_scenarios if tests else pages.facets)
axes = logic.axis_order(a for a in facets if a not in ("scenario", "run_id", "platform", "gpu"))


@st.cache_data(show_spinner=False, max_entries=16)
def _pass_rates(version: common.FileVersion) -> pd.DataFrame:
    matrix = logic.build_matrix(common.query(pages.matrix_counts), common.query(pages.cell_summaries))
    rows = []
    for scenario in matrix.scenarios:
        words = matrix.frame[scenario]
        tested = words[words != ""]
        rows.append({"scenario": scenario, "cells passing": int((tested == "pass").sum()), "cells tested": len(tested)})
    return pd.DataFrame(rows)


def _newest_machine(store: Store) -> str:
    """`pinning.newest_machine_of`, its row read without `outcomes_v`'s join of every outcome (`pages.newest_host`)."""
    rows = pages.newest_host(store)
    return machine_class(rows[0]) if rows else ""


machines = common.query(machines_of)
# The known-good set is per machine class: by default the newest run's, as `harness pin` chooses.
common.keep("pin_machine", common.query(_newest_machine) or ANY_MACHINE)
if st.session_state["pin_machine"] not in (*machines, ANY_MACHINE):
    st.session_state["pin_machine"] = ANY_MACHINE
st.markdown(
    f"Choose your machine and the {'tests' if tests else 'scenarios'} that must pass; hold any axis you cannot change. "
    "The newest set where every one passed on that machine wins."
)
machine = st.selectbox(
    "machine",
    [*machines, ANY_MACHINE],
    key="pin_machine",
    help="a machine class: the GPU model and how many the run saw, or cpu. A scenario that cannot run there is not counted; "
    "`any` pools every machine (a set must then pass on each).",
)
common.remember("pin_machine")


def _passing_here(machine: str) -> list[str]:
    """The scenarios (tests) that pass somewhere on `machine` (ANY_MACHINE: anywhere): read when
    needed, for a suite only when no set passes (1.3 s at 2,000,000 outcomes)."""
    by_machine = common.query(passing_by_machine)
    return sorted({s for names in by_machine.values() for s in names}) if machine == ANY_MACHINE else by_machine.get(machine, [])


where = "somewhere" if machine == ANY_MACHINE else f"on {machine}"
scenarios: list[str] = []  # the scenarios chosen (a suite's tests: only `joined` names them)
if tests:
    selection = suite.pin_selection(str(machine))
    joined, count = selection.joined, selection.kept
else:
    here = _passing_here(str(machine))
    if st.button(f"Choose the {len(here)} scenario(s) that pass {where}", key="pin_all_passing"):
        st.session_state["pin_scenarios"] = here
    scenarios = common.multiselect("scenarios that must pass", facets["scenario"], "pin_scenarios", placeholder="choose one or more")
    joined, count = suite.SEP.join(scenarios), len(scenarios)
columns = st.columns(len(axes) + 1)
fixed: dict[str, str] = {}
for column, axis in zip(columns, axes):
    common.keep(f"pin_{axis}", "any")
    choice = column.selectbox(f"hold {axis}", ["any", *logic.sort_values(facets[axis])], key=f"pin_{axis}")
    common.remember(f"pin_{axis}")
    if choice != "any":
        fixed[axis] = str(choice)
common.keep("pin_gpu", "any")
gpu = columns[-1].selectbox("GPU", ["any", *facets["gpu"]], key="pin_gpu")
common.remember("pin_gpu")
st.caption(f"Newest means: compared on {', '.join(DEFAULT_RANKING)} in that order (releases before git or path sources).")

if not count:
    if not tests:  # a suite's every test is listed above, with the same counts
        rates = _pass_rates(common.version())
        st.dataframe(rates, hide_index=True, column_config={"cells passing": st.column_config.NumberColumn(help="every repeat passed")})
    st.stop()
if tests:
    # the choice over thousands of tests takes seconds: made when asked, then kept while the choice is the same
    wanted = (joined, str(machine), tuple(sorted(fixed.items())), str(gpu))
    if st.button(f"Pin the {count:,} test(s)", key="pin_go", type="primary"):
        st.session_state["pin_asked"] = wanted
    if st.session_state.get("pin_asked") != wanted:
        st.stop()


def _held(fixed: dict[str, str], gpu: str, machine: str) -> Constraints:
    """Exact axis versions (`==`; `2.13.0` also admits `2.13.0+cpu`), a GPU and a machine class: what the page holds."""
    return Constraints(tuple((axis, f"=={value}") for axis, value in sorted(fixed.items()) if value), gpu, machine=machine)


def _pin(
    store: Store, joined: str, held: Constraints, ranking: tuple[str, ...], machine: str | None
) -> tuple[PinResult | None, list[str], list[str]]:
    """`pin_and_never` of the names `joined` holds: the result when a set passes; when none does,
    the lines that say why (`describe`) instead, worked out with the pin rather than on every rerun,
    and kept without the result (its 78,000 names and 7,000 blockers took 0.04 s to pickle into the
    cache and as much to read back on every rerun). Streamlit hashes one string for the cache key,
    not a tuple of a suite's 78,000 names one by one (0.7 s of a filter change at 2,000,000
    outcomes). A tuple, not a class of this page: the page runs as `__main__`, whose classes the
    cache cannot pickle."""
    result, never = pin_and_never(store, joined.split(suite.SEP), held, ranking, machine)
    return (result, never, []) if result.found else (None, never, result.describe())


held = _held(fixed, "" if gpu == "any" else str(gpu), "" if machine == ANY_MACHINE else str(machine))
with st.spinner("choosing…"):
    # a suite's chosen tests that never passed on the machine come with the pin, asked of themselves
    result, never, lines = common.query(_pin, joined, held, DEFAULT_RANKING, str(machine) if tests else None)
if result is None:
    chosen = "test" if tests else "scenario"
    st.error(f"No stored version set passes every chosen {chosen} {where.removeprefix('somewhere')}".rstrip() + ".")
    if not tests:
        passing = set(_passing_here(str(machine)))
        never = [s for s in scenarios if s not in passing]
    if never:
        st.warning(f"Never passed {where} (not applicable there, or failing in every cell): {grouping.name_many(never)}")
    st.code("\n".join(lines), language=None)
    st.stop()

st.subheader("Newest passing set" + ("" if machine == ANY_MACHINE else f" on {machine}"))
cols = st.columns(len(result.versions))
for column, (axis, value) in zip(cols, result.versions):
    column.metric(axis, value)
st.markdown(
    f"Evidence: cell {', '.join(f'`{c}`' for c in result.cell_ids)} · run(s) {', '.join(f'`{r}`' for r in result.runs)} · "
    f"on {'; '.join(result.machines) or '?'} · "
    f"{result.first_seen} … {result.last_seen} UTC · {result.qualifying} of {result.candidates} candidate cell(s) pass everything"
)
st.dataframe(
    pd.DataFrame([{"scenario": e.scenario, "passed": e.passed, "runs": ", ".join(e.runs)} for e in result.evidence]), hide_index=True
)

left, middle, right = st.columns(3)
left.download_button(
    "Download requirements.txt", export.requirements_txt(result), file_name="requirements.txt", mime="text/plain", key="dl_requirements"
)
middle.download_button(
    "Download constraints.txt", export.constraints_txt(result), file_name="constraints.txt", mime="text/plain", key="dl_constraints"
)
if right.button("Open the cell", key="pin_open_cell"):
    common.open_cell(result.cell_ids[0])
st.code(export.install_command(result), language="bash")

if result.excluded:
    st.subheader("Newer versions not used")
    st.dataframe(
        pd.DataFrame([{"axis": e.axis, "version": e.version, "why": e.describe()} for e in result.excluded]),
        hide_index=True,
        column_config={"why": st.column_config.TextColumn(width="large")},
    )
else:
    st.caption("No newer version of any axis was tested: this is the newest stored set.")
