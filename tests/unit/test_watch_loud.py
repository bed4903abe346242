"""`harness watch` decides over the loud rows (`queries.loud_rows`) what it decides over every row.

Over a suite's file with history, flaky tests, xfails, skips and a test file that stopped
importing, the known-good set a watch guards and its verdict on a newer release are the same
whether the quiet tests are read one by one (`HARNESS_EVERY_ROW=1`) or as one stand-in; and the
loud read holds far fewer rows (what lets a 100,000-test suite's watch fit in memory).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.analysis import watch
from harness.analysis.quiet import STAND_IN, Quiet
from harness.analysis.versions import version_key
from harness.storage.store import Store
from harness.workflows.answering import EVERY_ROW, answer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("watch-loud") / "suite.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "300", "--cells", "6"]
    subprocess.run([*made, "--runs", "3", "--drift", "0.05", "--broken-file", "20", "--out", str(db)], check=True, capture_output=True)
    return db


def _decide(db: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(the guarded set, the verdict on the newest other transformers release, rows read), as `harness watch` decides them."""
    with Store(db, read_only=True) as store:
        found = answer(store, loud=True)
    good = watch.known_good(found.rows, found.quiet)
    assert good is not None
    held = dict(good.versions)
    stored = sorted({str(r["transformers"]) for r in found.rows if r.get("transformers")}, key=version_key)
    newer = [v for v in stored if v != held.get("transformers")]
    targets = watch.plan_targets(good, {"transformers": newer[-1:]})
    mine = [r for t in targets for r in watch.rows_of(t, found.rows)]
    results = watch.verdict(good, targets, found.rows, mine, list(found.transitions), "", found.quiet)
    said = {
        "pin": good.pin.to_dict(),
        "guarded": good.guarded,
        "dropped": good.dropped,
        "statuses": good.statuses,
        "signatures": good.signatures,
        "labels": good.labels,
    }
    return said, [r.to_dict(good.guarded) for r in results], len(found.rows)


def test_the_guarded_set_and_the_verdict_are_those_of_every_row(suite: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loud, loud_verdict, loud_rows = _decide(suite)
    monkeypatch.setenv(EVERY_ROW, "1")
    every, every_verdict, every_rows = _decide(suite)
    assert loud == every
    assert loud_verdict == every_verdict
    assert loud_rows < every_rows / 2  # most of the suite's tests pass everywhere: one stand-in
    assert STAND_IN not in str(loud) and STAND_IN not in str(loud_verdict)
    assert len(loud["guarded"]) > 100  # the quiet tests are guarded, each by name
    statuses = loud_verdict[0]["statuses"] if loud_verdict else {}
    assert statuses and all(s in statuses for s in loud["guarded"])  # the target cell ran every guarded test


def test_a_guarded_quiet_test_is_a_pass_in_the_target_not_a_test_not_run() -> None:
    """verdict over a stand-in: its tests passed in the target's cell; a guarded test with no row and no stand-in was not run."""
    rows = [
        {"cell_id": f"p{v}", "scenario": s, "status": "pass", "repeat": 0, "run_id": "r-1", "gpu": "cpu",
         "platform": "linux-x86_64", "python": "3.11", "versions": {"packaging": v}, "started_at": "2026-01-01"}
        for v in ("21.3", "22.0") for s in ("t.py::a", STAND_IN)
    ]  # fmt: skip
    quiet = Quiet(("t.py::b", "t.py::c"))
    good = watch.known_good(rows[:2], quiet)
    assert good is not None and good.guarded == ("t.py::a", "t.py::b", "t.py::c")
    assert dict(good.statuses) == {"t.py::a": "pass", "t.py::b": "pass", "t.py::c": "pass"}
    target = watch.plan_targets(good, {"packaging": ["22.0"]})
    with_stand_in = watch.verdict(good, target, rows, rows[2:], [], "", quiet)[0]
    assert with_stand_in.findings == () and with_stand_in.passes(good.guarded)
    without = watch.verdict(good, target, rows, rows[2:3], [], "", quiet)[0]
    assert [(f.kind, f.scenario) for f in without.findings] == [("not_run", "t.py::b"), ("not_run", "t.py::c")]
