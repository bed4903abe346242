"""`queries.each_outcome_row` (what `harness summary --json` prints) is `queries.outcome_rows`, a chunk at a time.

Over a suite's file with history and tests flaky across runs, in chunks far smaller than the
file (so the connection serves several chunks, and the flaky marks read before them hold), of
every run and of one, the rows are the same rows in the same order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from harness.storage import queries
from harness.storage.store import Store
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("chunks") / "suite.duckdb"
    made = [sys.executable, str(REPO / "benchmarks" / "make_large_store.py"), "--tests", "120", "--cells", "3"]
    subprocess.run([*made, "--runs", "3", "--drift", "0.1", "--out", str(db)], check=True, capture_output=True)
    with duckdb.connect(str(db)) as con:  # as `history.settle` marks a test whose history flips with nothing changed
        con.execute(
            "INSERT INTO flaky SELECT run_id, cell_id, COALESCE(nullif(test_id, ''), scenario), 'E: boom', "
            "'flaky across runs: failed in 1 of 2 runs' FROM outcomes ORDER BY scenario, cell_id LIMIT 5"
        )
    return db


@pytest.mark.parametrize("chunk", [7, 100_000])
def test_the_chunks_are_every_row_in_order(suite: Path, chunk: int) -> None:
    with Store(suite, read_only=True) as store:
        every = queries.outcome_rows(store)
        chunked = list(queries.each_outcome_row(store, chunk=chunk))
        run = every[-1]["run_id"]
        of_run = queries.outcome_rows(store, run)
        chunked_run = list(queries.each_outcome_row(store, run, chunk=chunk))
    assert len(every) > 300 and chunked == every
    assert any("flaky_across" in r for r in every)  # the marks read before the chunks are on them
    assert chunked_run == of_run


def test_summary_json_prints_every_row(suite: Path) -> None:
    with Store(suite, read_only=True) as store:
        every = queries.outcome_rows(store)
    proc = run_cli("summary", "--db", str(suite), "--json")
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert printed == [json.loads(json.dumps(r, default=str)) for r in every]
