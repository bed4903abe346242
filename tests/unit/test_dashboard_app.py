"""The dashboard, driven by Streamlit's AppTest over a small real DuckDB file; its query functions and pure logic.

The file holds two sweep runs (a CPU host and an H200 host) and one bisection:

    cell                  transformers accelerate  load (CPU, GPU)          lora (CPU, GPU)
    A tf5.6.2-acc1.13.0   5.6.2        1.13.0      error SIG_LOAD           pass
    B tf5.6.2-acc1.14.0   5.6.2        1.14.0      pass                     pass
    C tf5.23.0-acc1.13.0  5.23.0       1.13.0      error SIG_LOAD           error SIG_LORA
    D tf5.23.0-acc1.14.0  5.23.0       1.14.0      pass                     pass on CPU, fail on the GPU

so accelerate 1.14.0 fixes SIG_LOAD (attribution stores that), the newest set passing both
scenarios is B, and D passes both when the GPU is held to `cpu`.

The bisection's probes of accelerate 1.13.0 and 1.14.0 are cells A and B again, on the CPU and
later: they are the current state of A's and B's `load` there (17 current outcomes of the 19
stored; the CPU sweep's two are history).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboard/ is not part of the installed package: import it from the checkout

from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard import common, logic  # noqa: E402
from harness.analysis import export  # noqa: E402
from harness.analysis.attribution import attribute, seen_versions, to_rows  # noqa: E402
from harness.analysis.outcome import CellRecord, Outcome, Status  # noqa: E402
from harness.analysis.pin import Constraints  # noqa: E402
from harness.storage import attributed, pages, queries, suites  # noqa: E402
from harness.storage.store import Store  # noqa: E402
from harness.workflows.pinning import pin_from_store  # noqa: E402

APP = str(REPO / "dashboard" / "app.py")
SIG_LOAD = "TypeError: <class>.__new__() got an unexpected keyword argument '_is_hf_initialized' @ accelerate/utils/modeling.py:set_module"
SIG_LORA = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
SIG_GPU = "ScenarioFailed: logits differ by up to <n> @ scenarios/lora.py:<module>"
CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": []}
H200 = {"hostname": "runner", "platform": "linux-x86_64", "gpu_count": 1, "gpu": "NVIDIA H200", "gpus": [{"name": "NVIDIA H200"}]}
CELLS = {
    "A": ("5.6.2", "1.13.0"),
    "B": ("5.6.2", "1.14.0"),
    "C": ("5.23.0", "1.13.0"),
    "D": ("5.23.0", "1.14.0"),
}
#: (cell, scenario) -> what each host shows: (status, signature) for the CPU run, then the GPU run
SHOWS = {
    ("A", "load"): [("error", SIG_LOAD), ("error", SIG_LOAD)],
    ("A", "lora"): [("pass", ""), ("pass", "")],
    ("B", "load"): [("pass", ""), ("pass", "")],
    ("B", "lora"): [("pass", ""), ("pass", "")],
    ("C", "load"): [("error", SIG_LOAD), ("error", SIG_LOAD)],
    ("C", "lora"): [("error", SIG_LORA), ("error", SIG_LORA)],
    ("D", "load"): [("pass", ""), ("pass", "")],
    ("D", "lora"): [("pass", ""), ("fail", SIG_GPU)],
}


def cell_id(name: str, accelerate: str | None = None) -> str:
    tf, acc = CELLS[name]
    return f"torch2.13.0-tf{tf}-acc{accelerate or acc}-peft0.19.1-bnb0.49.2"


def versions(name: str, accelerate: str | None = None) -> dict[str, str]:
    tf, acc = CELLS[name]
    return {"torch": "2.13.0", "transformers": tf, "accelerate": accelerate or acc, "peft": "0.19.1", "bitsandbytes": "0.49.2"}


def record(run: str, name: str, accelerate: str | None = None) -> CellRecord:
    pins = versions(name, accelerate)
    freeze = {**pins, "torch": "2.13.0+cpu", "numpy": "2.3.4" if pins["transformers"] == "5.23.0" else "2.2.6", "safetensors": "0.7.0"}
    return CellRecord(
        run, cell_id(name, accelerate), "3.11", pins, [f"{k}=={v}" for k, v in pins.items()], freeze, {}, {}, "ready", "", 3.0, False
    )


def outcome(run: str, cell: str, scenario: str, status: str, signature: str, when: str) -> Outcome:
    blamed = signature.split(" @ ")[-1].split("/")[0] if " @ " in signature and not signature.startswith("Scenario") else ""
    failed = status != "pass"
    return Outcome(
        run,
        cell,
        scenario,
        0,
        Status(status),
        message=signature.split(": ", 1)[-1].split(" @ ")[0] if failed else "",
        signature=signature,
        signature_family=f"fam{abs(hash(signature)) % 1000}" if failed else "",
        blamed_library=blamed,
        exception_type=signature.split(":")[0] if failed else "",
        traceback=f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n{signature.split(" @ ")[0]}' if failed else "",
        output_tail=f"loading {scenario}\nRESULT {status}",
        seconds=2.5,
        metrics={"max_abs_logit_diff": 0.51 if failed else 2e-6, "peak_rss_mib": 1234.5},
        started_at=when,
    )


def build_store(path: Path) -> Path:
    with Store(path) as store:
        for host, run, day in ((CPU, "r-cpu", "2026-11-01"), (H200, "r-h200", "2026-11-02")):
            store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", host)
            for name in CELLS:
                store.record_cell(record(run, name))
            for (name, scenario), shows in SHOWS.items():
                status, signature = shows[0 if host is CPU else 1]
                store.add_outcome(outcome(run, cell_id(name), scenario, status, signature, f"{day}T10:00:00"))
        bisect = "bisect-load-accelerate"
        store.ensure_run(bisect, "matrix.toml", "", {}, "0.1.0", CPU)
        for i, (acc, status) in enumerate((("1.13.0", "error"), ("1.13.1", "error"), ("1.14.0", "pass"))):
            store.record_cell(record(bisect, "A", acc))
            store.add_outcome(
                outcome(bisect, cell_id("A", acc), "load", status, SIG_LOAD if status == "error" else "", f"2026-11-03T10:0{i}:00")
            )
        rows = queries.outcome_rows(store)
        store.replace_transitions(to_rows(attribute(rows, known_versions=seen_versions(rows))))
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("dash") / "results.duckdb")


@pytest.fixture
def app(db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(db))
    st.cache_data.clear()
    yield AppTest.from_file(APP, default_timeout=60)
    st.cache_data.clear()


def run(at: AppTest, page: str = "matrix", **params: str) -> AppTest:
    """Open a page (with query parameters, as a link would) and check it rendered without an exception."""
    if at.title:
        at.switch_page(f"views/{page}.py")
    elif page != "matrix":  # switch_page needs one run first: it registers the navigation
        at.run()
        at.switch_page(f"views/{page}.py")
    at.query_params.update(params)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def show_table(at: AppTest) -> AppTest:
    """The Matrix's table of one row per cell (under the heatmap, on demand; kept on across pages)."""
    at.toggle(key="matrix_table").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    return "\n".join(str(p) for p in parts)


# -- every page --------------------------------------------------------------------------------
@pytest.mark.parametrize("page", ["matrix", "failures", "cell", "compare", "pin"])
def test_every_page_renders_and_names_its_data(app: AppTest, db: Path, page: str) -> None:
    run(app, page)
    banner = app.caption[0].value
    assert str(db) in banner and "17 outcomes" in banner and "3 run(s)" in banner
    assert "NVIDIA H200, cpu" in banner  # where the data ran


def test_default_data_is_the_shipped_file_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    monkeypatch.delenv("HARNESS_DASHBOARD_DB", raising=False)
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    banner = at.caption[0].value
    assert "results/default.duckdb" in banner and "shipped with the harness" in banner
    assert at.selectbox(key="db_choice").value.endswith("default.duckdb")


def test_a_missing_file_is_one_error_naming_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(tmp_path / "nope.duckdb"))
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert "does not exist; run a sweep first" in at.error[0].value


def test_a_file_held_by_a_writer_is_an_error_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = build_store(tmp_path / "busy.duckdb")
    monkeypatch.setattr(common, "LOCK_WAIT", 0.5)
    # A process outside the harness keeps DuckDB's write lock on the file (harness writers hold it for moments).
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb, sys, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
        at = AppTest.from_file(APP, default_timeout=60).run()
        assert not at.exception
        message = at.error[0].value
        assert "stayed locked by" in message and f"(PID {holder.pid})" in message, message
        assert "close that connection or open it with duckdb.connect(..., read_only=True)" in message
    finally:
        holder.kill()
        holder.wait()


def test_the_dashboard_lets_go_of_the_file_when_idle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    path = build_store(tmp_path / "idle.duckdb")
    monkeypatch.setattr(common, "CONNECTION", "held")
    monkeypatch.setattr(common, "IDLE_SECONDS", 0.2)
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and str(path.resolve()) in common._held.stores  # held while in use
    time.sleep(1.0)
    assert str(path.resolve()) not in common._held.stores
    # ... so that even a process outside the harness can open it for writing now (harness sweeps never needed it free)
    writer = subprocess.run([sys.executable, "-c", f"import duckdb; duckdb.connect({str(path)!r}).close()"], capture_output=True, text=True)
    assert writer.returncode == 0, writer.stderr


# -- matrix --------------------------------------------------------------------------------------
LIVE_WRITER = """
import sys, time
from harness.storage import store
from harness.storage.store import Store
from harness.analysis.outcome import Outcome, Status
store.FOLD_SECONDS = 3600.0  # nothing folded until the end: the dashboard reads the journal
s = Store(sys.argv[1])
s.ensure_run("r-live", "matrix.toml", "", {}, "0.1.0", {"hostname": "ci", "platform": "linux-x86_64", "gpu": "cpu", "gpus": []})
for i in range(3):
    s.add_outcome(Outcome("r-live", "cell-live", f"scenario{i}", 0, Status.PASS, started_at="2026-11-04T10:00:00"))
s.report(queued=5, computed=3, running=[["cell-live", "scenario3", 0, "2026-11-04T10:00:01"]], state="running")
print("ready", flush=True)
for line in sys.stdin:  # one more outcome per line, then the end: fold and go
    if line.strip() == "more":
        s.add_outcome(Outcome("r-live", "cell-live", "scenario3", 0, Status.PASS, started_at="2026-11-04T10:00:02"))
        s.report(queued=5, computed=4, running=[], state="running")
        print("added", flush=True)
    else:
        s.close()
        print("closed", flush=True)
        time.sleep(60)
"""


def test_a_live_sweep_shows_on_every_page_with_its_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    path = build_store(tmp_path / "live.duckdb")
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "ready"
        at = AppTest.from_file(APP, default_timeout=60).run()
        assert not at.exception
        assert "20 outcomes" in at.caption[0].value  # 17 current in the file, 3 only in the sweep's journal
        live = at.info[0].value
        assert "**Live:** a sweep is writing to this file (run `r-live`" in live and "3 done · 1 running · 1 left" in live
        assert "`cell-live` · `scenario3`" in live
        for page in ("failures", "cell", "compare", "pin"):  # every page, not only the matrix
            at.switch_page(f"views/{page}.py").run()
            assert not at.exception and any("**Live:**" in info.value for info in at.info), page
        at.switch_page("views/matrix.py").run()
        writer.stdin.write("more\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "added"
        at.run()  # what the page's refresher does when the file changed: no restart, no cache to clear
        assert "21 outcomes" in at.caption[0].value and "4 done · 0 running · 1 left" in at.info[0].value
        # The dashboard's connection stands in no one's way: the sweep folds everything and ends.
        writer.stdin.write("end\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "closed"
        at.run()
        assert "21 outcomes" in at.caption[0].value and not any("**Live:**" in info.value for info in at.info)
        assert not (tmp_path / "live.duckdb.journal").exists()
    finally:
        writer.kill()
        writer.wait()


def test_a_sweep_that_stopped_says_rerun_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    path = build_store(tmp_path / "stopped.duckdb")
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    writer.kill()  # kill -9: no fold, no goodbye
    writer.wait()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and "20 outcomes" in at.caption[0].value  # its outcomes are not lost
    warning = at.warning[0].value
    assert "stopped before it finished (run `r-live`" in warning and "3 done, 2 left" in warning and "again to resume" in warning


def test_matrix_is_cells_by_scenarios_with_folded_statuses(app: AppTest) -> None:
    show_table(run(app))
    grid = app.dataframe[0].value
    assert list(grid["cell_id"]) == [cell_id("A"), cell_id("A", "1.13.1"), cell_id("B"), cell_id("C"), cell_id("D")]
    words = {row.cell_id: (list(row.load), list(row.lora)) for row in grid.itertuples()}
    assert words[cell_id("A")] == (["error"], ["pass"])
    assert words[cell_id("A", "1.13.1")] == (["error"], [])  # bisection probe: only `load`
    assert words[cell_id("D")] == (["pass"], ["fail 1/2 mixed"])  # CPU passes, the H200 fails
    assert "**5** cell(s) × **2** scenario(s)" in texts(app)


def test_matrix_filters_by_axis_gpu_and_run(app: AppTest) -> None:
    show_table(run(app))
    app.multiselect(key="f_transformers").set_value(["5.23.0"]).run()
    assert list(app.dataframe[0].value["cell_id"]) == [cell_id("C"), cell_id("D")]
    app.multiselect(key="f_gpu").set_value(["cpu"]).run()
    grid = app.dataframe[0].value
    assert list(grid.set_index("cell_id").loc[cell_id("D"), "lora"]) == ["pass"]
    app.multiselect(key="f_transformers").set_value([]).run()
    app.multiselect(key="f_gpu").set_value([]).run()
    app.multiselect(key="f_run").set_value(["bisect-load-accelerate"]).run()
    assert len(app.dataframe[0].value) == 3


def test_matrix_one_row_per_gpu_keeps_hosts_apart(app: AppTest) -> None:
    show_table(run(app))
    app.toggle(key="by_gpu").set_value(True).run()
    grid = app.dataframe[0].value
    d = grid[grid["cell_id"] == cell_id("D")].set_index("gpu")
    assert list(d.loc["cpu", "lora"]) == ["pass"] and list(d.loc["NVIDIA H200", "lora"]) == ["fail"]


def test_matrix_chart_of_outcomes_by_scenario_on_demand(app: AppTest) -> None:
    run(app)
    assert len(app.get("vega_lite_chart")) == 1  # the heatmap; the bar chart is drawn only when asked for
    app.toggle(key="matrix_chart").set_value(True).run()
    assert len(app.get("vega_lite_chart")) == 2


def test_filters_survive_a_visit_to_another_page(app: AppTest) -> None:
    show_table(run(app))
    app.multiselect(key="f_accelerate").set_value(["1.14.0"]).run()
    run(app, "cell")
    run(app, "matrix")
    assert app.multiselect(key="f_accelerate").value == ["1.14.0"]
    assert len(app.dataframe[0].value) == 2


def test_selecting_a_grid_cell_opens_that_cell_at_that_scenario(app: AppTest) -> None:
    show_table(run(app))
    row = list(app.dataframe[0].value["cell_id"]).index(cell_id("C"))
    # What the browser sends when a cell of the grid is clicked (AppTest accepts selection state).
    app.session_state["matrix_grid"] = {"selection": {"rows": [], "columns": [], "cells": [[row, "lora"]]}}
    app.run()
    assert not app.exception
    assert app.title[0].value == "Cell"
    assert app.selectbox(key="cell_pick").value == cell_id("C")
    assert app.query_params["cell"] == cell_id("C") and app.query_params["scenario"] == "lora"
    assert SIG_LORA in texts(app)  # the chosen scenario's outcome is the one shown


def test_matrix_heatmap_orders_cells_by_versions_and_marks_the_edges(app: AppTest, db: Path) -> None:
    run(app)
    # the busiest axis varies fastest: accelerate (load is fixed in 1.14.0 on two lines), so A and B are neighbours
    assert app.selectbox(key="m_last").value == "accelerate"
    with Store(db, read_only=True) as store:
        heat = logic.heat_data(pages.matrix_counts(store, {}), pages.cell_summaries(store, {}))
        transitions = attributed.transitions(store, "")
    spec = logic.heat_spec(heat, logic.stored_edges(transitions, {c.cell_id for c in heat.columns}), "accelerate")
    order = [c["cell"] for c in spec["datasets"]["columns"]]
    assert order == [cell_id("A"), cell_id("A", "1.13.1"), cell_id("B"), cell_id("C"), cell_id("D")]
    edge = [m for m in spec["datasets"]["marks"] if m["row"] == "load" and m["x"] == order.index(cell_id("B"))]
    assert edge and edge[0]["edge"] and "fixed in accelerate 1.14.0 (after 1.13.1)" in edge[0]["text"]
    squares = {(d["row"], order[d["x"]]) for d in spec["datasets"]["heat"]}
    assert squares == {(s, c) for s in ("load", "lora") for c in order} - {("lora", cell_id("A", "1.13.1"))}
    app.selectbox(key="m_last").set_value("transformers").run()
    assert not app.exception


def test_clicking_a_heatmap_square_opens_that_cell_at_that_scenario(app: AppTest) -> None:
    run(app)
    # What the browser sends when a square of the heatmap is clicked (the spec's `pick` selection)
    app.session_state["matrix_heatmap"] = {"selection": {"pick": [{"cell": cell_id("C"), "row": "lora"}], "edge": []}}
    app.run()
    assert not app.exception and app.title[0].value == "Cell"
    assert app.query_params["cell"] == cell_id("C") and app.query_params["scenario"] == "lora"


def test_clicking_a_heatmap_edge_opens_that_failure(app: AppTest) -> None:
    run(app)
    app.session_state["matrix_heatmap"] = {"selection": {"pick": [], "edge": [{"sig": SIG_LOAD}]}}
    app.run()
    assert not app.exception and app.title[0].value == "Failures"
    assert app.query_params["signature"] == SIG_LOAD
    assert app.code[0].value == SIG_LOAD  # the linked failure is the one shown, not the most widespread


# -- failures ------------------------------------------------------------------------------------
def test_failures_list_signatures_with_blame_reach_and_attribution(app: AppTest) -> None:
    run(app, "failures")
    table = app.dataframe[0].value.set_index("signature")
    assert list(table.index[:1]) == [SIG_LOAD]  # the most cells first
    assert table.loc[SIG_LOAD, "blames"] == "accelerate"
    assert table.loc[SIG_LOAD, "cells"] == 3  # A, C and the bisection's 1.13.1
    # Exact only where 1.14.0 and the release before it (1.13.1, the bisection's) both ran on one
    # machine: the CPU line with transformers 5.6.2. Elsewhere 1.13.1 was not built: a range.
    fixed = table.loc[SIG_LOAD, "fixed in"]
    assert "accelerate 1.14.0 (after 1.13.1) on cpu · linux-x86_64 · Python 3.11" in fixed
    assert "between accelerate 1.13.0 (fails) and 1.14.0 (passes); not built: 1.13.1 on NVIDIA H200 · linux-x86_64 · Python 3.11" in fixed
    assert table.loc[SIG_GPU, "status"] == "fail"
    assert app.get("vega_lite_chart"), "the version timeline is drawn"


def test_failures_show_the_bisection_and_its_answer(app: AppTest) -> None:
    run(app, "failures")
    page = texts(app)
    assert "**load** along **accelerate** (run `bisect-load-accelerate`)" in page
    assert "fixed in accelerate 1.14.0; still failing in 1.13.1" in page  # harness bisect's words
    probes = app.dataframe[-1].value
    assert list(probes["version"]) == ["1.13.0", "1.13.1", "1.14.0"]
    assert list(probes["verdict"]) == ["bad", "bad", "good"]


def test_failures_follow_the_filters(app: AppTest) -> None:
    run(app, "failures")
    app.multiselect(key="f_gpu").set_value(["cpu"]).run()
    assert SIG_GPU not in set(app.dataframe[0].value["signature"])


def test_open_an_affected_cell_from_a_failure(app: AppTest) -> None:
    run(app, "failures")
    app.button(key="open_example").click().run()
    assert app.title[0].value == "Cell"
    assert app.selectbox(key="cell_pick").value == cell_id("C")  # the first affected cell by id


# -- cell ----------------------------------------------------------------------------------------
def test_cell_page_tells_the_whole_story(app: AppTest) -> None:
    run(app, "cell", cell=cell_id("A"), scenario="load")
    assert [m.label for m in app.metric] == ["torch", "transformers", "accelerate", "peft", "bitsandbytes"]
    assert [m.value for m in app.metric][1:3] == ["5.6.2", "1.13.0"]
    scenarios = app.dataframe[0].value.set_index("scenario")
    assert scenarios.loc["load", "status"] == "error" and scenarios.loc["load", "blames"] == "accelerate"
    page = texts(app)
    assert "Traceback (most recent call last)" in page and "RESULT error" in page  # traceback, output tail
    assert "started 2026-11-0" in page and "NVIDIA H200 · linux-x86_64" in page  # when and where
    metrics = next(d.value for d in app.dataframe if "max_abs_logit_diff" in d.value.columns)
    assert set(metrics["scenario"]) == {"load", "lora"}
    built = next(d.value for d in app.dataframe if "GPU" in d.value.columns and "env" in d.value.columns)
    assert set(built["GPU"]) == {"cpu", "NVIDIA H200"}
    freeze = next(d.value for d in app.dataframe if list(d.value.columns) == ["package", "version"])
    assert dict(zip(freeze["package"], freeze["version"]))["torch"] == "2.13.0+cpu"


def test_cell_page_switches_cell_and_updates_the_link(app: AppTest) -> None:
    run(app, "cell", cell=cell_id("A"))
    app.selectbox(key="cell_pick").set_value(cell_id("D")).run()
    assert app.query_params["cell"] == cell_id("D")
    assert "fail 1/2 mixed" in set(app.dataframe[0].value["status"])


def test_compare_with_opens_the_nearest_cell(app: AppTest) -> None:
    run(app, "cell", cell=cell_id("B"))
    app.button(key="compare_from_cell").click().run()
    assert app.title[0].value == "Compare"
    assert app.selectbox(key="compare_a").value == cell_id("B")
    assert app.selectbox(key="compare_b").value in {cell_id("A"), cell_id("A", "1.13.1"), cell_id("D")}  # one axis apart


# -- compare -------------------------------------------------------------------------------------
def test_compare_shows_which_versions_and_which_outcomes_differ(app: AppTest) -> None:
    run(app, "compare", a=cell_id("A"), b=cell_id("D"))
    versions = app.dataframe[0].value.set_index("package")
    assert versions.loc["transformers", "differs"] and versions.loc["accelerate", "differs"]
    assert not versions.loc["torch", "differs"]
    assert versions.loc["numpy", "A"] == "2.2.6" and versions.loc["numpy", "B"] == "2.3.4"
    assert "safetensors" not in versions.index  # equal, not an axis: hidden while "only what differs" is on
    outcomes = app.dataframe[1].value.set_index("scenario")
    assert outcomes.loc["load", "differs"] and (outcomes.loc["load", "A"], outcomes.loc["load", "B"]) == ("error", "pass")
    app.toggle(key="compare_only_diff").set_value(False).run()
    assert "safetensors" in set(app.dataframe[0].value["package"])


# -- pin -----------------------------------------------------------------------------------------
def test_pin_asks_for_scenarios_first(app: AppTest) -> None:
    run(app, "pin")
    rates = app.dataframe[0].value.set_index("scenario")
    assert rates.loc["load", "cells passing"] == 2 and rates.loc["lora", "cells passing"] == 2  # D's lora is mixed
    assert not app.get("download_button")


def test_pin_chooses_the_newest_passing_set_with_evidence_and_downloads(app: AppTest) -> None:
    run(app, "pin")
    # the machine of the newest run (the bisection's, on the CPU), as `harness pin` defaults
    assert app.selectbox(key="pin_machine").value == "cpu"
    assert app.selectbox(key="pin_machine").options == ["cpu", "1x NVIDIA H200", "any"]
    app.selectbox(key="pin_machine").set_value("1x NVIDIA H200")
    app.multiselect(key="pin_scenarios").set_value(["load", "lora"]).run()
    assert not app.exception
    chosen = {m.label: m.value for m in app.metric}
    assert chosen["transformers"] == "5.6.2" and chosen["accelerate"] == "1.14.0"  # D fails lora on the H200
    assert "`r-h200`" in texts(app) and "`r-cpu`" not in texts(app)  # evidence: the runs on this machine only
    assert [b.proto.label for b in app.get("download_button")] == ["Download requirements.txt", "Download constraints.txt"]
    assert "transformers 5.23.0" in texts(app) or "5.23.0" in set(app.dataframe[-1].value["version"])  # why not newer
    app.selectbox(key="pin_machine").set_value("any").run()
    chosen = {m.label: m.value for m in app.metric}
    assert chosen["transformers"] == "5.6.2" and "`r-cpu`, `r-h200`" in texts(app)  # every machine pooled: it passed on both
    app.selectbox(key="pin_gpu").set_value("cpu").run()
    chosen = {m.label: m.value for m in app.metric}
    assert chosen["transformers"] == "5.23.0" and chosen["accelerate"] == "1.14.0"
    app.selectbox(key="pin_gpu").set_value("any")
    app.selectbox(key="pin_machine").set_value("cpu").run()
    chosen = {m.label: m.value for m in app.metric}
    assert chosen["transformers"] == "5.23.0" and chosen["accelerate"] == "1.14.0"  # D's lora failure was the H200's


def test_pin_says_why_nothing_passes(app: AppTest) -> None:
    run(app, "pin")
    app.selectbox(key="pin_accelerate").set_value("1.13.0")
    app.multiselect(key="pin_scenarios").set_value(["load"]).run()
    assert "No stored version set passes" in app.error[0].value
    assert "load" in app.code[0].value


def test_pin_button_chooses_every_scenario_that_passes_somewhere(app: AppTest) -> None:
    run(app, "pin")
    app.button(key="pin_all_passing").click().run()
    assert app.multiselect(key="pin_scenarios").value == ["load", "lora"]


def test_pin_files_hold_the_full_freeze(db: Path) -> None:
    with Store(db, read_only=True) as store:
        result = pin_from_store(store, ["load", "lora"], Constraints(gpu="cpu"))
    assert "transformers==5.23.0\naccelerate==1.14.0" in export.requirements_txt(result)
    constraints = export.constraints_txt(result)
    assert "numpy==2.3.4" in constraints and "torch==2.13.0+cpu" in constraints  # beyond the axes
    assert "on cpu · linux-x86_64 · Python 3.11" in result.header()  # the machine it passed on


# -- the query functions the pages use -------------------------------------------------------
def test_store_queries_are_read_only_and_filter_on_any_axis(db: Path) -> None:
    with Store(db, read_only=True) as store:
        assert queries.overview(store)["outcomes"] == 17  # the current state (see the module's docstring)
        facets = pages.facets(store)
        assert facets["gpu"] == ["NVIDIA H200", "cpu"] and "1.13.1" in facets["accelerate"]
        counts = pages.matrix_counts(store, {"accelerate": ["1.14.0"], "scenario": ["lora"]})
        assert {(r["cell_id"], r["pass"], r["fail"]) for r in counts} == {(cell_id("B"), 2, 0), (cell_id("D"), 1, 1)}
        # an axis outside the five columns is read from the cells' JSON
        assert len(pages.matrix_counts(store, {"numpy": ["2.3.4"]})) == 4
        runs = {r["run_id"]: r for r in pages.run_summaries(store)}
        # r-cpu's `load` of A and B are history now (a bisection's probe is never merged into another run's span)
        assert runs["bisect-load-accelerate"]["bisection"] and runs["r-cpu"]["outcomes"] == 8
        found = attributed.transitions(store, "", SIG_LOAD)  # per machine: the CPU's two lines, the H200's two
        assert [t["axis"] for t in found] == ["accelerate"] * 4
        assert sorted(t["machine"].split(" · ")[0] for t in found) == ["NVIDIA H200", "NVIDIA H200", "cpu", "cpu"]
        outcomes = queries.cell_outcomes(store, cell_id("A"))
        assert outcomes[0]["metrics"]["peak_rss_mib"] == 1234.5 and outcomes[0]["traceback"]


# -- pure logic ----------------------------------------------------------------------------------
FOLDS = [
    ({"pass": 3}, "pass"),
    ({"error": 2}, "error"),
    ({"pass": 1, "not_applicable": 1}, "pass"),  # a GPU scenario on a CPU run says nothing
    ({"not_applicable": 2}, "not_applicable"),
    ({"pass": 2, "fail": 1}, "fail 1/3 mixed"),
    ({"error": 1, "fail": 1}, "error 1/2"),  # two failures, no pass: the worst is named
    ({"crash": 1, "pass": 0}, "crash"),
    ({}, ""),
]


@pytest.mark.parametrize(("counts", "word"), FOLDS)
def test_fold(counts: dict[str, int], word: str) -> None:
    assert logic.fold(counts) == word


def test_versions_sort_as_versions_and_sources_last() -> None:
    values = ["5.10.4", "git+https://github.com/x/y@main", "5.6.2", "5.23.0", "5.6.10"]
    assert logic.sort_values(values) == ["5.6.2", "5.6.10", "5.10.4", "5.23.0", "git+https://github.com/x/y@main"]


def test_selected_cell_maps_grid_positions_to_cells() -> None:
    matrix = logic.build_matrix(
        [{"cell_id": "b", "scenario": "s", "pass": 1}, {"cell_id": "a", "scenario": "s", "error": 1}],
        [{"cell_id": "a", "torch": "2.10.0"}, {"cell_id": "b", "torch": "2.9.0"}],
    )
    assert list(matrix.frame["cell_id"]) == ["b", "a"]  # ordered along the axes: 2.9.0 before 2.10.0
    assert logic.selected_cell(matrix, {"cells": [[1, "s"]]}) == ("a", "s")
    assert logic.selected_cell(matrix, {"cells": [[0, "torch"]]}) == ("b", "")
    assert logic.selected_cell(matrix, {"rows": [1], "cells": []}) == ("a", "")
    assert logic.selected_cell(matrix, {"rows": [], "cells": []}) is None


def test_nearest_cell_differs_in_fewest_axes() -> None:
    cells = [
        {"cell_id": c, "torch": "2", "transformers": tf, "accelerate": acc}
        for c, tf, acc in [("x", "1", "1"), ("y", "2", "2"), ("z", "1", "2")]
    ]
    assert logic.nearest_cell("x", cells) == "z"


def test_the_browser_install_script_is_harmless_where_chromium_exists() -> None:
    script = REPO / "dashboard" / "install_browser.sh"
    assert os.access(script, os.X_OK)
    if Path("/usr/bin/chromium").exists():
        assert subprocess.run(["bash", str(script)], capture_output=True, timeout=60).returncode == 0


def test_cli_dashboard_rejects_a_missing_file() -> None:
    from harness.cli import main

    assert main(["dashboard", "--db", "no/such/file.duckdb"]) == 2


# -- a test suite: node ids grouped by file and class, searched in DuckDB -------------------------
from dashboard import grouping  # noqa: E402

SIG_SUITE = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
#: node id -> (status in cell A, status in cell C) for the suite's run; `flaky` also has a second run.
SUITE = {
    "tests/test_a.py::TestLora::test_merge[4bit]": ("pass", "error"),
    "tests/test_a.py::TestLora::test_merge[8bit]": ("pass", "error"),
    "tests/test_a.py::TestLora::test_load": ("pass", "pass"),
    "tests/test_a.py::test_plain[x::y]": ("pass", "pass"),  # a parameter holding `::`: still a module-level function
    "tests/test_a.py::test_flaky": ("pass", "pass"),
    "tests/test_b.py::TestQuant::test_skip": ("not_applicable", "not_applicable"),
    "tests/test_b.py::TestQuant::test_known": ("xfail", "xfail"),
    "tests/test_b.py::test_100%_literal": ("pass", "pass"),
}


@pytest.fixture(scope="module")
def suite_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "suite.duckdb"
    with Store(path) as store:
        for run in ("s1", "s2"):
            store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", CPU)
            for name in ("A", "C"):
                store.record_cell(record(run, name))
        for node, shows in SUITE.items():
            for name, status in zip(("A", "C"), shows):
                store.add_outcome(outcome("s1", cell_id(name), node, status, SIG_SUITE if status == "error" else "", "2026-11-01T10:00:00"))
        # the second run: test_flaky errors once in cell A (worst of its runs: error; `fold`: mixed)
        store.add_outcome(outcome("s2", cell_id("A"), "tests/test_a.py::test_flaky", "error", SIG_SUITE, "2026-11-02T10:00:00"))
    return path


def test_suite_counts_tests_per_file_and_cell_by_their_worst_status(suite_db: Path) -> None:
    with Store(suite_db, read_only=True) as store:
        rows = {(r["name"], r["cell_id"]): r for r in suites.test_group_counts(store)}
        groups = {(r["name"], r["cell_id"]): r for r in suites.test_group_counts(store, level="group", within={"file": "tests/test_a.py"})}
        searched = suites.test_group_counts(store, search="MERGE[")  # case-insensitive, `[` literal
        literal = suites.test_group_counts(store, search="100%")  # `%` is no wildcard
        failing = {r["name"] for r in suites.test_group_counts(store, failing_only=True)}
    a = rows[("tests/test_a.py", cell_id("A"))]
    assert (a["tests"], a["pass"], a["error"]) == (5, 4, 1)  # test_flaky once, by its worst run
    c = rows[("tests/test_a.py", cell_id("C"))]
    assert (c["tests"], c["pass"], c["error"], c["signature"]) == (5, 3, 2, SIG_SUITE)
    b = rows[("tests/test_b.py", cell_id("A"))]
    assert (b["tests"], b["pass"], b["not_applicable"], b["xfail"]) == (3, 1, 1, 1)
    assert set(groups) == {(g, cell_id(n)) for g in ("tests/test_a.py", "tests/test_a.py::TestLora") for n in ("A", "C")}
    assert groups[("tests/test_a.py::TestLora", cell_id("C"))]["error"] == 2
    assert groups[("tests/test_a.py", cell_id("A"))]["tests"] == 2  # the module-level functions, test_plain[x::y] among them
    assert {(r["name"], r["tests"]) for r in searched} == {("tests/test_a.py", 2)}
    assert [r["name"] for r in literal] == ["tests/test_b.py", "tests/test_b.py"]
    assert failing == {"tests/test_a.py"}


def test_suite_tests_failures_and_diff_are_capped_and_grouped(suite_db: Path) -> None:
    with Store(suite_db, read_only=True) as store:
        listed = suites.test_counts(store, within={"group": "tests/test_a.py::TestLora"}, limit=2)
        failures = suites.test_failure_summaries(store)
        where = suites.test_signature_groups(store, SIG_SUITE)
        tests = suites.test_signature_tests(store, SIG_SUITE, "tests/test_a.py::TestLora")
        cell = suites.test_outcomes(store, cell_id("C"), limit=1)
        diff = suites.test_diff(store, cell_id("A"), cell_id("C"))
    assert listed["tests"] == 3 and {r["scenario"] for r in listed["rows"]} == {
        "tests/test_a.py::TestLora::test_load",
        "tests/test_a.py::TestLora::test_merge[4bit]",
    }
    (failure,) = failures
    assert (failure["signature"], failure["tests"], failure["groups"], failure["files"]) == (SIG_SUITE, 3, 2, 1)
    assert failure["scenarios"] == ["tests/test_a.py::TestLora (2)", "tests/test_a.py (1)"]
    assert [(w["group"], w["tests"]) for w in where] == [("tests/test_a.py::TestLora", 2), ("tests/test_a.py", 1)]
    assert [t["test"] for t in tests] == ["tests/test_a.py::TestLora::test_merge[4bit]", "tests/test_a.py::TestLora::test_merge[8bit]"]
    assert cell["tests"] == 8 and cell["rows"][0]["status"] == "error"  # failures first
    assert (diff["tests"], diff["differ"]) == (8, 3)
    assert {(r["scenario"], r["A"], r["B"]) for r in diff["rows"]} == {
        ("tests/test_a.py::TestLora::test_merge[4bit]", "pass", "error"),
        ("tests/test_a.py::TestLora::test_merge[8bit]", "pass", "error"),
        ("tests/test_a.py::test_flaky", "error", "pass"),
    }


#: Filters the suite's pages pass: axes, GPU, run, platform, cells and outcome columns, alone and together.
FILTERS: list[dict[str, list[str]]] = [
    {},
    {"transformers": ["5.23.0"]},
    {"accelerate": ["1.13.0"], "gpu": ["cpu"]},
    {"gpu": ["NVIDIA H200"]},
    {"platform": ["linux-x86_64"], "run_id": ["s2", "r-cpu"]},
    {"cell_id": [cell_id("A")], "status": ["error", "pass"]},
    {"numpy": ["2.2.6"]},  # an axis that is no column: read from each cell's freeze
    {"transformers": []},
]


@pytest.mark.parametrize("which", ["suite", "scenarios"])
def test_the_faster_reads_of_a_suite_return_what_the_general_ones_do(suite_db: Path, db: Path, which: str) -> None:
    """grid_cells and test_group_tallies decide run- and cell-level filters once per (run, cell):
    the same rows as cell_summaries and test_group_counts (less its signature) over outcomes_v."""
    with Store(suite_db if which == "suite" else db, read_only=True) as store:
        without = pages.facets(store)
        assert pages.facets_without_scenarios(store) == {k: v for k, v in without.items() if k != "scenario"}
        for filters in FILTERS:
            assert pages.grid_cells(store, filters) == pages.cell_summaries(store, filters), filters
            for search, failing, by_gpu, level, within in [
                ("", False, False, "file", None),
                ("merge", False, True, "file", None),
                ("", True, False, "group", None),
                ("TEST_", True, True, "group", {"file": "tests/test_a.py"}),
                ("100%", False, False, "group", {"group": "tests/test_b.py::TestQuant"}),
            ]:
                old = suites.test_group_counts(store, filters, search, level=level, within=within, failing_only=failing, by_gpu=by_gpu)
                new = suites.test_group_tallies(store, filters, search, level=level, within=within, failing_only=failing, by_gpu=by_gpu)
                assert new == [{k: v for k, v in r.items() if k != "signature"} for r in old], (filters, search, failing, level)


def test_a_filter_with_one_value_in_the_file_gets_no_widget(suite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(suite_db))
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60))
    # two transformers and two runs narrow something; one accelerate, torch, GPU and platform do not
    assert {m.key for m in at.multiselect} == {"f_transformers", "f_run"}
    assert not any(t.key == "by_gpu" for t in at.toggle)  # one GPU: a row per cell and GPU is a row per cell
    at.multiselect(key="f_transformers").set_value(["5.23.0"]).run()
    assert list(at.dataframe[0].value["tests"]) == [5, 3] and list(at.dataframe[0].value.columns[-1:]) == ["A"]
    st.cache_data.clear()


GROUP_WORDS = [
    ({"pass": 40}, "pass 40"),
    ({"pass": 5, "error": 1, "crash": 2}, "crash 2 · error 1 · pass 5"),  # failures first, worst first: the colour
    ({"pass": 3, "not_applicable": 2, "xfail": 1}, "pass 3 · not_applicable 2 · xfail 1"),  # skips say nothing: after the passes
    ({"not_applicable": 2}, "not_applicable 2"),
    ({"pass": 0}, ""),
]


@pytest.mark.parametrize(("counts", "word"), GROUP_WORDS)
def test_group_word(counts: dict[str, int], word: str) -> None:
    assert grouping.group_word(counts) == word
    assert logic.status_of(word) == (word.split()[0] if word else "")


def test_grid_columns_are_cells_in_version_order_named_by_what_varies() -> None:
    cells = [
        {"cell_id": "c2", "transformers": "5.23.0", "accelerate": "1.13.0", "torch": "2.13.0"},
        {"cell_id": "c1", "transformers": "5.6.2", "accelerate": "1.13.0", "torch": "2.13.0"},
    ]
    cols = grouping.columns(cells)
    assert [(c.label, c.cell_id, c.varying) for c in cols] == [("A", "c1", "tf 5.6.2"), ("B", "c2", "tf 5.23.0")]
    by_gpu = grouping.columns(cells, {"c1": ["cpu", "H200"], "c2": ["cpu"]})
    assert [(c.label, c.cell_id, c.gpu) for c in by_gpu] == [("A", "c1", "H200"), ("B", "c1", "cpu"), ("C", "c2", "cpu")]
    counts = [
        {"name": "t.py::TestA", "cell_id": "c1", "tests": 3, "pass": 3},
        {"name": "t.py::TestA", "cell_id": "c2", "tests": 3, "pass": 2, "fail": 1},
        {"name": "t.py", "cell_id": "c2", "tests": 1, "pass": 1},
    ]
    grid = grouping.build_grid(counts, cols, within="t.py")
    assert grid.frame.to_dict("records") == [
        {"name": "t.py", "shown": "(module-level functions)", "tests": 1, "A": "", "B": "pass 1"},
        {"name": "t.py::TestA", "shown": "TestA", "tests": 3, "A": "pass 3", "B": "fail 1 · pass 2"},
    ]
    assert grid.totals == {"pass": 6, "fail": 1}
    assert grouping.selected(grid, {"cells": [[1, "B"]]}) == ("t.py::TestA", cols[1])
    assert grouping.selected(grid, {"rows": [0]}) == ("t.py", None)
    assert grouping.selected(grid, {"cells": [[7, "B"]]}) is None


def test_the_matrix_of_a_suite_groups_by_file_then_class_and_searches(suite_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(suite_db))
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60))
    grid = at.dataframe[0].value
    assert list(grid["shown"]) == ["tests/test_a.py", "tests/test_b.py"] and list(grid["tests"]) == [5, 3]
    assert list(grid["A"]) == [["error 1 · pass 4"], ["pass 1 · not_applicable 1 · xfail 1"]]
    assert not any(m.key == "f_scenario" for m in at.multiselect)  # 20,000 ids are searched, never listed
    at.session_state["suite_grid:file:::False"] = {"selection": {"rows": [], "columns": [], "cells": [[0, "B"]]}}
    at.run()
    assert at.selectbox(key="m_file").value == "tests/test_a.py"
    assert list(at.dataframe[0].value["shown"]) == ["(module-level functions)", "TestLora"]
    at.text_input(key="f_search").set_value("merge").run()
    assert list(at.dataframe[0].value["shown"]) == ["TestLora"]
    assert "**2** test(s) matching `merge` in **1** file(s)" in texts(at)
    at.toggle(key="m_flat").set_value(True).run()
    assert list(at.dataframe[0].value["name"]) == [
        "tests/test_a.py::TestLora::test_merge[4bit]",
        "tests/test_a.py::TestLora::test_merge[8bit]",
    ]
    at.session_state["suite_grid:test:tests/test_a.py::True"] = {"selection": {"rows": [], "columns": [], "cells": [[1, "B"]]}}
    at.run()
    assert at.title[0].value == "Cell" and at.query_params["scenario"] == "tests/test_a.py::TestLora::test_merge[8bit]"
    assert SIG_SUITE in texts(at) and "tests/test_a.py::TestLora::test_merge[8bit]" in texts(at)  # its outcome, read on demand
    st.cache_data.clear()


@pytest.mark.parametrize("page", ["failures", "cell", "compare"])
def test_every_page_of_a_suite_renders_grouped(suite_db: Path, monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(suite_db))
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60), page)
    shown = texts(at)
    if page == "failures":
        assert "3 test(s) in 2 class(es) or function(s) of 1 file(s)" in shown and "**Where it fails**" in shown
    elif page == "cell":
        assert "**8** test(s) in **2** file(s)" in shown
    else:
        assert "3 of 8 test(s) differ, in 2 class(es) or function(s)." in shown
    st.cache_data.clear()


# -- the Pin page of a suite: every test listed, chosen as `harness pin --test/-m` chooses -------
def test_the_pin_list_counts_each_test_per_machine(suite_db: Path) -> None:
    with Store(suite_db, read_only=True) as store:
        rows = {r["scenario"]: (r["gpu"], r["passing"], r["tested"]) for r in suites.test_pass_counts(store)}
    assert len(rows) == len(SUITE)
    assert rows["tests/test_a.py::TestLora::test_merge[4bit]"] == ("cpu", 1, 2)
    assert rows["tests/test_a.py::test_flaky"] == ("cpu", 1, 2)  # an error in cell A's second run
    assert rows["tests/test_b.py::TestQuant::test_skip"] == ("cpu", 0, 0)


def test_the_pin_page_of_a_suite_lists_every_test_and_chooses_by_file_class_and_node_id(
    suite_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(suite_db))
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60), "pin")
    listing = at.dataframe[0].value
    assert list(listing["test"]) == sorted(SUITE)  # every node id, none left out of the list
    assert not any(m.key == "pin_scenarios" for m in at.multiselect)  # no multiselect of thousands of ids
    assert at.multiselect(key="pin_files").options == ["tests/test_a.py", "tests/test_b.py"]
    assert at.multiselect(key="pin_classes").options == ["tests/test_a.py::TestLora", "tests/test_b.py::TestQuant"]
    at.multiselect(key="pin_classes").set_value(["tests/test_b.py::TestQuant"]).run()
    # its two tests were skipped or xfail everywhere: they say nothing on cpu, and are left out as the CLI leaves them out
    assert "2 left out" in texts(at) and not any(b.key == "pin_go" for b in at.button)
    at.multiselect(key="pin_classes").set_value([])
    at.text_area(key="pin_tests").set_value("tests/test_a.py::TestLora::test_load\ntests/test_b.py::test_100%_literal\ntests/nope.py").run()
    assert "**2** test(s) chosen" in texts(at) and "`tests/nope.py`" in at.warning[0].value
    assert not at.metric  # nothing is pinned before it is asked for
    at.button(key="pin_go").click().run()
    assert {m.label: m.value for m in at.metric}["transformers"] == "5.23.0"  # both pass in C, the newer cell
    at.text_area(key="pin_tests").set_value("tests/test_a.py").run()
    at.button(key="pin_go").click().run()
    assert "No stored version set passes every chosen test on cpu." in at.error[0].value  # merge fails in C, flaky in A
    st.cache_data.clear()


def test_the_pin_page_chooses_tests_by_their_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    marked = {"t/test_m.py::test_gpu": ["gpu"], "t/test_m.py::test_slow_gpu": ["gpu", "slow"], "t/test_m.py::test_plain": []}
    path = tmp_path / "marked.duckdb"
    with Store(path) as store:
        store.ensure_run("s", "matrix.toml", "", {}, "0.1.0", CPU)
        store.record_cell(record("s", "A"))
        for node, markers in marked.items():
            store.add_outcome(
                Outcome(
                    "s",
                    cell_id("A"),
                    node,
                    0,
                    Status.PASS,
                    metrics={"markers": markers} if markers else {},
                    started_at="2026-11-01T10:00:00",
                )
            )
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    at = run(AppTest.from_file(APP, default_timeout=60), "pin")
    assert list(at.dataframe[0].value["markers"]) == ["gpu", "", "gpu, slow"]  # test_gpu, test_plain, test_slow_gpu
    at.text_input(key="pin_marker").set_value("gpu and not slow").run()
    assert "**1** test(s) chosen (1 tests in 1 groups: t/test_m.py (1))" in texts(at)
    at.text_input(key="pin_marker").set_value("not gpu").run()  # a test stored with no marker has none
    assert "**1** test(s) chosen" in texts(at)
    at.text_area(key="pin_tests").set_value("t/test_m.py::test_slow_gpu").run()  # -m within the other choices
    assert "chosen" not in texts(at)
    at.text_input(key="pin_marker").set_value("gpu and (").run()
    assert "not a marker expression" in at.warning[0].value
    st.cache_data.clear()
