"""A test flaky across runs is worded as such everywhere it shows (#49 item 4), through the real CLI.

A matrix with `repeats = 1`, two nights with nothing changed: the split 4-bit load passed in the
first run with peft 0.19.1 and failed in the second (with peft 0.20.0 it passed both times).
The results file's history marks it flaky (nothing it depends on changed between the runs).
`harness summary`, `attribute` (text and --json), `report` and `publish` say it "failed in 1 of 2
runs with nothing changed", never "1 of 2 repeat(s)": each run had one repeat. A pin over it says
it flipped across runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.analysis.outcome import CellRecord, Outcome, Status
from harness.storage.store import Store
from tests.conftest import run_cli

SIG = "KeyError: <key> @ peft/tuners/lora/model.py:_create_new_module"
SAID = "flaky across runs: failed in 1 of 2 runs with nothing changed (torch 2.13.0, peft 0.19.1) on cpu · linux-x86_64 · Python 3.11"
SETTINGS = {"python": "3.11", "repeats": 1, "inputs": {"scenarios": {"load": "18a71c0697fd"}, "paths": {}}}
HOST = {"platform": "linux-x86_64", "gpu": "cpu", "gpus": []}


def _night(store: Store, run: str, when: str, fails: bool) -> None:
    store.ensure_run(run, "matrix.toml", "[matrix]\nrepeats = 1\n", SETTINGS, "0.1.0", HOST)
    for peft in ("0.19.1", "0.20.0"):
        versions = {"torch": "2.13.0", "peft": peft}
        cell = f"torch2.13.0-peft{peft}"
        requirements = [f"{k}=={v}" for k, v in versions.items()]
        store.record_cell(
            CellRecord(run, cell, "3.11", versions, requirements, {**versions, "torch": "2.13.0+cpu"}, {}, {}, "ready", "", 1.0, False)
        )
        failing = fails and peft == "0.19.1"
        store.add_outcome(
            Outcome(
                run,
                cell,
                "load",
                0,
                Status.ERROR if failing else Status.PASS,
                message="KeyError: 22" if failing else "",
                signature=SIG if failing else "",
                signature_family="5d41402abc4b" if failing else "",
                blamed_library="peft" if failing else "",
                exception_type="KeyError" if failing else "",
                seconds=1.0,
                started_at=when,
            )
        )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "nights.duckdb"
    with Store(path) as store:
        _night(store, "r-night-1", "2026-11-20T03:00:00", fails=False)
    with Store(path) as store:
        _night(store, "r-night-2", "2026-11-21T03:00:00", fails=True)
    return path


def _wide() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "400"}


def test_summary_and_attribute_say_flaky_across_runs(db: Path) -> None:
    summary = run_cli("summary", "--db", str(db), env=_wide())
    assert summary.returncode == 0, summary.stderr
    said = " ".join(summary.stdout.split())
    assert f"load: {SAID}" in said and "repeat(s)" not in said, said
    text = run_cli("attribute", "--db", str(db), "--offline", env=_wide())
    assert text.returncode == 0, text.stderr
    assert "failed in" in text.stdout and "1/2 runs" in text.stdout and "repeat" not in text.stdout, text.stdout
    records = [json.loads(line) for line in run_cli("attribute", "--db", str(db), "--offline", "--json").stdout.splitlines()]
    [flaky] = [r for r in records if r["kind"] == "flaky"]
    assert (flaky["description"], flaky["across_runs"], flaky["runs_failed"], flaky["runs_total"]) == (SAID, True, 1, 2)


def test_the_report_and_the_page_say_flaky_across_runs(db: Path, tmp_path: Path) -> None:
    report = run_cli("report", "--db", str(db), "--signature", "KeyError")
    assert report.returncode == 0, report.stderr
    body = report.stdout
    assert "| 2.13.0+cpu | **0.19.1** | flaky across runs: fails in 1 of 2 runs | `torch2.13.0-peft0.19.1` |" in body, body
    assert f"- `load`: flaky across runs, on 1 line(s) of the matrix:\n  - {SAID}\n" in body
    assert "fixed between" not in body and "repeat(s)" not in body  # a flip with nothing changed is no fix
    assert "flaky in 1." in body
    site = run_cli("publish", "--db", str(db), "--out", str(tmp_path / "site"))
    assert site.returncode == 0, site.stderr
    assert f"<li>load: {SAID}</li>" in (tmp_path / "site" / "index.html").read_text()


def test_a_pin_says_it_flipped_across_runs(db: Path) -> None:
    pin = run_cli("pin", "--db", str(db), "--scenario", "load", "--fix", "peft=0.19.1")
    assert pin.returncode == 1, pin.stdout + pin.stderr
    assert "flaky across runs: passed in r-night-1, failed in r-night-2" in pin.stdout and "with nothing changed" in pin.stdout, pin.stdout
