"""A one-shot command (`cli.ONE_SHOT`) run as the process ends without freeing its answers one by one
(`cli._exit_now`): its output is whole, its exit code kept, its scratch folder gone; a caller of
`main` in-process (a test) gets the code back instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.workflows import answering

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("exit") / "suite.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "200", "--cells", "3", "--out", str(db)]
    subprocess.run(made, check=True, capture_output=True)
    return db


def _process(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "COLUMNS": "120", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env, cwd=REPO)


def test_the_process_prints_what_the_call_prints_and_leaves_no_scratch(
    suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _process(["summary", "--db", str(suite)], scratch)
    assert done.returncode == 0, done.stderr
    assert list(scratch.iterdir()) == []  # the exit handlers ran: this run's scratch folder is gone
    monkeypatch.setenv("COLUMNS", "120")
    assert cli.main(["summary", "--db", str(suite)]) == 0  # in-process: the code comes back
    assert answering._HELD is None  # and nothing is held for the caller's life
    printed = capsys.readouterr().out
    assert done.stdout == printed and "Grid" in printed  # every line flushed before the process ended


def test_a_one_shot_command_keeps_its_exit_code(suite: Path, tmp_path: Path) -> None:
    done = _process(["pin", "--db", str(suite), "--test", "no/such/test.py"], tmp_path)
    assert done.returncode == 2 and "selects no stored test" in done.stderr
    assert done.stdout == ""
