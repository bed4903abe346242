"""The Pin page of a suite keeps what it works out per choice (the tests chosen, counted and named:
`suite._selected`; the files and classes: `suite._test_listing`; the pin and why nothing passes:
`views/pin.py`'s `_pin`) under the results file's version: once a sweep writes new outcomes, the
same choice shows the new answer, never the one kept from before."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboard/ is not part of the installed package: import it from the checkout

from streamlit.testing.v1 import AppTest  # noqa: E402

from harness.analysis.outcome import CellRecord, Outcome, Status  # noqa: E402
from harness.storage.store import Store  # noqa: E402

APP = str(REPO / "dashboard" / "app.py")
CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": []}
SIGNATURE = "KeyError: <key> @ transformers/models/gemma4/modeling_gemma4.py:forward"
CELLS = {"A": "5.6.2", "C": "5.23.0"}  # cell -> its transformers
SKIPPED, BROKEN = "t/test_x.py::TestK::test_skip", "t/test_x.py::TestK::test_bad"


def cell_id(name: str) -> str:
    return f"torch2.13.0-tf{CELLS[name]}-acc1.13.0"


def sweep(path: Path, run: str, day: str, shows: dict[str, dict[str, str]]) -> None:
    """One night's sweep of both cells: node id -> cell -> status."""
    with Store(path) as store:
        store.ensure_run(run, "matrix.toml", "", {}, "0.1.0", CPU)
        for name, tf in CELLS.items():
            pins = {"torch": "2.13.0", "transformers": tf, "accelerate": "1.13.0"}
            store.record_cell(CellRecord(run, cell_id(name), "3.11", pins, [], dict(pins), {}, {}, "ready", "", 1.0, False))
        for node, statuses in shows.items():
            for name, status in statuses.items():
                signature = SIGNATURE if status in ("error", "fail") else ""
                store.add_outcome(Outcome(run, cell_id(name), node, 0, Status(status), signature=signature, started_at=f"{day}T10:00:00"))


@pytest.fixture
def at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    import streamlit as st

    path = tmp_path / "suite.duckdb"
    sweep(
        path,
        "s1",
        "2026-11-01",
        {
            SKIPPED: {"A": "not_applicable", "C": "not_applicable"},
            BROKEN: {"A": "error", "C": "error"},
            "t/test_x.py::test_ok": {"A": "pass", "C": "pass"},
        },
    )
    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(path))
    st.cache_data.clear()
    app = AppTest.from_file(APP, default_timeout=60)
    app.run()
    app.switch_page("views/pin.py")
    app.run()
    yield app
    st.cache_data.clear()


def texts(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in [*at.markdown, *at.code, *at.error, *at.warning])


def test_a_new_sweep_changes_the_chosen_tests_and_the_pin_on_the_same_choice(at: AppTest, tmp_path: Path) -> None:
    at.text_area(key="pin_tests").set_value("t/test_x.py::TestK").run()
    assert "**1** test(s) chosen (1 tests in 1 groups: t/test_x.py::TestK (1)); 1 left out" in texts(at)
    at.button(key="pin_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "No stored version set passes every chosen test on cpu." in at.error[0].value
    assert "Never passed on cpu" in at.warning[0].value and BROKEN in texts(at)  # the lines that say why, kept with the pin

    # the next night: the skipped test runs and passes, and the broken one passes in the newer cell
    sweep(tmp_path / "suite.duckdb", "s2", "2026-11-02", {SKIPPED: {"A": "pass", "C": "pass"}, BROKEN: {"A": "error", "C": "pass"}})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = texts(at)
    assert "**2** test(s) chosen" in shown and "left out" not in shown  # not the count kept from the first night
    assert not at.metric  # a new choice of tests: pinned when asked
    at.button(key="pin_go").click().run()
    assert not at.error, [e.value for e in at.error]
    assert {m.label: m.value for m in at.metric}["transformers"] == "5.23.0"  # both pass in C now
