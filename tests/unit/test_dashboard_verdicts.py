"""The dashboard holds no verdict logic and parses no text (#23 item 2): bisections are judged as
`harness bisect` judges them (`analysis.bisect`), their axis and values come from stored fields,
and the Failures table's answers are built from a transition's fields, never cut out of its words.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("streamlit", reason="the dashboard needs streamlit (pip install -e '.[dev]')")
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboard/ is not part of the installed package: import it from the checkout

from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard import logic  # noqa: E402
from harness.analysis.attribution import MachineDifference, Transition  # noqa: E402
from harness.analysis.bisect import Verdict, bisect, repeat_verdict  # noqa: E402
from harness.analysis.outcome import CellRecord, Outcome, Status  # noqa: E402
from harness.storage import pages  # noqa: E402
from harness.storage.store import Store  # noqa: E402

APP = str(REPO / "dashboard" / "app.py")
CPU = {"hostname": "ci", "platform": "linux-x86_64", "gpu_count": 0, "gpu": "cpu", "gpus": []}
SIG = "KeyError: <key> @ peft/tuners/lora/model.py:_create_new_module"
NODE = "tests/test_lora.py::TestMerge::test_merge[4bit]"
#: What `harness bisect --test NODE --axis peft` stores: the node id made safe for a run id (bisection.py).
RUN = "bisect-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", NODE).strip("_") + "-peft"
#: peft release -> the probe's status: the release after the last good one could not be installed.
PROBES = {"0.19.1": "pass", "0.20.0": "pass", "0.20.1": "install_failed", "0.21.0": "error", "0.21.2": "error"}


def probe_rows(statuses: dict[str, str], axis: str = "accelerate", scenario: str = "load") -> list[dict[str, object]]:
    """Rows shaped as `pages.bisection_probes_by_axis` returns them, one probe per version."""
    return [
        {"run_id": "b", "cell_id": f"c-{v}", "scenario": scenario, "status": s, "signature": "", "axis": axis, "value": v, "commit": ""}
        for v, s in statuses.items()
    ]


def searched(statuses: dict[str, str]) -> tuple[str, str, list[str]]:
    """What the search itself answers over the same probes, between the outermost ones it can judge
    (as `harness bisect` was given them), good end first: (last good, first bad, undecided)."""
    verdicts = {v: repeat_verdict([s]) for v, s in statuses.items()}
    judged = [v for v in statuses if verdicts[v] != Verdict.SKIP]
    line = list(statuses)[list(statuses).index(judged[0]) : list(statuses).index(judged[-1]) + 1]
    found = bisect(line if verdicts[line[0]] == Verdict.GOOD else line[::-1], verdicts.__getitem__)
    return found.last_good, found.first_bad, found.undecided


@pytest.mark.parametrize(
    ("statuses", "answer"),
    [
        # an install_failed probe says nothing: the old page counted it bad ("changes between 1.13.1 (install_failed) and 1.14.0")
        (
            {"1.13.0": "error", "1.13.1": "install_failed", "1.14.0": "pass"},
            "fixed in accelerate 1.14.0; still failing in 1.13.0; undecided (could not build or run): 1.13.1",
        ),
        # an inconclusive probe at the bad end is a skip too: the change lies at the last judged bad one
        ({"1.13.0": "pass", "1.14.0": "fail", "1.15.0": "inconclusive"}, "broken in accelerate 1.14.0; last good 1.13.0"),
        ({"1.13.0": "pass", "1.13.1": "unresolvable", "1.14.0": "xfail", "1.15.0": "error"}, None),
    ],
)
def test_a_bisection_is_judged_as_harness_bisect_judges_it(statuses: dict[str, str], answer: str | None) -> None:
    (found,) = logic.bisections(probe_rows(statuses))
    assert list(found.probes["verdict"]) == [repeat_verdict([s]).value for s in statuses.values()]
    good, bad, undecided = searched(statuses)
    fixed = repeat_verdict([statuses[good]]) == Verdict.GOOD and list(statuses).index(good) > list(statuses).index(bad)
    words = f"fixed in accelerate {good}; still failing in {bad}" if fixed else f"broken in accelerate {bad}; last good {good}"
    if undecided:
        words += f"; undecided (could not build or run): {', '.join(undecided)}"
    assert found.answer == words == (answer or words)


def test_probes_that_never_change_verdict_say_so() -> None:
    (same,) = logic.bisections(probe_rows({"1.13.0": "error", "1.14.0": "install_failed", "1.15.0": "fail"}))
    assert same.answer == "no change of verdict among the probes (bad)"
    (silent,) = logic.bisections(probe_rows({"1.13.0": "install_failed", "1.14.0": "not_applicable"}))
    assert silent.answer == "no probe says anything (every one was skipped)"


def record(run: str, peft: str) -> CellRecord:
    pins = {"torch": "2.13.0", "transformers": "5.23.0", "accelerate": "1.14.0", "peft": peft}
    cell = f"torch2.13.0-tf5.23.0-acc1.14.0-peft{peft}"
    status = "install_failed" if PROBES[peft] == "install_failed" else "ready"
    return CellRecord(run, cell, "3.11", pins, [f"{k}=={v}" for k, v in pins.items()], dict(pins), {}, {}, status, "", 1.0, False)


@pytest.fixture
def bisected(tmp_path: Path) -> Path:
    """A results file with one `harness bisect --test` run over peft, one probe of which did not install."""
    path = tmp_path / "bisect.duckdb"
    with Store(path) as store:
        store.ensure_run(RUN, "matrix.toml", "", {}, "0.1.0", CPU)
        for i, (peft, status) in enumerate(PROBES.items()):
            cell = record(RUN, peft)
            store.record_cell(cell)
            failed = status == "error"
            store.add_outcome(
                Outcome(
                    RUN,
                    cell.cell_id,
                    NODE,
                    0,
                    Status(status),
                    message="KeyError: 'lora_A'" if failed else "",
                    signature=SIG if failed else "",
                    started_at=f"2026-11-03T10:0{i}:00",
                )
            )
    return path


def test_the_bisection_read_names_the_axis_from_the_stored_cells(bisected: Path) -> None:
    with Store(bisected, read_only=True) as store:
        rows = pages.bisection_probes_by_axis(store)
    # the run id of a node id is no `bisect-<scenario>-<axis>` a reader could cut apart: the cells say peft
    assert {(r["axis"], r["scenario"]) for r in rows} == {("peft", NODE)}
    assert [r["value"] for r in rows] == list(PROBES)
    assert not any(r["commit"] for r in rows)


def test_the_failures_page_shows_a_test_bisection_as_the_analysis_judges_it(bisected: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streamlit as st

    monkeypatch.setenv("HARNESS_DASHBOARD_DB", str(bisected))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/failures.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = "\n".join(str(m.value) for m in at.markdown)
    good, bad, undecided = searched(PROBES)
    assert (good, bad, undecided) == ("0.20.0", "0.21.0", ["0.20.1"])
    answer = "broken in peft 0.21.0; last good 0.20.0; undecided (could not build or run): 0.20.1"
    assert f"**{NODE}** along **peft** (run `{RUN}`): {answer}" in shown
    probes = at.dataframe[-1].value
    assert list(probes["version"]) == list(PROBES)
    assert list(probes["verdict"]) == ["good", "good", "skip", "bad", "bad"]
    st.cache_data.clear()


# -- answers from fields, not from words ---------------------------------------------------------
TRANSITIONS: Sequence[Transition] = (
    Transition("s", "SIG", "accelerate", "fixed", "1.13.0", "1.14.0", (("torch", "2.13.0"),)),
    Transition("s", "SIG", "transformers", "introduced", "5.6.2", "5.10.4", (), not_built=("5.7.0", "5.8.1")),
    Transition("s", "SIG", "peft", "fixed", "0.19.1", "0.21.2", (), inconclusive=("0.20.0 (install_failed)",)),
)


@pytest.mark.parametrize("transition", TRANSITIONS, ids=lambda t: t.axis)
def test_an_answer_is_its_headline_without_the_verb(transition: Transition) -> None:
    row = transition.to_dict()
    verb = f"{transition.kind} " + ("in " if transition.exact else "")
    assert transition.headline().startswith(verb)
    assert logic.answer_text(row) == transition.headline().removeprefix(verb)


def test_a_machine_difference_is_named_from_its_fields() -> None:
    held = (("torch", "2.13.0"), ("transformers", "5.23.0"))
    differences = [
        MachineDifference("s", "SIG", "1x NVIDIA H200", "cpu", "", "", "", held),
        MachineDifference("s", "SIG", "1x NVIDIA H200", "cpu", "torch", "2.11.0", "2.13.0", held),
    ]
    rows = [{**d.to_dict(), "lines": 1} for d in differences]
    columns = logic.transition_columns(rows)
    assert columns["SIG"]["machine"] == "; ".join(d.headline() for d in differences)
    assert " — with " not in columns["SIG"]["machine"]  # the held axes belong to each line, not to the signature's answer
    # a file written before other_machine was stored: its stored description, whole
    assert logic.machine_text({**rows[0], "other_machine": ""}) == differences[0].describe()


def test_the_fixed_in_column_puts_lines_inferred_from_an_exact_answer_under_it() -> None:
    def group(before: str, after: str, untested: list[str], lines: int, inconclusive: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            "signature": "SIG",
            "kind": "fixed",
            "axis": "transformers",
            "before": before,
            "after": after,
            "untested": untested,
            "inconclusive": list(inconclusive),
            "machine": "cpu",
            "lines": lines,
        }

    exact = group("5.10.4", "5.11.0", [], 1)
    around = group("5.6.2", "5.23.0", ["5.10.4", "5.11.0", "5.15.0"], 7)
    columns = logic.transition_columns([exact, around])
    assert columns["SIG"]["fixed"] == "transformers 5.11.0 (after 5.10.4); inferred on 7 more line(s), not built there"
    # a range that holds an inconclusive release stays a range, beside the exact answer
    unsure = group("5.6.2", "5.23.0", ["5.10.4", "5.11.0"], 7, inconclusive=("5.15.0 (not_applicable)",))
    text = logic.transition_columns([exact, unsure])["SIG"]["fixed"]
    assert text.startswith("transformers 5.11.0 (after 5.10.4); between transformers 5.6.2") and "inferred" not in text
